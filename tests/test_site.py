"""The documentation site builds with ``-W``, documents every public name and
runs every gallery example to its figure.

The build runs on a copy of ``doc/`` and ``examples/`` (the repository is not
written to) with ``SKFED_DOC_QUICK=1``: the examples use smaller data and
fewer rounds, as ``doc/conf.py`` describes. It needs the ``doc`` packages
(in the ``test`` extra); without them the build test is skipped.
"""

import importlib
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import skfed

ROOT = Path(__file__).resolve().parents[1]
DOC_PACKAGES = ("sphinx", "numpydoc", "sphinx_gallery", "pydata_sphinx_theme", "myst_parser",
                "flwr", "skops")
MISSING = [name for name in DOC_PACKAGES if importlib.util.find_spec(name) is None]
EXAMPLES = sorted((ROOT / "examples").glob("plot_*.py"))


def public_modules():
    """Every ``skfed.<module>`` with an ``__all__`` (a new one is checked too), and the
    Flower module (not imported by its package: it needs the ``flower`` extra)."""
    names = sorted(p.parent.name for p in (ROOT / "skfed").glob("*/__init__.py")
                   if not p.parent.name.startswith("_")) + ["federated.flower"]
    modules = [importlib.import_module(f"skfed.{name}") for name in names]
    return [m for m in modules if hasattr(m, "__all__")]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if MISSING:
        pytest.skip(f"documentation packages not installed: {', '.join(MISSING)} "
                    '(pip install -e ".[doc]")')
    src = tmp_path_factory.mktemp("site")
    ignore = shutil.ignore_patterns("_build", "generated", "auto_examples", "gen_modules",
                                    "sg_execution_times.rst", "__pycache__")
    shutil.copytree(ROOT / "doc", src / "doc", ignore=ignore)
    shutil.copytree(ROOT / "examples", src / "examples", ignore=ignore)
    out = src / "html"
    env = dict(os.environ, SKFED_DOC_QUICK="1", MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-j", "1", "-q", "-b", "html",
         str(src / "doc"), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (
        f"sphinx-build -W failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return out


def test_every_public_name_has_a_page(site):
    missing = []
    for module in public_modules():
        for name in module.__all__:
            obj = getattr(module, name)
            full = f"{module.__name__}.{name}"
            if inspect.isclass(obj) or callable(obj):
                page = site / "api" / "generated" / f"{full}.html"
            else:  # constants are documented on their module's page
                page = site / "api" / f"{module.__name__.split('.', 1)[1]}.html"
            if not page.exists() or f'id="{full}"' not in page.read_text():
                missing.append(full)
    assert not missing, f"public names without an API page: {missing}"
    api = (site / "api.html").read_text()
    for name in skfed.__all__:  # the top-level re-exports link to their page
        if name != "__version__":
            obj = getattr(skfed, name)
            target = f"{obj.__module__.split('._')[0]}.{name}"
            assert f'href="api/generated/{target}.html' in api, name


def test_every_gallery_example_produced_its_figure(site):
    assert len(EXAMPLES) >= 5
    for path in EXAMPLES:
        page = site / "auto_examples" / f"{path.stem}.html"
        assert page.exists(), path.name
        assert (site / "_images" / f"sphx_glr_{path.stem}_001.png").exists(), path.name
        assert f"sphx_glr_{path.stem}_001.png" in page.read_text(), path.name


def test_each_estimator_has_a_gallery_example_on_real_data():
    text = {path.name: path.read_text() for path in EXAMPLES}
    for estimator in ("PFedHGPRegressor", "DPFedDROClassifier", "PersonalizedTensorRegressor",
                      "LocalEstimator", "PooledEstimator", "FedAvgRegressor", "MixedLMRegressor"):
        assert any(estimator in src and "load_multilevel(" in src for src in text.values()), \
            estimator


def test_getting_started_first_fit_runs():
    text = (ROOT / "doc" / "getting_started.rst").read_text()
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", text)
    assert blocks, "no python block in doc/getting_started.rst"
    code = "\n".join(line[3:] for line in blocks[0].splitlines())
    assert len([line for line in code.splitlines() if line.strip()]) <= 10
    exec(compile(code, "getting_started.rst", "exec"), {})
