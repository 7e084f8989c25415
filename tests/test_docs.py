"""The examples run as written (the README's code: tests/test_readme.py)."""

import importlib.util
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
