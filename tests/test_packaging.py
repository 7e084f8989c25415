"""What the README's two commands install."""

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def _extras():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _names(requirements):
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_benchmark_command_installs_no_torch():
    """``skfed benchmark`` uses no torch; the GPyTorch comparison script has its own extra."""
    extras = _extras()
    assert not {"torch", "gpytorch"} & _names(extras["bench"])
    assert {"torch", "gpytorch"} <= _names(extras["gpytorch"])
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[bench]" && skfed benchmark' in readme
    for path in (ROOT / "skfed").rglob("*.py"):
        assert not re.search(r"^\s*(import|from)\s+(torch|gpytorch)\b", path.read_text(), re.M), path


def test_the_flower_extras_bring_skops():
    """A fitted estimator crosses to the sites in skops format (no pickle)."""
    extras = _extras()
    for name in ("flower", "simulation", "test"):
        assert "skops" in _names(extras[name]), name


def test_messages_install_extras_from_the_clone_as_the_readme_does():
    """skfed is installed from its clone (README): no message names a ``skfed[extra]``
    distribution to download."""
    readme = (ROOT / "README.md").read_text()
    assert 'python -m pip install -e ".[bench]"' in readme
    for path in (ROOT / "skfed").rglob("*.py"):
        assert "skfed[" not in path.read_text(), path
