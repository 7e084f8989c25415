"""Every ```python block of README.md runs on its own, as a reader would paste it.

Each block runs in a fresh namespace: a block that uses a name defined only in
another block fails here. A block that switches on scikit-learn's metadata
routing leaves the configuration as it found it afterwards.
"""

import re
from pathlib import Path

import pytest
import sklearn

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)


def _line_of(block):
    return README[:README.index(block)].count("\n") + 1


def test_readme_has_the_quickstart_blocks():
    assert len(BLOCKS) >= 3
    quickstart = BLOCKS[0]
    assert 'load_multilevel("sleepstudy")' in quickstart
    assert "PFedHGPRegressor(" in quickstart and "return_std=True" in quickstart


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{_line_of(b)}" for b in BLOCKS])
def test_readme_block_runs_standalone(block):
    code = compile("\n" * (_line_of(block) - 1) + block, str(ROOT / "README.md"), "exec")
    with sklearn.config_context():  # restores the configuration a block changes
        exec(code, {"__name__": "__main__"})
