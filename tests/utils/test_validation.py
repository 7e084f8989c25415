import numpy as np
import pytest

from skfed.utils import check_groups, label_kind, map_clients
from skfed.utils._validation import check_fraction


def test_check_groups_labels():
    clients, idx = check_groups(["b", "a", "b", "c"], 4)
    assert clients.tolist() == ["a", "b", "c"] and idx.tolist() == [1, 0, 1, 2]
    clients, idx = check_groups(None, 3)
    assert clients.tolist() == [0] and idx.tolist() == [0, 0, 0]
    clients, idx = check_groups(np.array([[3], [1]]), 2)  # column vector is accepted
    assert clients.tolist() == [1, 3]


@pytest.mark.parametrize(
    "groups, n, match",
    [
        ([0, 1], 3, "groups has 2 labels but X has 3 rows"),
        ([[0, 1], [1, 0]], 2, "groups must be 1-D"),
        ([0.0, np.nan], 2, "NaN"),
        (np.array([None, 1], dtype=object), 2, "None"),
        (np.array([1, "a"], dtype=object), 2, "one comparable type"),
    ],
)
def test_check_groups_errors(groups, n, match):
    with pytest.raises(ValueError, match=match):
        check_groups(groups, n)


def test_map_clients():
    clients = np.array(["a", "b"])
    assert map_clients(["b", "z", "a"], clients, 3).tolist() == [1, -1, 0]
    assert map_clients(None, clients, 2).tolist() == [-1, -1]
    with pytest.raises(ValueError, match=r"not seen in fit: \['z'\]"):
        map_clients(["b", "z"], clients, 2, unknown_client="error")
    with pytest.raises(ValueError, match="unknown_client"):
        map_clients(["b"], clients, 1, unknown_client="drop")
    assert map_clients([5, 1], np.array([1, 2]), 2).tolist() == [-1, 0]


# --- kinds of client labels: a mix at fit and another kind at predict are errors ---

INT_CLIENTS = np.array([0, 1, 2])
STR_CLIENTS = np.array(["0", "1", "2"])


def _categorical(values):
    pd = pytest.importorskip("pandas")
    return pd.Categorical(values)


@pytest.mark.parametrize(
    "groups, kind",
    [
        (np.array([2, 0, 1]), "number"),
        (np.array([2, 0, 1], dtype=np.int32), "number"),
        ([0.0, 1.5], "number"),
        (np.array([1, np.int64(2)], dtype=object), "number"),
        (["a", "b"], "string"),
        (np.array([np.str_("a"), "b"], dtype=object), "string"),
        ([True, False], "bool"),
        ([b"a", b"b"], "bytes"),
    ],
)
def test_label_kind(groups, kind):
    assert label_kind(np.asarray(groups)) == kind
    check_groups(groups, len(groups))  # one kind: accepted at fit


@pytest.mark.parametrize(
    "groups",
    [
        np.array([1, "a"], dtype=object),
        np.array([1, True], dtype=object),  # True == 1 would merge the two silently
        np.array([np.str_("a"), np.int64(1)], dtype=object),
        np.array(["a", b"a"], dtype=object),
    ],
)
def test_fit_refuses_a_mix_of_kinds(groups):
    with pytest.raises(ValueError, match="one comparable type.*got a mix of"):
        check_groups(groups, len(groups))


def test_fit_refuses_nan_in_object_labels():
    pd = pytest.importorskip("pandas")
    groups = pd.Series(pd.Categorical(["a", None, "b"])).to_numpy()  # None -> NaN
    with pytest.raises(ValueError, match="NaN"):
        check_groups(groups, 3)


@pytest.mark.parametrize(
    "clients, groups",
    [
        (INT_CLIENTS, ["0", "1", "2"]),
        (INT_CLIENTS, np.array(["0", "1", "2"], dtype=object)),
        (INT_CLIENTS, [np.str_("0"), np.str_("1"), np.str_("2")]),
        (INT_CLIENTS, [False, True, True]),
        (INT_CLIENTS, "categorical-str"),
        (STR_CLIENTS, [0, 1, 2]),
        (STR_CLIENTS, np.array([0, 1, 2], dtype=object)),
        (STR_CLIENTS, "categorical-int"),
        (np.array([False, True]), [0, 1, 1]),
    ],
)
@pytest.mark.parametrize("unknown_client", ["global", "error"])
def test_predict_refuses_labels_of_another_kind(clients, groups, unknown_client):
    if isinstance(groups, str):
        groups = _categorical(["0", "1", "2"] if groups.endswith("str") else [0, 1, 2])
    with pytest.raises(ValueError, match="labels but the clients were fitted with"):
        map_clients(groups, clients, 3, unknown_client=unknown_client)


@pytest.mark.parametrize(
    "clients, groups, expected",
    [
        (INT_CLIENTS, np.array([2, 7], dtype=np.int32), [2, -1]),
        (INT_CLIENTS, [2.0, 0.0], [2, 0]),
        (INT_CLIENTS, np.array([1, 2], dtype=object), [1, 2]),
        (INT_CLIENTS, "categorical-int", [0, 1]),
        (STR_CLIENTS, np.array(["1", "x"], dtype=object), [1, -1]),
        (STR_CLIENTS, [np.str_("2"), "0"], [2, 0]),
        (STR_CLIENTS, "categorical-str", [0, 1]),
        (np.array(["a", "b"], dtype=object), ["b", "a"], [1, 0]),
    ],
)
def test_predict_accepts_labels_of_the_same_kind(clients, groups, expected):
    if isinstance(groups, str):
        groups = _categorical(["0", "1"] if groups.endswith("str") else [0, 1])
    assert map_clients(groups, clients, 2).tolist() == expected


def test_mixin_client_index_refuses_labels_of_another_kind():
    from sklearn.linear_model import Ridge

    from skfed.baselines import LocalEstimator

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    model = LocalEstimator(Ridge()).fit(X, y, groups=np.repeat([0, 1, 2], 10))
    with pytest.raises(ValueError, match="string labels but the clients were fitted with number"):
        model._client_index(["0", "1", "2"], 3)
    # before, every row silently got the population prediction
    with pytest.raises(ValueError, match="string labels"):
        model.predict(X, groups=np.repeat(["0", "1", "2"], 10))
    with pytest.raises(ValueError, match="string labels"):
        model.score(X, y, groups=np.repeat(["0", "1", "2"], 10))
    np.testing.assert_array_equal(
        model.predict(X, groups=np.repeat([0, 1, 2], 10).astype(np.int32)),
        model.predict(X, groups=np.repeat([0, 1, 2], 10)),
    )


# -- found by tests/test_properties.py: scikit-learn messages that name no argument ------------

@pytest.mark.parametrize("make, X, y, name", [
    ("local", np.ones(6), np.ones(6), "X"),  # "Expected 2D array, got 1D array instead"
    ("local", np.ones((6, 2, 1)), np.ones(6), "X"),  # "Found array with dim 3"
    ("local", np.ones((0, 2)), np.ones(0), "X"),  # "Found array with 0 sample(s)"
    ("local", np.array([[1.0, "a"]] * 6, dtype=object), np.ones(6), "X"),  # string to float
    ("local", np.ones((6, 2)), np.ones(5), "y"),  # "inconsistent numbers of samples"
    ("fedavg", np.ones(6), np.ones(6), "X"),
    ("fedavg", np.ones((6, 2)), np.ones(5), "y"),
])
def test_fit_errors_name_the_argument(make, X, y, name):
    from sklearn.linear_model import Ridge

    from skfed.baselines import FedAvgRegressor, LocalEstimator

    est = LocalEstimator(Ridge()) if make == "local" else FedAvgRegressor(n_rounds=2)
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        est.fit(X, y, groups=np.repeat([0, 1], len(y) // 2 + len(y) % 2)[:len(X)])


@pytest.mark.parametrize("X", [np.ones(2), np.ones((2, 2, 1)), np.array([[1.0, "a"]] * 2,
                                                                          dtype=object)])
def test_predict_errors_name_X(X):
    from skfed.linear_model import CentralizedDROClassifier

    rng = np.random.default_rng(0)
    model = CentralizedDROClassifier().fit(rng.uniform(-1, 1, (20, 2)), np.arange(20) % 2)
    with pytest.raises(ValueError, match=r"\bX\b"):
        model.predict(X)


@pytest.mark.parametrize("cls", ["MixedLMRegressor", "TensorlyTuckerRegressor",
                                 "FedAvgRegressor", "PFedGPRegressor"])
def test_regressors_refuse_text_y_by_name(cls):
    # before: a TypeError deep in numpy ("not compatible with add.reduce") or
    # "could not convert string to float" without the argument's name
    import skfed.baselines
    import skfed.gaussian_process
    import skfed.tensor

    est = next(getattr(m, cls) for m in (skfed.baselines, skfed.gaussian_process, skfed.tensor)
               if hasattr(m, cls))()
    X = np.random.default_rng(0).uniform(-1, 1, (8, 2))
    y = np.array([f"v{i}" for i in range(8)])
    kw = {} if cls == "TensorlyTuckerRegressor" else {"groups": np.repeat([0, 1], 4)}
    with pytest.raises(ValueError, match=r"y must hold numbers"):
        est.fit(X, y, **kw)


@pytest.mark.parametrize("cls", ["FedMixedLMRegressor", "PFedHGPRegressor",
                                 "DPFedDROClassifier", "LocalEstimator"])
def test_fit_refuses_a_missing_target_by_name(cls):
    # before: None passed scikit-learn's finiteness check of an object y and became NaN
    # (FedMixedLMRegressor predicted NaN; others failed far from the cause)
    from sklearn.linear_model import LogisticRegression, Ridge

    import skfed.baselines
    import skfed.gaussian_process
    import skfed.linear_model

    X = np.random.default_rng(0).uniform(-1, 1, (18, 2))
    if cls == "DPFedDROClassifier":
        est, y = skfed.linear_model.DPFedDROClassifier(), ["u", "v"] * 9
    elif cls == "LocalEstimator":
        est, y = skfed.baselines.LocalEstimator(LogisticRegression()), [0, 1] * 9
    else:
        mod = skfed.linear_model if cls == "FedMixedLMRegressor" else skfed.gaussian_process
        est, y = getattr(mod, cls)(), list(X.sum(1))
    y[5] = None
    groups = np.repeat(["a", "b", "c"], 6)
    with pytest.raises(ValueError, match=r"y contains 1 missing value"):
        est.fit(X, y, groups=groups)
    with pytest.raises(ValueError, match=r"y contains 1 missing value"):
        est.fit(X, np.array(y, dtype=object), groups=groups)
    if cls == "LocalEstimator":
        y[5] = 1
        skfed.baselines.LocalEstimator(Ridge()).fit(X, np.array(y, dtype=object), groups=groups)


def test_check_scale():
    from skfed.utils._validation import check_scale

    check_scale(np.array([1e150, -1e150]), "X")  # the sum of squares is finite
    check_scale(np.zeros(3), "X")
    check_scale(np.array([np.nan, 1.0]), "X")  # left to the finiteness checks
    with pytest.raises(ValueError, match="y of client 'a' is out of range"):
        check_scale(np.array([1e300, 1.0]), "y", label="a")


@pytest.mark.parametrize(
    "value, kwargs, ok",
    [
        (1, {}, True),
        (0.25, {}, True),
        (np.float32(0.5), {}, True),
        (0, {}, False),
        (1.5, {}, False),
        (0, {"allow_zero": True, "allow_one": False}, True),
        (1.0, {"allow_zero": True, "allow_one": False}, False),
        (-0.1, {"allow_zero": True}, False),
        (True, {}, False),
        (float("nan"), {}, False),
        ("0.5", {}, False),
        (None, {"allow_zero": True}, False),
    ],
)
def test_check_fraction(value, kwargs, ok):
    if ok:
        assert check_fraction(value, "frac", **kwargs) == float(value)
    else:
        with pytest.raises(ValueError, match=r"^frac must be in [\[(]0, 1[\])], got"):
            check_fraction(value, "frac", **kwargs)


def test_check_unknown_client_is_the_one_check_of_every_estimator():
    import pathlib

    from skfed.utils._validation import check_unknown_client

    assert check_unknown_client("global") == "global"
    for bad in ("Global", None, 1, ["error"]):
        with pytest.raises(ValueError, match="unknown_client must be one of"):
            check_unknown_client(bad)
    # no estimator module repeats the check by hand
    root = pathlib.Path(__file__).resolve().parents[2] / "skfed"
    copies = [str(p) for p in root.rglob("*.py")
              if "unknown_client must be" in p.read_text() and p.name != "_validation.py"]
    assert copies == []


def test_skfed_warnings_point_at_the_users_call():
    """A warning raised deep inside a fit names the line of the user's ``fit`` call."""
    from skfed.datasets import make_tensor_regression
    from skfed.tensor import PersonalizedTensorRegressor

    X, y, g = make_tensor_regression(n_clients=3, n_samples=30, tensor_shape=(4, 3),
                                     output_shape=None, rank=(2, 2), n_nonzero=2,
                                     random_state=0)
    model = PersonalizedTensorRegressor(tensor_shape=(4, 3), rank=(2, 2), fit_intercept=False,
                                        epsilon=5.0, privacy_mode="paper", random_state=0)
    with pytest.warns(UserWarning, match="no differential-privacy guarantee") as record:
        model.fit(X, y, groups=g)
    assert {w.filename for w in record if "guarantee" in str(w.message)} == {__file__}


def test_numpy_stringdtype_labels_are_strings():
    # numpy 2's StringDType was a kind of its own: predicting with '<U' labels of a model
    # fitted with StringDType labels (or the reverse) was refused
    if not hasattr(np.dtypes, "StringDType"):
        pytest.skip("numpy without StringDType")
    from sklearn.linear_model import Ridge

    from skfed.baselines import LocalEstimator

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(30, 2)), rng.normal(size=30)
    plain = np.repeat(["a", "b", "c"], 10)
    typed = plain.astype(np.dtypes.StringDType())
    assert label_kind(np.asarray(check_groups(typed, 30)[0])) == "string"
    ref = LocalEstimator(Ridge()).fit(X, y, groups=plain).predict(X, groups=plain)
    model = LocalEstimator(Ridge()).fit(X, y, groups=typed)
    for groups in (plain, typed, plain.astype(object)):
        np.testing.assert_array_equal(model.predict(X, groups=groups), ref)
    np.testing.assert_array_equal(
        LocalEstimator(Ridge()).fit(X, y, groups=plain).predict(X, groups=typed), ref)
    with pytest.raises(ValueError, match="None"):
        check_groups(np.array(["a", None], dtype=np.dtypes.StringDType(na_object=None)), 2)
