"""The scripts of ``benchmarks/`` are committed evidence: each must at least compile on
every Python the package supports, and ``benchmarks/README.md`` must list each one in the
section of its folder (and list no script that does not exist)."""

import ast
import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*/*.py"))


def _index():
    """``folder/script.py`` of every table row of the README, by the ``## `folder/` `` heading
    above it."""
    listed, folder = set(), None
    for line in (BENCHMARKS / "README.md").read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## `([\w-]+)/`", line)
        if heading:
            folder = heading.group(1)
        row = re.match(r"\| `([\w.-]+\.py)` \|", line)
        if row:
            assert folder is not None, f"{row.group(1)} is listed before any folder heading"
            listed.add(f"{folder}/{row.group(1)}")
    return listed


def test_scripts_are_in_folders():
    assert SCRIPTS, "no benchmark script found"
    assert not sorted(BENCHMARKS.glob("*.py")), "benchmark scripts belong in a purpose folder"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_compiles(script):
    # ast.parse at this interpreter's grammar: the f-string quoting of Python 3.12 (the same
    # quote inside a replacement field) is a SyntaxError on 3.10-3.11
    ast.parse(script.read_text(encoding="utf-8"), filename=str(script))


def test_index_matches_the_scripts():
    on_disk = {p.relative_to(BENCHMARKS).as_posix() for p in SCRIPTS}
    listed = _index()
    missing = sorted(on_disk - listed)
    assert not missing, f"benchmarks/README.md does not list {missing}"
    stale = sorted(listed - on_disk)
    assert not stale, f"benchmarks/README.md lists scripts that do not exist: {stale}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_runnable_script_parses_its_arguments(script):
    # benchmarks/README.md promises `python <script> --help`: a script that ignored its
    # arguments started its whole study on --help or on a misspelt flag
    source = script.read_text(encoding="utf-8")
    if "__main__" not in source:
        return
    tree = ast.parse(source)
    parsers = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute)
               and n.attr == "ArgumentParser"]
    delegated = re.search(r"from (\w+) import main as \w+", source)  # another script's parser
    assert parsers or delegated, f"{script.name} runs as a script without an argument parser"
    assert "sys.argv" not in source, f"{script.name} reads sys.argv beside its parser"
