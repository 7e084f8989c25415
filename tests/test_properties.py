"""Property tests (Hypothesis) over every public skfed estimator.

Every generated input must end either in a fitted model whose outputs are
finite and of the right shape, or in a ``ValueError``/``TypeError`` whose
message names the argument the strategy corrupted (``X``, ``y``, ``groups``,
``sample_weight``, ``epsilon``, ...). Warnings are allowed; any other
exception, a non-finite output, or an error on a valid input is a failure.
A failed ``fit`` must also leave a previously fitted estimator unchanged
(:func:`skfed.base.transactional_fit`).

The strategies cover NaN, inf, huge (1e300) and tiny values in ``X`` and
``y``; constant features; empty, one-row, one-class and single-feature
clients; mixed client-id types (in ``fit`` and ``predict``); wrong shapes and
feature counts at predict; sparse and object ``X``; string ``y``; invalid
``sample_weight``; and invalid privacy parameters.

Each estimator runs with small, fast settings (few rounds, few inducing
points); its default-constructed instance runs on the inputs that are refused
during validation (cheap) and the invalid privacy parameters.

Profiles (environment variable ``HYPOTHESIS_PROFILE``):

* ``ci`` (default): ``derandomize=True`` (the same examples on every run),
  no example database, no deadline, few examples: the module runs in well
  under two minutes on two cores
  (``python -m pytest tests/test_properties.py -q --durations=10``).
* ``thorough``: random, 20 times the examples, for a local hunt:
  ``HYPOTHESIS_PROFILE=thorough python -m pytest tests/test_properties.py -q``.
"""

import importlib.util
import math
import os
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression, Ridge

from skfed.baselines import (
    FedAvgRegressor,
    GPBoostRegressor,
    LocalEstimator,
    MERFRegressor,
    MixedLMRegressor,
    PooledEstimator,
)
from skfed.gaussian_process import PFedGPRegressor, PFedHGPClassifier, PFedHGPRegressor
from skfed.linear_model import (
    CentralizedDROClassifier,
    DPFedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
    FedMixedLMRegressor,
    FedOvADROClassifier,
)
from skfed.preprocessing import NormClipper
from skfed.tensor import (
    FedAvgTensorRegressor,
    FedCommonTensorRegressor,
    LocalTwoStageTensorRegressor,
    PersonalizedTensorRegressor,
    TensorlyTuckerRegressor,
)
from skfed.utils.discovery import all_estimators

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, max_examples=12,
    suppress_health_check=_SUPPRESS, print_blob=True,
)
settings.register_profile(
    "thorough", derandomize=False, database=None, deadline=None, max_examples=160,
    suppress_health_check=_SUPPRESS, print_blob=True,
)
_PROFILE_NAME = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if _PROFILE_NAME not in ("ci", "thorough"):
    _PROFILE_NAME = "ci"  # another project's profile name: keep ours deterministic
PROFILE = settings.get_profile(_PROFILE_NAME)


# ---------------------------------------------------------------------------------
# The estimators
# ---------------------------------------------------------------------------------

_PRIVACY = {  # privacy parameter -> invalid values
    "epsilon": [0, 0.0, -1.0, math.nan, -math.inf, "0.5", True, [0.5]],
    "delta": [0, 1, 1.0, -1e-6, 2.0, math.nan, math.inf, "1e-6", True],
    "target_epsilon": [0, -1.0, math.nan, -math.inf, "1", True],
    "target_delta": [0, 1.0, -0.1, math.nan, "1e-5", True],
    "norm_bound": [0, -1.0, math.nan, math.inf, "1", True],
    "budget_split": [0, 1, -0.5, 1.5, math.nan, "0.5", True],
    "tau_x": [0, -1.0, math.nan, math.inf, "1", True],
    "tau_e": [0, -1.0, math.nan, math.inf, "1", True],
    "clip_quantile": [0, -0.5, 1.5, math.nan, "0.9", True],
    "max_norm": [0, -1.0, math.nan, math.inf, "1", True],
}


@dataclass(frozen=True)
class Spec:
    """How to build and call one public estimator in the property tests."""

    name: str
    make: object  # () -> estimator with small, fast settings
    kind: str  # "regressor", "classifier" or "transformer"
    cls: type
    groups: bool = True  # fit/predict take groups
    layout: str = "2d"  # "3d": the fast instance gets X of shape (n, p1, p2)
    bounded: bool = False  # private by default: rows need ||x||_2 <= 1
    sample_weight: bool = False
    privacy: tuple = ()  # privacy parameters (keys of _PRIVACY)
    privacy_needs: dict = field(default_factory=dict)  # extra params to make them matter
    cost: float = 1.0  # relative fit time: fewer examples for slow estimators
    requires: str = ""  # an optional package the estimator needs (skipped without it)

    def default(self):
        if self.cls in (LocalEstimator, PooledEstimator):
            return self.make()  # no default: the wrapped estimator is required
        return self.cls()


_DP_LINEAR = ("epsilon", "delta", "target_epsilon", "target_delta", "norm_bound")
_DP_NEEDS = {"delta": {"epsilon": 1.0}, "target_delta": {"target_epsilon": 1.0}}
_PTR_PRIVACY = ("epsilon", "delta", "tau_x", "tau_e", "clip_quantile")
_PTR_NEEDS = {"delta": {"epsilon": 1.0, "fit_intercept": False}}
_TENSOR_FAST = dict(rank=(1, 1), n_local_iter=3, init_max_iter=5)

SPECS = {s.name: s for s in [
    Spec("PFedHGPRegressor", lambda: PFedHGPRegressor(
        n_inducing_global=3, n_inducing_local=2, n_rounds=2, local_steps=2, random_state=0),
        "regressor", PFedHGPRegressor, cost=4),
    Spec("PFedGPRegressor", lambda: PFedGPRegressor(
        n_inducing=3, n_rounds=2, local_steps=2, random_state=0),
        "regressor", PFedGPRegressor, cost=2),
    Spec("PFedHGPClassifier", lambda: PFedHGPClassifier(PFedHGPRegressor(
        n_inducing_global=3, n_inducing_local=2, n_rounds=2, random_state=0)),
        "classifier", PFedHGPClassifier, groups=False, cost=4),
    Spec("DPFedDROClassifier", lambda: DPFedDROClassifier(n_rounds=3, random_state=0),
         "classifier", DPFedDROClassifier, bounded=True,
         privacy=(*_DP_LINEAR, "budget_split"), privacy_needs=_DP_NEEDS),
    Spec("DPFedERMClassifier", lambda: DPFedERMClassifier(n_rounds=3, random_state=0),
         "classifier", DPFedERMClassifier, bounded=True, privacy=_DP_LINEAR,
         privacy_needs=_DP_NEEDS),
    Spec("DPFedSGDClassifier", lambda: DPFedSGDClassifier(n_rounds=3, random_state=0),
         "classifier", DPFedSGDClassifier, bounded=True, privacy=_DP_LINEAR,
         privacy_needs=_DP_NEEDS),
    Spec("FedOvADROClassifier", lambda: FedOvADROClassifier(n_rounds=2),
         "classifier", FedOvADROClassifier),
    Spec("CentralizedDROClassifier", CentralizedDROClassifier, "classifier",
         CentralizedDROClassifier),
    Spec("PersonalizedTensorRegressor", lambda: PersonalizedTensorRegressor(
        n_rounds=2, random_state=0, **_TENSOR_FAST), "regressor", PersonalizedTensorRegressor,
        layout="3d", privacy=_PTR_PRIVACY, privacy_needs=_PTR_NEEDS),
    Spec("FedAvgTensorRegressor", lambda: FedAvgTensorRegressor(n_iter=3, **_TENSOR_FAST),
         "regressor", FedAvgTensorRegressor, layout="3d"),
    Spec("FedCommonTensorRegressor", lambda: FedCommonTensorRegressor(
        n_rounds=2, random_state=0, **_TENSOR_FAST), "regressor", FedCommonTensorRegressor,
        layout="3d", privacy=_PTR_PRIVACY, privacy_needs=_PTR_NEEDS),
    Spec("LocalTwoStageTensorRegressor", lambda: LocalTwoStageTensorRegressor(
        n_iter=3, **_TENSOR_FAST), "regressor", LocalTwoStageTensorRegressor, layout="3d"),
    Spec("TensorlyTuckerRegressor", lambda: TensorlyTuckerRegressor(
        tensor_shape=(-1, 1), weight_ranks=(1, 1), n_iter_max=5, random_state=0),
        "regressor", TensorlyTuckerRegressor, groups=False),
    Spec("FedAvgRegressor", lambda: FedAvgRegressor(n_rounds=3, random_state=0),
         "regressor", FedAvgRegressor),
    Spec("LocalEstimator[Ridge]", lambda: LocalEstimator(Ridge()), "regressor",
         LocalEstimator, sample_weight=True),
    Spec("LocalEstimator[LogisticRegression]", lambda: LocalEstimator(LogisticRegression()),
         "classifier", LocalEstimator, sample_weight=True),
    Spec("PooledEstimator[Ridge]", lambda: PooledEstimator(Ridge()), "regressor",
         PooledEstimator, sample_weight=True),
    Spec("PooledEstimator[LogisticRegression]", lambda: PooledEstimator(LogisticRegression()),
         "classifier", PooledEstimator, sample_weight=True),
    Spec("MixedLMRegressor", lambda: MixedLMRegressor(max_iter=20), "regressor",
         MixedLMRegressor, cost=2),
    Spec("FedMixedLMRegressor", lambda: FedMixedLMRegressor(random_slopes=[0]), "regressor",
         FedMixedLMRegressor),
    Spec("GPBoostRegressor[trees]", lambda: GPBoostRegressor(
        random_slopes=[0], param_grid={"learning_rate": [0.1], "max_depth": [2]},
        n_estimators=20, early_stopping_rounds=5, random_state=0), "regressor",
        GPBoostRegressor, requires="gpboost", cost=2),
    Spec("GPBoostRegressor[linear]", lambda: GPBoostRegressor(kind="linear", random_slopes=[0]),
         "regressor", GPBoostRegressor, requires="gpboost"),
    Spec("MERFRegressor", lambda: MERFRegressor(
        random_slopes=[0], n_estimators=5, param_grid={"min_samples_leaf": [1, 3]},
        max_iterations=3, random_state=0), "regressor", MERFRegressor, requires="merf", cost=2),
    Spec("NormClipper", NormClipper, "transformer", NormClipper, groups=False,
         privacy=("max_norm",)),
]}
PRIVATE = [name for name, s in SPECS.items() if s.privacy]
# the names to parametrize over: an estimator whose optional package is missing is skipped
NAMES = [pytest.param(name, marks=pytest.mark.skipif(
    bool(s.requires) and importlib.util.find_spec(s.requires) is None,
    reason=f"{s.requires} is not installed (the bench extra)")) for name, s in SPECS.items()]


def test_every_public_estimator_is_covered():
    assert {cls for _, cls in all_estimators()} == {s.cls for s in SPECS.values()}


# ---------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------

@dataclass
class Case:
    """One generated call: the inputs and the arguments an error may name."""

    X: object
    y: object
    groups: object
    sample_weight: object = None
    params: dict = field(default_factory=dict)
    blame: set = field(default_factory=set)  # empty: the input is valid, fit must succeed
    what: list = field(default_factory=list)  # what the strategies did (for the report)

    def fit_kwargs(self, spec):
        kw = {}
        if spec.groups:
            kw["groups"] = self.groups
        if self.sample_weight is not None:
            kw["sample_weight"] = self.sample_weight
        return kw


_GROUP_KINDS = {
    "int": lambda k: [3 * i + 1 for i in range(k)],
    "str": lambda k: [f"site{i}" for i in range(k)],
    "float": lambda k: [0.5 + i for i in range(k)],
    "object": lambda k: np.array([f"c{i}" for i in range(k)], dtype=object),
}
_LABELS = {"int": [0, 1, 2], "negint": [-1, 1, 7], "str": ["a", "b", "c"]}


@st.composite
def datasets(draw, spec, layout, edges=True):
    """A valid data set; with ``edges``, legitimate edge cases that an error may blame."""
    what, blame = [], set()
    # one client is an edge case (a mixed model cannot separate a client effect)
    n_clients = draw(st.integers(1 if edges else 2, 3)) if spec.groups else 1
    one_row = edges and draw(st.booleans())
    # plain data: enough rows for every model (e.g. a mixed model needs n > p + 1)
    sizes = [draw(st.integers(3, 5) if edges else st.integers(6, 8)) for _ in range(n_clients)]
    if one_row:  # a one-row client (the only client for estimators without groups)
        sizes[draw(st.integers(0, n_clients - 1))] = 1
        what.append("one-row client")
        blame |= {"groups", "X", "y"}
    n = sum(sizes)
    if spec.groups and n_clients == 1:
        blame.add("groups")
    single = edges and draw(st.booleans())
    if layout == "3d":
        shape = (1, 1) if single else (draw(st.integers(1, 3 if edges else 2)), 2)
    else:
        shape = (1,) if single else (draw(st.integers(2, 3)),)
    if single:
        what.append("single feature")
        blame.add("X")
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    X = rng.uniform(-1, 1, (n, *shape))
    flat = X.reshape(n, -1)  # a view: edits reach X
    if edges and draw(st.booleans()):
        j = draw(st.integers(0, flat.shape[1] - 1))
        flat[:, j] = draw(st.sampled_from([0.0, 0.25, -0.5]))
        what.append(f"constant feature {j}")
        blame.add("X")
    if edges and draw(st.booleans()):
        if draw(st.booleans()):
            X *= 1e-300
            what.append("tiny X (all values * 1e-300)")
        else:
            flat[draw(st.integers(0, n - 1)), draw(st.integers(0, flat.shape[1] - 1))] = 1e-300
            what.append("a tiny value (1e-300) in X")
        blame.add("X")
    if n <= flat.shape[1] + 1:
        what.append("no more rows than features + 1")
        blame |= {"X", "y"}
    if spec.bounded:  # rows inside the unit ball, as the private default requires
        X /= math.sqrt(flat.shape[1])
    kind = draw(st.sampled_from(sorted(_GROUP_KINDS)))
    labels = _GROUP_KINDS[kind](n_clients)
    groups = np.repeat(np.asarray(labels), sizes)
    if n_clients == 1 and draw(st.booleans()):
        groups = None
    elif kind != "object" and draw(st.booleans()):
        groups = groups.tolist()
    what.append(f"{n_clients} client(s) of sizes {sizes}, {kind} ids, X shape {X.shape}")
    if spec.kind == "classifier":
        classes = _LABELS[draw(st.sampled_from(sorted(_LABELS)))][:draw(st.integers(2, 3))]
        codes = np.concatenate([rng.permutation(np.arange(m) % len(classes)) for m in sizes])
        if edges and n_clients > 1 and draw(st.booleans()):
            codes[:sizes[0]] = 0
            what.append("one-class client")
            blame |= {"y", "groups"}
        y = np.asarray(classes)[codes]
        if len(np.unique(y)) < 2:
            blame.add("y")
    else:
        y = rng.standard_normal(n)
        if edges and draw(st.booleans()):
            y = y * 1e-300
            what.append("tiny y")
            blame.add("y")
    return Case(X=X, y=y, groups=groups, blame=blame, what=what)


def _set_cell(draw, A, value):
    A = np.array(A, dtype=float)
    flat = A.reshape(A.shape[0], -1)
    flat[draw(st.integers(0, flat.shape[0] - 1)), draw(st.integers(0, flat.shape[1] - 1))] = value
    return A


# corruption name -> (applies to spec?, refused in validation?)
CORRUPTIONS = {
    "X nan": (lambda s: True, True),
    "X inf": (lambda s: True, True),
    "X huge": (lambda s: True, False),
    "X huge column": (lambda s: True, False),
    "X 1-D": (lambda s: True, True),
    "X 3-D": (lambda s: s.layout == "2d", True),
    "X object numbers": (lambda s: True, False),
    "X object string": (lambda s: True, True),
    "X sparse": (lambda s: True, False),
    "y nan": (lambda s: s.kind != "transformer", True),
    "y inf": (lambda s: s.kind == "regressor", True),
    "y huge": (lambda s: s.kind == "regressor", False),
    "y string": (lambda s: s.kind == "regressor", True),
    "y wrong length": (lambda s: s.kind != "transformer", True),
    "empty": (lambda s: True, True),
    "groups mixed types": (lambda s: s.groups, True),
    "groups None label": (lambda s: s.groups, True),
    "groups nan": (lambda s: s.groups, True),
    "groups wrong length": (lambda s: s.groups, True),
    "groups 2-D": (lambda s: s.groups, True),
    "sample_weight nan": (lambda s: s.sample_weight, True),
    "sample_weight wrong length": (lambda s: s.sample_weight, True),
    "sample_weight negative": (lambda s: s.sample_weight, False),
}


def corrupt(draw, spec, case, name):
    """Apply corruption ``name`` to ``case`` and set the argument it blames."""
    n = len(case.y)
    X = case.X
    blame = set(case.blame)  # the edge cases of the data set may still be blamed
    if name.startswith("X"):
        case.blame = {"X"}
    if name == "X nan":
        case.X = _set_cell(draw, X, math.nan)
    elif name == "X inf":
        case.X = _set_cell(draw, X, draw(st.sampled_from([math.inf, -math.inf])))
    elif name == "X huge":
        case.X = _set_cell(draw, X, draw(st.sampled_from([1e300, -1e300])))
    elif name == "X huge column":
        case.X = np.array(X, dtype=float)
        case.X.reshape(n, -1)[:, 0] *= 1e300
    elif name == "X 1-D":
        case.X = np.asarray(X).reshape(n, -1)[:, 0]
    elif name == "X 3-D":
        case.X = np.asarray(X).reshape(n, -1, 1)
    elif name == "X object numbers":
        case.X = np.asarray(X).astype(object)
        case.blame = set()  # a valid input (converted to float)
    elif name == "X object string":
        case.X = np.asarray(X).astype(object)
        case.X.reshape(n, -1)[draw(st.integers(0, n - 1)), 0] = "a"
    elif name == "X sparse":
        case.X = sp.csr_matrix(np.asarray(X).reshape(n, -1))
    elif name.startswith("y"):
        case.blame = {"y"}
        if name == "y nan":
            y = np.asarray(case.y)
            if y.dtype.kind not in "iuf":  # string labels: use float codes instead
                y = np.unique(y, return_inverse=True)[1]
            case.y = _set_cell(draw, y.reshape(n, 1), math.nan).ravel()
        elif name == "y inf":
            case.y = _set_cell(draw, case.y.reshape(n, 1), math.inf).ravel()
        elif name == "y huge":
            case.y = _set_cell(draw, case.y.reshape(n, 1), 1e300).ravel()
        elif name == "y string":
            case.y = np.array([f"v{v:.3f}" for v in case.y])
        elif name == "y wrong length":
            case.y = case.y[:-1] if draw(st.booleans()) else np.concatenate([case.y, case.y[:1]])
            case.blame = {"y", "X"}
    elif name == "empty":
        case.X = np.asarray(X)[:0]
        case.y = np.asarray(case.y)[:0]
        case.groups = None if case.groups is None else np.asarray(case.groups)[:0]
        case.blame = {"X", "y", "groups"}
    elif name.startswith("groups"):
        case.blame = {"groups"}
        groups = list(range(n)) if case.groups is None else list(np.asarray(case.groups))
        groups = [g.item() if isinstance(g, np.generic) else g for g in groups]
        i = draw(st.integers(0, n - 1))
        if name == "groups mixed types":
            groups[i] = "x" if isinstance(groups[i], (int, float)) else 7
            case.groups = groups if draw(st.booleans()) else np.array(groups, dtype=object)
        elif name == "groups None label":
            groups[i] = None
            case.groups = groups
        elif name == "groups nan":
            case.groups = np.arange(n, dtype=float) % 2
            case.groups[i] = math.nan
        elif name == "groups wrong length":
            case.groups = groups[:-1] if n > 1 else groups * 2
        elif name == "groups 2-D":
            case.groups = np.column_stack([np.arange(n) % 2, np.arange(n) % 2])
    elif name.startswith("sample_weight"):
        case.blame = {"sample_weight"}
        w = np.ones(n)
        if name == "sample_weight nan":
            w[draw(st.integers(0, n - 1))] = math.nan
        elif name == "sample_weight wrong length":
            w = np.ones(n + 1)
        elif name == "sample_weight negative":
            w[draw(st.integers(0, n - 1))] = -1.0
        case.sample_weight = w
    case.blame |= blame
    case.what.append(name)
    return case


# ---------------------------------------------------------------------------------
# The oracle
# ---------------------------------------------------------------------------------

def _names(message, names):
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(a)}(?![A-Za-z0-9_])", message)
               for a in names)


def _call(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _check_refusal(exc, blame, what):
    """An error is acceptable only on a corrupted input and if it names the argument."""
    if not isinstance(exc, (ValueError, TypeError)):
        raise AssertionError(f"{type(exc).__name__} (not ValueError/TypeError) on {what}") from exc
    if not blame:
        raise AssertionError(f"a valid input was refused ({what}): {exc!r}") from exc
    if not _names(str(exc), blame):
        raise AssertionError(
            f"the error on {what} does not name {sorted(blame)}: {type(exc).__name__}: {exc}"
        ) from exc


def check_outputs(spec, est, X, groups, n_outputs=None):
    """Predictions (and probabilities, decision values, transforms) are finite, of the right shape."""
    n = X.shape[0]
    kw = {"groups": groups} if spec.groups else {}
    if spec.kind == "transformer":
        out = _call(est.transform, X)
        assert out.shape == (n, est.n_features_in_)
        assert np.all(np.isfinite(out)), "transform gave non-finite values"
        return
    pred = np.asarray(_call(est.predict, X, **kw))
    assert pred.shape[0] == n
    if spec.kind == "regressor":
        assert pred.dtype.kind == "f" and pred.shape == (n,), (pred.dtype, pred.shape)
        assert np.all(np.isfinite(pred)), f"predict gave non-finite values: {pred}"
    else:
        assert pred.shape == (n,)
        assert set(pred.tolist()) <= set(est.classes_.tolist())
    for method in ("predict_proba", "decision_function"):
        if hasattr(est, method):
            out = np.asarray(_call(getattr(est, method), X, **kw))
            assert out.shape[0] == n
            assert np.all(np.isfinite(out)), f"{method} gave non-finite values: {out}"
            if method == "predict_proba":
                assert out.shape == (n, len(est.classes_))
                np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-8)


def fit_or_refuse(spec, est, case):
    """The oracle of one ``fit`` call (+ predictions on the training rows)."""
    what = "; ".join(case.what)
    try:
        _call(est.fit, case.X, case.y, **case.fit_kwargs(spec))
    except Exception as exc:  # noqa: BLE001 - the oracle classifies it
        _check_refusal(exc, case.blame, what)
        return False
    X = case.X
    if sp.issparse(X) or (isinstance(X, np.ndarray) and X.dtype == object):
        X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=float)
    try:
        check_outputs(spec, est, np.asarray(X), case.groups)
    except AssertionError as exc:
        raise AssertionError(f"after fitting on {what}: {exc}") from exc
    return True


def run(spec, test, examples=None):
    """Run the Hypothesis ``test(data)`` with the profile's examples scaled by ``cost``."""
    n = examples or PROFILE.max_examples
    n = max(2, round(n / spec.cost))
    given(st.data())(settings(PROFILE, max_examples=n)(test))()


# ---------------------------------------------------------------------------------
# The properties
# ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_valid_and_edge_inputs(name):
    """Valid data (with edge cases) fits; outputs are finite; edge cases may be refused by name."""
    spec = SPECS[name]

    def test(data):
        case = data.draw(datasets(spec, spec.layout))
        fit_or_refuse(spec, spec.make(), case)

    run(spec, test, 2 * PROFILE.max_examples)


@pytest.mark.parametrize("name", NAMES)
def test_plain_inputs_fit(name):
    """Data without edge cases always fits, with finite outputs (fast and default instance)."""
    spec = SPECS[name]

    def test(data):
        case = data.draw(datasets(spec, spec.layout, edges=False))
        assert fit_or_refuse(spec, spec.make(), case)

    run(spec, test, PROFILE.max_examples // 2)
    default = spec.default()
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (24, 3)) / (math.sqrt(3) if spec.bounded else 1)
    y = (np.arange(24) % 2 if spec.kind == "classifier" else rng.standard_normal(24))
    groups = np.repeat([0, 1, 2], 8)
    assert fit_or_refuse(spec, default, Case(X=X, y=y, groups=groups, what=["default"]))


@pytest.mark.parametrize("name", NAMES)
def test_corrupted_inputs(name):
    """Corrupted inputs end in a finite fit or an error naming the corrupted argument."""
    spec = SPECS[name]
    names = [c for c, (applies, _) in CORRUPTIONS.items() if applies(spec)]

    def test(data):
        corruption = data.draw(st.sampled_from(names))
        cheap = CORRUPTIONS[corruption][1]
        use_default = cheap and data.draw(st.booleans())
        layout = "2d" if use_default else spec.layout
        case = corrupt(data.draw, spec, data.draw(datasets(spec, layout)), corruption)
        est = spec.default() if use_default else spec.make()
        fit_or_refuse(spec, est, case)

    run(spec, test, 6 * PROFILE.max_examples)


_FIT_CACHE = {}


def _fitted(spec):
    """A fitted fast instance on a fixed, plain data set (built once per estimator)."""
    if spec.name not in _FIT_CACHE:
        rng = np.random.default_rng(1)
        shape = (2, 2) if spec.layout == "3d" else (3,)
        X = rng.uniform(-1, 1, (18, *shape)) / (2 if spec.bounded else 1)
        y = np.arange(18) % 2 if spec.kind == "classifier" else rng.standard_normal(18)
        groups = np.repeat(["a", "b", "c"], 6)
        est = _call(spec.make().fit, X, y, **({"groups": groups} if spec.groups else {}))
        _FIT_CACHE[spec.name] = (est, X, groups)
    return _FIT_CACHE[spec.name]


PREDICT_CORRUPTIONS = {
    "valid seen and unseen clients": set(),
    "groups None": set(),
    "X nan": {"X"},
    "X inf": {"X"},
    "X wrong feature count": {"X"},
    "X 1-D": {"X"},
    "X 3-D": {"X"},
    "X wrong tensor shape": {"X"},
    "X object string": {"X"},
    "X sparse": {"X"},
    "X empty": {"X"},
    "groups wrong length": {"groups"},
    "groups other kind": {"groups"},
    "groups mixed types": {"groups"},
    "groups None label": {"groups"},
}


@pytest.mark.parametrize("name", NAMES)
def test_predict_inputs(name):
    """At predict: wrong shapes, feature counts and client ids are refused by name."""
    spec = SPECS[name]
    est, X_fit, groups_fit = _fitted(spec)
    names = [c for c in PREDICT_CORRUPTIONS if spec.groups or not c.startswith("groups")]
    if spec.layout != "3d":
        names.remove("X wrong tensor shape")

    def test(data):
        corruption = data.draw(st.sampled_from(names))
        blame = PREDICT_CORRUPTIONS[corruption]
        m = data.draw(st.integers(1, 5))
        rows = data.draw(st.lists(st.integers(0, len(X_fit) - 1), min_size=m, max_size=m))
        X = X_fit[rows] * data.draw(st.sampled_from([1.0, 0.5, 3.0]))
        if spec.bounded:
            X = X / 3.0
        groups = list(groups_fit[rows])
        if corruption == "valid seen and unseen clients":
            groups[0] = "new-client"
        elif corruption == "groups None":
            groups = None
        elif corruption in ("X nan", "X inf"):
            X = _set_cell(data.draw, X, math.nan if corruption == "X nan" else -math.inf)
        elif corruption == "X wrong feature count":
            flat = X.reshape(m, -1)
            X = np.hstack([flat, flat[:, :1]]) if data.draw(st.booleans()) else flat[:, :-1]
        elif corruption == "X 1-D":
            X = X.reshape(m, -1)[0]
            groups = groups[:1]
        elif corruption == "X 3-D":
            X = X.reshape(m, -1, 1) if spec.layout == "2d" else X.reshape(m, -1, 1, 1)
        elif corruption == "X wrong tensor shape":
            X = X.reshape(m, 1, -1)
        elif corruption == "X object string":
            X = X.reshape(m, -1).astype(object)
            X[0, 0] = "a"
        elif corruption == "X sparse":
            X = sp.csr_matrix(X.reshape(m, -1))
        elif corruption == "X empty":
            X, groups = X[:0], groups[:0]
        elif corruption == "groups wrong length":
            groups = groups + ["a"]
        elif corruption == "groups other kind":
            groups = list(range(m))
        elif corruption == "groups mixed types":
            groups[0] = 3
            groups = np.array(groups, dtype=object)
        elif corruption == "groups None label":
            groups[0] = None
        what = f"predict with {corruption}"
        kw = {"groups": groups} if spec.groups else {}
        method = data.draw(st.sampled_from(
            [m_ for m_ in ("predict", "predict_proba", "decision_function", "transform")
             if hasattr(est, m_)]))
        try:
            out = _call(getattr(est, method), X, **kw)
        except Exception as exc:  # noqa: BLE001 - the oracle classifies it
            _check_refusal(exc, blame, what)
            return
        out = np.asarray(out)
        n = X.shape[0] if hasattr(X, "shape") else len(X)
        assert out.shape[0] == n, (what, out.shape)
        if method != "predict" or spec.kind == "regressor":
            assert np.all(np.isfinite(out)), (what, out)

    run(spec, test, 3 * PROFILE.max_examples)


@pytest.mark.parametrize("name", PRIVATE)
def test_invalid_privacy_parameters(name):
    """Invalid privacy parameters are refused naming the parameter (fast and default)."""
    spec = SPECS[name]

    def test(data):
        param = data.draw(st.sampled_from(spec.privacy))
        value = data.draw(st.sampled_from(_PRIVACY[param]))
        est = spec.default() if data.draw(st.booleans()) else spec.make()
        est.set_params(**{param: value, **spec.privacy_needs.get(param, {})})
        case = data.draw(datasets(spec, "2d" if est.get_params().get("rank") == "auto"
                                  or spec.layout == "2d" else spec.layout, edges=False))
        case.blame = {param}
        case.what.append(f"{param}={value!r}")
        fit_or_refuse(spec, est, case)

    run(spec, test, 3 * PROFILE.max_examples)


@pytest.mark.parametrize("name", NAMES)
def test_failed_fit_leaves_fitted_estimator_unchanged(name):
    """A refused fit leaves every attribute of a fitted estimator as it was."""
    spec = SPECS[name]
    refused = [c for c, (applies, cheap) in CORRUPTIONS.items()
               if applies(spec) and cheap and c != "X object string"]

    def test(data):
        est, X_fit, groups_fit = _fitted(spec)
        y_fit = np.arange(len(X_fit)) % 2 if spec.kind == "classifier" else X_fit.reshape(
            len(X_fit), -1).sum(axis=1)
        kw = {"groups": groups_fit} if spec.groups else {}
        est = _call(clone(est).fit, X_fit, y_fit, **kw)
        before = dict(est.__dict__)
        pred = _call(est.predict if spec.kind != "transformer" else est.transform, X_fit, **kw)
        corruption = data.draw(st.sampled_from(refused))
        case = corrupt(data.draw, spec, data.draw(datasets(spec, spec.layout, edges=False)),
                       corruption)
        try:
            _call(est.fit, case.X, case.y, **case.fit_kwargs(spec))
        except (ValueError, TypeError):
            pass
        else:
            return  # accepted (covered by test_corrupted_inputs)
        after = est.__dict__
        assert after.keys() == before.keys(), (corruption, set(after) ^ set(before))
        changed = [k for k in before if after[k] is not before[k]]
        assert not changed, f"a refused fit ({corruption}) changed {changed}"
        again = _call(est.predict if spec.kind != "transformer" else est.transform, X_fit, **kw)
        np.testing.assert_array_equal(again, pred)

    run(spec, test, PROFILE.max_examples)

