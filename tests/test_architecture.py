"""Import boundaries between subpackages, checked on the source with ``ast``.

The federated engine (``skfed.federated``) and the privacy tools
(``skfed.privacy``) are the layer the estimators are built on: they must not
import an estimator subpackage, neither at module level nor inside a
function, or the layers would depend on each other.
"""

import ast
from pathlib import Path

import pytest

import skfed

PACKAGE_ROOT = Path(skfed.__file__).parent
LOWER_LAYERS = ("federated", "privacy")
ESTIMATOR_SUBPACKAGES = ("gaussian_process", "linear_model", "tensor", "baselines", "benchmark")


def _package_of(path, root):
    """The package a module's relative imports are resolved against."""
    return ".".join(path.parent.relative_to(root.parent).parts)


def imported_modules(path, root=PACKAGE_ROOT):
    """Absolute names of every module ``path`` imports, wherever the statement is.

    ``from X import y`` yields both ``X`` and ``X.y`` (``y`` may be a
    submodule); ``importlib.import_module("...")`` and ``__import__("...")``
    with a literal name count as imports too.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(path, root)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def _is_estimator_module(name):
    parts = name.split(".")
    return len(parts) >= 2 and parts[0] == "skfed" and parts[1] in ESTIMATOR_SUBPACKAGES


def _lower_layer_files():
    return sorted(
        path for layer in LOWER_LAYERS for path in (PACKAGE_ROOT / layer).rglob("*.py")
    )


def test_lower_layers_are_found():
    files = _lower_layer_files()
    assert {p.relative_to(PACKAGE_ROOT).parts[0] for p in files} == set(LOWER_LAYERS)
    assert all((PACKAGE_ROOT / name).is_dir() for name in ESTIMATOR_SUBPACKAGES)


@pytest.mark.parametrize(
    "path", _lower_layer_files(), ids=lambda p: str(p.relative_to(PACKAGE_ROOT))
)
def test_lower_layers_do_not_import_estimators(path):
    bad = [
        f"line {line}: {name}" for line, name in imported_modules(path)
        if _is_estimator_module(name)
    ]
    assert not bad, f"{path.relative_to(PACKAGE_ROOT)} imports an estimator subpackage: {bad}"


def _probe(tmp_path, source):
    """A fake module at skfed/federated/_probe.py (relative imports resolve there)."""
    root = tmp_path / "skfed"
    (root / "federated").mkdir(parents=True)
    path = root / "federated" / "_probe.py"
    path.write_text(source, encoding="utf-8")
    return path, root


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from ..linear_model import DPFedDROClassifier", True),
        ("from .. import tensor", True),
        ("def f():\n    from skfed.baselines import LocalEstimator", True),
        ("import skfed.gaussian_process._elbo", True),
        ("import importlib\nimportlib.import_module('skfed.benchmark')", True),
        ("from ..utils._validation import check_groups", False),
        ("from ._engine import run_federation", False),
        ("import numpy as np", False),
    ],
)
def test_the_checker_sees_imports(tmp_path, source, expected):
    path, root = _probe(tmp_path, source)
    names = [name for _, name in imported_modules(path, root)]
    assert any(_is_estimator_module(n) for n in names) is expected, names


def _is_module(name):
    parts = name.split(".")[1:]
    return (PACKAGE_ROOT.joinpath(*parts).with_suffix(".py").is_file()
            or PACKAGE_ROOT.joinpath(*parts).is_dir())


def _private_names_imported(path, root=PACKAGE_ROOT):
    """``(line, name)`` of every underscore name (not a private module) imported from skfed."""
    return [
        (line, name) for line, name in imported_modules(path, root)
        if name.startswith("skfed.") and name.rpartition(".")[2].startswith("_")
        and not name.rpartition(".")[2].startswith("__") and not _is_module(name)
    ]


def test_flower_imports_nothing_private_from_the_engine():
    # a distributed engine uses the documented protocol (skfed.federated's public names:
    # run_rounds, client_round, Stream, setup_exchange), so the in-process engine can change
    # its internals without breaking it; Flower's own helper modules are its internals
    path = PACKAGE_ROOT / "federated" / "flower.py"
    bad = [f"line {line}: {name}" for line, name in _private_names_imported(path)]
    bad += [f"line {line}: {name}" for line, name in imported_modules(path)
            if name.startswith("skfed.") and any(
                part.startswith("_") and not part.startswith(("__", "_flower_"))
                for part in name.split("."))]
    assert not bad, f"skfed/federated/flower.py imports private names: {bad}"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from ._engine import _drive_rounds", True),
        ("from skfed.federated._engine import _CLIENT_INIT", True),
        ("from ._engine import drive_rounds, Stream", False),
        ("from . import _engine", False),  # a private module, not a private name
        ("from ..utils._validation import check_fraction", False),
    ],
)
def test_the_checker_sees_private_names(tmp_path, source, expected):
    path, root = _probe(tmp_path, source)
    assert bool(_private_names_imported(path, root)) is expected


PRIVATE_SUBPACKAGES = ("linear_model", "tensor")  # the estimators with DP releases


@pytest.mark.parametrize(
    "path",
    sorted(p for sub in PRIVATE_SUBPACKAGES for p in (PACKAGE_ROOT / sub).rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE_ROOT)),
)
def test_private_estimators_draw_noise_through_skfed_privacy(path):
    # one place (skfed.privacy.gaussian_noise) checks sigma and makes the draw
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = [node.lineno for node in ast.walk(tree)
           if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
           and node.func.attr in ("standard_normal", "normal")]
    assert not bad, f"{path.relative_to(PACKAGE_ROOT)} draws Gaussian noise inline: lines {bad}"
