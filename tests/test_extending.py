"""The page "Write your own federated estimator" runs as written."""

import re
import sys
import types
from pathlib import Path

import numpy as np

import skfed
from skfed.base import FederatedEstimator
from skfed.federated import FederatedContract

PAGE = Path(__file__).resolve().parents[1] / "doc" / "extending.md"


def _run_page():
    """Execute the page's Python blocks in a module (so its classes pickle)."""
    module = types.ModuleType("skfed_extending_example")
    sys.modules[module.__name__] = module
    for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S):
        exec(compile(block, str(PAGE), "exec"), module.__dict__)
    return module


def test_extending_page_runs_and_its_estimator_is_federated():
    page = _run_page()  # includes check_estimator(ShrunkMeanRegressor())
    model, y, groups = page.model, page.y, page.groups
    assert isinstance(model, FederatedEstimator)
    assert isinstance(model, FederatedContract)
    # the one-row site sent its count only: the pooled mean is that of "a" and "b"
    pooled = y[groups != "c"].mean()
    assert np.isclose(model.mean_, pooled)
    for k, label in enumerate(model.clients_):
        rows = y[groups == label]
        assert np.isclose(model.site_means_[k], (rows.sum() + 5.0 * pooled) / (rows.size + 5.0))
    sums = [r for r in model.communication_.records if r.direction == "up" and r.round >= 0]
    assert sorted(len(r.names) for r in sums) == [1, 2, 2]


def test_every_federated_estimator_goes_through_the_base_class():
    for module in (skfed.gaussian_process, skfed.linear_model, skfed.tensor, skfed.baselines):
        for name in module.__all__:
            cls = getattr(module, name)
            if hasattr(cls, "_federated_algorithm") and not getattr(cls, "_pools_rows", False):
                assert issubclass(cls, FederatedEstimator), name
                assert cls.fit is FederatedEstimator.fit, f"{name} overrides fit"
