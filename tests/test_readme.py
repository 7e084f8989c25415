"""Every ```python block of README.md (and of the home page, doc/index.md) runs on its
own, as a reader would paste it.

Each block runs in a fresh namespace: a block that uses a name defined only in
another block fails here. A block that switches on scikit-learn's metadata
routing leaves the configuration as it found it afterwards.
"""

import re
from pathlib import Path

import pytest
import sklearn

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "doc/index.md")
TEXT = {page: (ROOT / page).read_text() for page in PAGES}
BLOCKS = [(page, TEXT[page][:match.start(1)].count("\n") + 1, match.group(1))
          for page in PAGES
          for match in re.finditer(r"^```python\n(.*?)^```", TEXT[page], flags=re.S | re.M)]


def test_readme_has_the_quickstart_blocks():
    readme = [code for page, _, code in BLOCKS if page == "README.md"]
    assert len(readme) >= 3
    quickstart = readme[0]
    assert 'load_multilevel("sleepstudy")' in quickstart
    assert "PFedHGPRegressor(" in quickstart and "return_std=True" in quickstart
    assert any(page == "doc/index.md" for page, _, _ in BLOCKS)


@pytest.mark.parametrize("page, line, code", BLOCKS,
                         ids=[f"{page}:{line}" for page, line, _ in BLOCKS])
def test_python_block_runs_standalone(page, line, code):
    compiled = compile("\n" * (line - 1) + code, str(ROOT / page), "exec")
    with sklearn.config_context():  # restores the configuration a block changes
        exec(compiled, {"__name__": "__main__"})
