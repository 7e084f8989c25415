"""The README's code and the examples run as written."""

import re
import runpy
from pathlib import Path

import pytest
import sklearn

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_blocks_run():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    namespace = {}
    try:
        for block in blocks:
            exec(compile(block, "README.md", "exec"), namespace)
    finally:
        sklearn.set_config(enable_metadata_routing=False)


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_example_runs(path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    runpy.run_path(str(path), run_name="__main__")
    import matplotlib.pyplot as plt

    plt.close("all")
