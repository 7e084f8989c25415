"""No raw value on the wire: every released number of every federated estimator.

Each federated estimator is fitted on small continuous random data (generic
floats: no exact zeros, ones or repeats) where some clients hold one row and
some two (linear models need two rows per client), with the ledger keeping
its payloads (:func:`skfed.federated._ledger.keeping_payloads`). Every number
of every message, both directions, every round, the set-up exchange (round
-1) included, is compared by exact float equality with every raw value of
``X`` and ``y`` of every client: none may be equal. (Equality is what a raw
value sent as it is, or a min, max, median or the mean of one row, shows
as; what can be solved from aggregates is the subject of the release table
in ``doc/releases.md``.)
"""

import warnings

import numpy as np
import pytest

from skfed.baselines import FedAvgRegressor
from skfed.federated._ledger import keeping_payloads
from skfed.gaussian_process import PFedGPRegressor, PFedHGPClassifier, PFedHGPRegressor
from skfed.linear_model import (
    DPFedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
    FedMixedLMRegressor,
    FedOvADROClassifier,
)
from skfed.tensor import (
    FedAvgTensorRegressor,
    FedCommonTensorRegressor,
    LocalTwoStageTensorRegressor,
    PersonalizedTensorRegressor,
)

# rows per client: one-row and two-row clients next to larger ones
SIZES = (1, 2, 1, 2, 7, 9, 12)
SIZES_LINEAR = (2, 2, 2, 8, 10, 12)  # the linear models need two rows per client


def _groups(sizes):
    return np.repeat(np.arange(len(sizes)), sizes)


def _regression(sizes, n_features=2, n_outputs=None, seed=0):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    X = rng.uniform(0.3, 9.7, (n, n_features))
    f = np.sin(X[:, 0]) + 0.1 * X[:, -1]
    y = f + 0.1 * rng.normal(size=n)
    if n_outputs is not None:
        y = np.column_stack([y] + [np.cos(X[:, 0] * (q + 1)) + 0.1 * rng.normal(size=n)
                                   for q in range(n_outputs - 1)])
    return X, y, _groups(sizes)


def _classification(sizes, n_features=3, n_classes=2, seed=0):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    X = rng.normal(0.2, 0.4, (n, n_features))
    y = np.arange(n) % n_classes  # every class at every client of two rows or more
    X[:, 0] += 0.3 * y
    X /= 1.01 * np.linalg.norm(X, axis=1).max()  # rows within the private models' norm_bound=1
    return X, y, _groups(sizes)


def released_numbers(ledger):
    """``(record, name, values)`` of every numeric entry of every message."""
    assert ledger.payloads is not None, "the ledger kept no payloads"
    assert len(ledger.payloads) == len(ledger.records) > 0
    for record, payload in zip(ledger.records, ledger.payloads):
        for name, value in payload.items():
            arr = np.asarray(value)
            if arr.dtype.kind not in "iuf":  # text class labels, flags
                continue
            yield record, name, arr.astype(float).ravel()


def assert_no_raw_value(ledger, X, y=None):
    """No released number equals a raw value of ``X`` (or of ``y``)."""
    raw = [np.asarray(X, dtype=float).ravel()]
    if y is not None:
        raw.append(np.asarray(y, dtype=float).ravel())
    raw = np.concatenate(raw)
    assert np.unique(raw).size == raw.size  # the data themselves have no repeats
    records = ledger.records
    assert {r.direction for r in records} == {"up", "down"}
    assert min(r.round for r in records) == -1 and max(r.round for r in records) >= 0
    hits = []
    for record, name, values in released_numbers(ledger):
        equal = np.isin(values, raw)
        if equal.any():
            hits.append((record.round, record.client, record.direction, name,
                         values[equal][:3].tolist()))
    assert not hits, f"raw values on the wire (round, client, direction, entry, values): {hits}"


def fit_keeping(estimator, X, y, groups=None):
    with keeping_payloads(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small clients: fewer inducing inputs, etc.
        if groups is None:
            return estimator.fit(X, y)
        return estimator.fit(X, y, groups=groups)


GP_SMALL = dict(inference="variational", n_inducing_global=5, n_inducing_local=3, n_rounds=3,
                local_steps=2, random_state=0)


@pytest.mark.parametrize("optimizer", ["cavi", "paper"])
@pytest.mark.parametrize("normalize_X", [True, False])
@pytest.mark.parametrize("n_outputs", [None, 2])
def test_pfedhgp_regressor(optimizer, normalize_X, n_outputs):
    X, y, groups = _regression(SIZES, n_outputs=n_outputs)
    model = PFedHGPRegressor(optimizer=optimizer, normalize_X=normalize_X, ard=True,
                             **GP_SMALL)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


def test_pfedhgp_regressor_joint_mean_blockwise_and_input_bounds():
    X, y, groups = _regression(SIZES)
    for params in (dict(mean_update="blockwise"),
                   dict(normalize_X=False, input_bounds=(0.0, 10.0)),
                   dict(normalize_y=False, normalize_X=False, population_local="none")):
        model = PFedHGPRegressor(**params, **GP_SMALL)
        fit_keeping(model, X, y, groups)
        assert_no_raw_value(model.communication_, X, y)


@pytest.mark.parametrize("random_effects", ["none", "linear"])
@pytest.mark.parametrize("normalize_X", [True, False])
def test_pfedhgp_regressor_collapsed(random_effects, normalize_X):
    X, y, groups = _regression(SIZES)
    model = PFedHGPRegressor(inference="collapsed", random_effects=random_effects,
                             normalize_X=normalize_X, n_inducing_global=5, n_restarts=1,
                             random_state=0)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


@pytest.mark.parametrize("optimizer", ["cavi", "paper"])
@pytest.mark.parametrize("n_outputs", [None, 2])
def test_pfedgp_regressor(optimizer, n_outputs):
    X, y, groups = _regression(SIZES, n_outputs=n_outputs)
    model = PFedGPRegressor(optimizer=optimizer, n_inducing=3, n_rounds=3, local_steps=2,
                            random_state=0)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


def test_pfedhgp_classifier():
    # each class is a client of the regressor; its rows are the objects' values
    rng = np.random.default_rng(1)
    X = rng.normal(0.3, 0.5, (7, 6)) + np.linspace(0.1, 0.7, 6)
    y = np.array([0, 0, 0, 1, 1, 1, 2])  # class 2: one object
    est = PFedHGPRegressor(inference="variational",
                           optimizer="cavi", n_rounds=3, local_steps=2, n_inducing_global=4,
                           n_inducing_local=3, normalize_X=False, random_state=0)
    for clf in (PFedHGPClassifier(), PFedHGPClassifier(est)):
        fit_keeping(clf, X, y)
        # the input grid (public) is the regressor's X; the objects are its y
        assert_no_raw_value(clf.estimator_.communication_, X)


TENSOR = dict(tensor_shape=(3, 2))


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("init", ["vote", "admm", "array"])
def test_personalized_tensor_regressor(fit_intercept, init):
    X, y, groups = _regression(SIZES, n_features=6)
    params = dict(TENSOR, n_rounds=3, n_local_iter=5, random_state=0,
                  fit_intercept=fit_intercept)
    if init == "vote":
        params["rank"] = "auto"
    elif init == "admm":
        params["rank"] = (1, 1)
    else:
        params.update(rank=(1, 1), init=np.full((3, 2), 0.1))
    model = PersonalizedTensorRegressor(**params)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


@pytest.mark.parametrize("fit_intercept", [False, True])
@pytest.mark.parametrize("clip", ["quantile", "given"])
def test_personalized_tensor_regressor_private(clip, fit_intercept):
    X, y, groups = _regression(SIZES, n_features=6)
    # given levels: the strict default (moment initializer); quantiles: the paper's protocol
    taus = dict(tau_x=5.0, tau_e=3.0) if clip == "given" else dict(privacy_mode="paper")
    if fit_intercept and clip == "given":  # the private means' levels
        taus.update(intercept_tau_x=8.0, intercept_tau_y=4.0)
    model = PersonalizedTensorRegressor(**TENSOR, rank=(1, 1), n_rounds=3, n_local_iter=5,
                                        fit_intercept=fit_intercept, epsilon=2.0, delta=1e-5,
                                        step_size=0.01, random_state=0, **taus)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("cls", [FedAvgTensorRegressor, LocalTwoStageTensorRegressor])
def test_tensor_baselines(cls, fit_intercept):
    X, y, groups = _regression(SIZES, n_features=6)
    model = cls(**TENSOR, rank=(1, 1), n_iter=5, n_local_iter=5, fit_intercept=fit_intercept)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_fed_common_tensor_regressor(fit_intercept):
    X, y, groups = _regression(SIZES, n_features=6)
    model = FedCommonTensorRegressor(**TENSOR, rank="auto", n_rounds=3,
                                     fit_intercept=fit_intercept, random_state=0)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


# class labels are categories whose union is released in the set-up by design
# (see doc/releases.md): the classifiers' checks compare against X only


@pytest.mark.parametrize("epsilon", [None, 2.0])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_dp_fed_dro_classifier(epsilon, n_classes):
    X, y, groups = _classification(SIZES_LINEAR, n_classes=n_classes)
    clf = DPFedDROClassifier(epsilon=epsilon, n_rounds=3, random_state=0, standardize="auto")
    fit_keeping(clf, X, y, groups)
    assert_no_raw_value(clf.communication_, X)


def test_dp_fed_dro_classifier_standardize_and_intercept():
    X, y, groups = _classification(SIZES_LINEAR)
    for params in (dict(epsilon=None, standardize=True, fit_intercept=True),
                   dict(epsilon=None, standardize=False),
                   dict(epsilon=None, class_weight="balanced")):
        clf = DPFedDROClassifier(n_rounds=3, random_state=0, **params)
        fit_keeping(clf, X, y, groups)
        assert_no_raw_value(clf.communication_, X)


@pytest.mark.parametrize("cls", [DPFedERMClassifier, DPFedSGDClassifier, FedOvADROClassifier])
def test_linear_baselines(cls):
    X, y, groups = _classification(SIZES_LINEAR, n_classes=3)
    clf = cls(n_rounds=3, random_state=0)
    fit_keeping(clf, X, y, groups)
    assert_no_raw_value(clf.communication_, X)


@pytest.mark.parametrize("fine_tune_epochs", [0, 2])
def test_fedavg_regressor(fine_tune_epochs):
    X, y, groups = _regression(SIZES, n_features=3)
    model = FedAvgRegressor(n_rounds=3, fine_tune_epochs=fine_tune_epochs, batch_size=4,
                            random_state=0)
    fit_keeping(model, X, y, groups)
    assert_no_raw_value(model.communication_, X, y)


@pytest.mark.parametrize("random_slopes", [None, [0]])
def test_fed_mixedlm_regressor(random_slopes):
    X, y, groups = _regression(SIZES, n_features=3)
    model = fit_keeping(FedMixedLMRegressor(random_slopes=random_slopes), X, y, groups)
    assert_no_raw_value(model.communication_, X, y)
    # the statistics are the Gram matrix of [1, X, y]: sends_gram, 3 rows or more
    sent = _setup_up(model.communication_, 0)
    for client, n in enumerate(SIZES):
        assert ("cross" in sent[client]) == ("sums" in sent[client]) == (n >= 3), (client, n)
    assert model.excluded_clients_.tolist() == [k for k, n in enumerate(SIZES) if n < 3]


def test_keeping_payloads_is_off_by_default_and_copies():
    from skfed.federated import Ledger

    assert Ledger().payloads is None
    with keeping_payloads():
        ledger = Ledger()
    assert Ledger().payloads is None
    grad = np.ones(2)
    ledger.record(0, "a", "up", {"grad": grad})
    grad[0] = 5.0  # the sender reusing its array does not change the record
    assert ledger.payloads[0]["grad"].tolist() == [1.0, 1.0]


# -- the rules that keep raw values off the wire -----------------------------------------


def _setup_up(ledger, rnd):
    return {r.client: set(r.names) for r in ledger.records
            if r.round == rnd and r.direction == "up"}


def test_pfedhgp_small_clients_send_only_their_count():
    X, y, groups = _regression(SIZES)
    # the constant prior mean: y_mean_ is then the pooled mean (the linear mean's cross
    # products follow the same rule: tests/gaussian_process/test_pfedhgp_mean.py)
    model = fit_keeping(PFedHGPRegressor(mean_function="constant", **GP_SMALL), X, y, groups)
    names = _setup_up(model.communication_, 0)  # round 0: the normalization set-up
    for client, n in enumerate(SIZES):
        expected = {"n"} if n < 3 else {"n", "sum_y", "sum_y2", "sum_x", "sum_x2"}
        assert names[client] == expected, (client, n)
    # the pooled centre comes from the clients with 3 rows or more
    big = np.isin(groups, [k for k, n in enumerate(SIZES) if n >= 3])
    assert model.y_mean_ == pytest.approx(y[big].mean())


def test_pfedhgp_no_client_with_three_rows_warns_and_leaves_the_scales():
    X, y, groups = _regression((1, 2, 2))
    with pytest.warns(UserWarning, match="no client has 3 or more rows"):
        model = PFedHGPRegressor(**GP_SMALL).fit(X, y, groups=groups)
    assert model.y_mean_ == 0.0 and model.y_std_ == 1.0
    np.testing.assert_array_equal(model.x_mean_, 0.0)
    np.testing.assert_array_equal(model.x_std_, 1.0)


def test_pfedhgp_input_bounds_place_the_grid_and_need_no_input_sums():
    rng = np.random.default_rng(3)
    X = rng.uniform(0.2, 9.8, (40, 1))
    y = np.sin(X[:, 0])
    groups = np.repeat([0, 1], 20)
    # (the linear prior mean would need the input sums for its centring)
    model = PFedHGPRegressor(inference="variational",
                             normalize_X=False, input_bounds=(0.0, 10.0), n_rounds=1,
                             learn_inducing=False, random_state=0, n_inducing_global=6,
                             mean_function="constant")
    fit_keeping(model, X, y, groups)
    np.testing.assert_allclose(model.inducing_global_[:, 0], np.linspace(0, 10, 6))
    assert all("sum_x" not in names for names in _setup_up(model.communication_, 0).values())
    # without bounds: the pooled centre +- sqrt(3) scale (one client: its mean and sd)
    one = PFedHGPRegressor(inference="variational",
                           normalize_X=False, n_rounds=1, learn_inducing=False,
                           random_state=0, n_inducing_global=6).fit(X, y)
    centre, sd = X[:, 0].mean(), X[:, 0].std()
    np.testing.assert_allclose(one.inducing_global_[[0, -1], 0],
                               [centre - np.sqrt(3) * sd, centre + np.sqrt(3) * sd])
    # with normalize_X the bounds are standardized
    std = PFedHGPRegressor(inference="variational",
                           input_bounds=[[0.0], [10.0]], n_rounds=1, learn_inducing=False,
                           random_state=0, n_inducing_global=6).fit(X, y)
    np.testing.assert_allclose(std.inducing_global_[:, 0], np.linspace(0, 10, 6))


@pytest.mark.parametrize("bounds", [(0.0, np.inf), [[0.0, 0.0], [1.0, 1.0]], "wide",
                                    (3.0, 1.0), [0.0, 1.0, 2.0]])
def test_pfedhgp_bad_input_bounds_are_refused(bounds):
    X, y, groups = _regression((5, 5))
    with pytest.raises(ValueError, match="input_bounds"):
        PFedHGPRegressor(inference="variational", input_bounds=bounds, n_rounds=1).fit(
            X[:, :1], y, groups=groups)


def test_tensor_one_row_clients_send_no_sums_nor_intercept():
    X, y, groups = _regression(SIZES, n_features=6)
    model = fit_keeping(PersonalizedTensorRegressor(**TENSOR, rank=(1, 1), n_rounds=2,
                                                    random_state=0), X, y, groups)
    names = _setup_up(model.communication_, -1)
    for client, n in enumerate(SIZES):
        assert ("x_sum" in names[client]) == (n >= 2), (client, n)
    big = np.isin(groups, [k for k, n in enumerate(SIZES) if n >= 2])
    np.testing.assert_allclose(
        model.shared_intercept_, y[big].mean() - X[big].mean(0) @ model.shared_coef_.ravel())
    # the local model, a function of the rows' Gram matrix, needs 3 rows (sends_gram)
    avg = fit_keeping(FedAvgTensorRegressor(**TENSOR, rank=(1, 1), n_iter=3), X, y, groups)
    sent = _setup_up(avg.communication_, 0)
    for client, n in enumerate(SIZES):
        assert ("intercept" in sent[client]) == ("coef" in sent[client]) == (n >= 3), (client, n)


def test_dro_two_row_sites_send_no_moments():
    X, y, groups = _classification(SIZES_LINEAR)
    clf = fit_keeping(DPFedDROClassifier(epsilon=None, n_rounds=2, random_state=0), X, y,
                      groups)
    names = _setup_up(clf.communication_, -1)
    for client, n in enumerate(SIZES_LINEAR):
        assert ("feature_sum" in names[client]) == (n >= 3), (client, n)
    big = np.isin(groups, [k for k, n in enumerate(SIZES_LINEAR) if n >= 3])
    np.testing.assert_allclose(clf.feature_mean_, X[big].mean(axis=0))
    np.testing.assert_allclose(clf.feature_scale_, X[big].std(axis=0))
    X2, y2, g2 = _classification((2, 2, 2))
    with pytest.warns(UserWarning, match="standardize"):
        clf = DPFedDROClassifier(epsilon=None, n_rounds=2).fit(X2, y2, groups=g2)
    assert clf.feature_mean_ is None


# -- per-column nonzero contributors: a column nonzero on one row of a client sums to
# that row's value however many rows the client has (skfed.federated._release)


def _zero_but(values, rows, keep):
    """``values[rows]`` set to 0 except on its first ``keep`` rows (in place)."""
    idx = np.flatnonzero(rows)
    values[idx[keep:]] = 0.0


def test_pfedhgp_sparse_columns_send_no_sums():
    sizes = (1, 2, 7, 9, 12, 8)
    X, y, groups = _regression(sizes)
    _zero_but(X[:, 1], groups == 2, 1)  # nonzero on one row
    _zero_but(X[:, 1], groups == 3, 2)  # on two: the sum of squares gives both
    _zero_but(X[:, 1], groups == 4, 0)  # all zero: its sums are 0, it still sends
    _zero_but(y, groups == 5, 2)  # y nonzero on two rows
    model = fit_keeping(PFedHGPRegressor(**GP_SMALL), X, y, groups)
    names = _setup_up(model.communication_, 0)
    ys, xs, cross = {"sum_y", "sum_y2"}, {"sum_x", "sum_x2"}, {"xtx", "xty"}
    expected = [{"n"}, {"n"}, {"n"} | ys, {"n"} | ys, {"n"} | ys | xs | cross, {"n"} | xs]
    for client, want in enumerate(expected):
        assert names[client] == want, (client, names[client])
    # the constant mean: the pooled centre of y is that of the clients that sent sum_y
    const = fit_keeping(PFedHGPRegressor(mean_function="constant", **GP_SMALL), X, y,
                        groups)
    assert const.y_mean_ == pytest.approx(y[np.isin(groups, [2, 3, 4])].mean())


def test_pfedhgp_multioutput_sparse_output_sends_no_sums():
    X, y, groups = _regression((7, 9, 12), n_outputs=2)
    _zero_but(y[:, 1], groups == 0, 1)
    model = fit_keeping(PFedHGPRegressor(**GP_SMALL), X, y, groups)
    names = _setup_up(model.communication_, 0)
    assert "sum_y" not in names[0] and "xty" not in names[0]
    assert {"sum_y", "yty", "xty"} <= names[1] and {"sum_y", "yty", "xty"} <= names[2]


def test_dro_sparse_feature_sends_no_moments():
    X, y, groups = _classification(SIZES_LINEAR)
    _zero_but(X[:, 1], groups == 3, 1)
    _zero_but(X[:, 1], groups == 4, 2)
    _zero_but(X[:, 1], groups == 5, 0)
    clf = fit_keeping(DPFedDROClassifier(epsilon=None, n_rounds=2, random_state=0), X, y,
                      groups)
    names = _setup_up(clf.communication_, -1)
    for client in range(len(SIZES_LINEAR)):
        assert ("feature_sum" in names[client]) == (client == 5), client
    np.testing.assert_allclose(clf.feature_mean_, X[groups == 5].mean(axis=0))


def test_tensor_sparse_columns_send_no_sums_nor_intercept():
    X, y, groups = _regression(SIZES, n_features=6)
    _zero_but(X[:, 0], groups == 4, 1)  # one nonzero value: no sums
    _zero_but(X[:, 0], groups == 5, 2)  # two: sums alone may be sent
    _zero_but(X[:, 0], groups == 6, 0)  # none: sends
    _zero_but(y, groups == 3, 1)  # y nonzero on one of two rows: no sums
    sends = {0: False, 1: True, 2: False, 3: False, 4: False, 5: True, 6: True}
    model = fit_keeping(PersonalizedTensorRegressor(**TENSOR, rank=(1, 1), n_rounds=2,
                                                    random_state=0), X, y, groups)
    names = _setup_up(model.communication_, -1)
    for client, want in sends.items():
        assert ("x_sum" in names[client]) == want, client
    big = np.isin(groups, [k for k, want in sends.items() if want])
    np.testing.assert_allclose(
        model.shared_intercept_, y[big].mean() - X[big].mean(0) @ model.shared_coef_.ravel())
    # the local model: each column and product of two columns needs 0 or >= 3 nonzero values
    avg = fit_keeping(FedAvgTensorRegressor(**TENSOR, rank=(1, 1), n_iter=3), X, y, groups)
    sent = _setup_up(avg.communication_, 0)
    for client in sends:
        assert ("intercept" in sent[client]) == ("coef" in sent[client]) == (client == 6), client
