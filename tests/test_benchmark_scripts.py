"""The scripts of ``benchmarks/`` are committed evidence: each must at least compile on
every Python the package supports, and ``benchmarks/README.md`` must list each one."""

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_compiles(script):
    # ast.parse at this interpreter's grammar: the f-string quoting of Python 3.12 (the same
    # quote inside a replacement field) is a SyntaxError on 3.10-3.11
    ast.parse(script.read_text(encoding="utf-8"), filename=str(script))


def test_every_script_is_in_the_index():
    index = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in SCRIPTS if f"`{p.name}`" not in index]
    assert not missing, f"benchmarks/README.md does not list {missing}"
