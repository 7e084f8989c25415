"""The README's code and the examples run as written."""

import importlib.util
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


SITE_BUILT = importlib.util.find_spec("sphinx_gallery") is not None


@pytest.mark.skipif(SITE_BUILT, reason="tests/test_site.py runs every example in its gallery build")
@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_example_runs(path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("SKFED_DOC_QUICK", "1")
    import matplotlib

    matplotlib.use("Agg")
    runpy.run_path(str(path), run_name="__main__")
    import matplotlib.pyplot as plt

    plt.close("all")
