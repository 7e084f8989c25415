"""What ``import skfed`` loads: its subpackages and heavy dependencies load on first use.

Each check runs in a fresh interpreter (the test process has imported
everything already) and compares ``sys.modules`` before and after each step.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import skfed

ROOT = str(Path(skfed.__file__).resolve().parents[1])

#: loaded only by the code that uses them
HEAVY = ("pandas", "statsmodels", "dp_accounting", "matplotlib", "flwr", "torch", "numba",
         "skops", "tensorly", "sklearn.cluster")
#: pulled in by scikit-learn itself (sklearn.utils.fixes imports them), so by any estimator
SKLEARN_DEPENDENCIES = ("pandas", "scipy.stats")
SUBPACKAGES = ("baselines", "benchmark", "datasets", "federated", "gaussian_process",
               "linear_model", "metrics", "model_selection", "preprocessing", "privacy",
               "tensor", "utils")

_PROBE = """
import importlib, json, sys
steps = json.loads(sys.argv[1])
new = {}
for name, code in steps:
    before = set(sys.modules)
    exec(code, {})
    new[name] = sorted(set(sys.modules) - before)
print(json.dumps(new))
"""


def _new_modules(steps):
    """``{step: modules it loaded}`` for ``[(step, code), ...]`` run in order in one process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(steps)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return {name: set(mods) for name, mods in json.loads(done.stdout.splitlines()[-1]).items()}


def _loaded(modules, names):
    """Which of ``names`` (packages: any of their modules) are in ``modules``."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


@pytest.fixture(scope="module")
def estimator_steps():
    return _new_modules([
        ("import skfed", "import skfed; assert skfed.__version__"),
        ("LocalEstimator", "from skfed import LocalEstimator"),
        ("DPFedDROClassifier", "from skfed import DPFedDROClassifier"),
        ("PersonalizedTensorRegressor", "import skfed; skfed.PersonalizedTensorRegressor"),
        ("PFedHGPRegressor", "from skfed import PFedHGPRegressor"),
    ])


def test_import_skfed_loads_nothing_heavy(estimator_steps):
    new = estimator_steps["import skfed"]
    assert {m for m in new if m.startswith("skfed")} == {"skfed", "skfed._lazy"}
    assert not _loaded(new, HEAVY + SKLEARN_DEPENDENCIES + ("sklearn", "numpy", "scipy"))


@pytest.mark.parametrize("step, allowed, kept_out", [
    ("LocalEstimator", (), ("skfed.baselines._fedavg", "skfed.baselines._mixedlm")),
    # the DP accountants load when a privacy budget is calibrated or reported
    ("DPFedDROClassifier", (), ("skfed.linear_model._baselines", "skfed.linear_model._kernels")),
    ("PersonalizedTensorRegressor", ("numba", "tensorly"), ("skfed.tensor._baselines",)),
    ("PFedHGPRegressor", ("numba",), ("skfed.gaussian_process._clustering",
                                      "skfed.gaussian_process._classifier",
                                      "skfed.gaussian_process._baselines")),
])
def test_an_estimator_loads_its_own_modules_only(estimator_steps, step, allowed, kept_out):
    new = estimator_steps[step]
    heavy = [n for n in HEAVY if n not in allowed + SKLEARN_DEPENDENCIES]
    assert not _loaded(new, heavy), f"{step} imported {_loaded(new, heavy)}"
    assert not _loaded(new, kept_out)
    own = {"LocalEstimator": "baselines", "DPFedDROClassifier": "linear_model",
           "PersonalizedTensorRegressor": "tensor", "PFedHGPRegressor": "gaussian_process"}
    others = [f"skfed.{name}" for name in own.values() if name != own[step]]
    assert not _loaded(new, others)


def test_the_flower_client_path_loads_no_estimator_package():
    # every Flower message starts a flwr-clientapp process that imports the app again
    new = _new_modules([("flower", "import skfed.federated.flower")])["flower"]
    assert "flwr" in _loaded(new, ["flwr"])
    estimators = [f"skfed.{name}" for name in SUBPACKAGES if name not in ("federated", "utils")]
    assert not _loaded(new, estimators + ["skfed.base"])
    assert not _loaded(new, [n for n in HEAVY if n not in ("flwr",) + SKLEARN_DEPENDENCIES])


def test_lazy_names_resolve_and_are_listed():
    for name in skfed.__all__:
        assert getattr(skfed, name) is not None
        assert name in dir(skfed)
    for sub in SUBPACKAGES:
        assert sub in dir(skfed)
        module = getattr(skfed, sub)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            assert name in dir(module)
            if isinstance(obj, type):  # pickles and skops files name the defining module
                assert obj.__module__.startswith(f"skfed.{sub}._")
    from skfed import PFedHGPRegressor
    from skfed.gaussian_process import PFedHGPRegressor as same
    assert PFedHGPRegressor is same is skfed.PFedHGPRegressor


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'skfed' has no attribute 'NoSuchModel'"):
        skfed.NoSuchModel  # noqa: B018
    with pytest.raises(ImportError, match="NoSuchModel"):
        from skfed.linear_model import NoSuchModel  # noqa: F401
