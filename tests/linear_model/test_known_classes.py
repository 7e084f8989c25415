"""The public ``classes=`` of the federated linear classifiers.

Without it each site sends the set of class labels it holds in the set-up
exchange; that set fixes the number of classes, hence the step sizes, the
noise scale and every message's shape, and one row of a rare class changes
it, so a private fit lists it in ``privacy_spent_["outside"]`` and warns.
With ``classes`` nothing about the labels leaves a site.
"""

import warnings

import numpy as np
import pytest
from sklearn.preprocessing import Normalizer

from skfed.linear_model import (
    DPFedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
    FedOvADROClassifier,
)

PRIVATE = {
    "DPFedDROClassifier": (DPFedDROClassifier, dict(n_rounds=4)),
    "DPFedERMClassifier": (DPFedERMClassifier, dict(n_rounds=4, c_w=5.0)),
    "DPFedSGDClassifier": (DPFedSGDClassifier, dict(n_rounds=4, learning_rate=2.0)),
}
ALL = {**PRIVATE, "FedOvADROClassifier": (FedOvADROClassifier, dict(n_rounds=2))}
LABEL_WARNING = "set of class labels"


def _rows(rng, y, p=4):
    return Normalizer().fit_transform(np.eye(3, p)[y] + 0.15 * rng.standard_normal((y.size, p)))


@pytest.fixture(scope="module")
def every_site_every_class():
    rng = np.random.default_rng(0)
    groups = np.repeat([0, 1, 2], 30)
    y = np.tile([0, 1, 2], 30)  # each site holds each class
    return _rows(rng, y), y, groups


@pytest.fixture(scope="module")
def rare_class():
    """Class 2 has one row (on site 0); relabelling it to 0 leaves two classes."""
    rng = np.random.default_rng(1)
    groups = np.repeat([0, 1, 2], 30)
    y = rng.integers(0, 2, 90)
    y[3] = 2
    X = _rows(rng, y)
    relabelled = y.copy()
    relabelled[3] = 0
    return X, y, relabelled, groups


def _fit(name, X, y, groups, **params):
    cls, kw = ALL[name]
    return cls(**kw, **params, random_state=0).fit(X, y, groups=groups)


def _fitted(model):
    return {k: v for k, v in vars(model).items()
            if k.endswith("_") and not k.startswith("_")
            and isinstance(v, (np.ndarray, float, int, tuple))}


@pytest.mark.parametrize("name", sorted(ALL))
def test_classes_gives_the_fit_of_sites_holding_every_class(name, every_site_every_class):
    # every site holds every class: the sites' label sets say nothing the public classes do
    # not, so the fit (steps, noise, models) is today's, only the set-up messages are smaller
    X, y, groups = every_site_every_class
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        sent = _fit(name, X, y, groups)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing outside the guarantee: no warning
        public = _fit(name, X, y, groups, classes=[2, 0, 1])  # order does not matter
    a, b = _fitted(sent), _fitted(public)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert public.privacy_spent_["epsilon"] == sent.privacy_spent_["epsilon"]
    setup = [r for r in public.communication_.records if r.round == -1 and r.direction == "up"]
    assert {r.names for r in setup} == {("n_samples", "n_features")}
    down = [r for r in public.communication_.records if r.round == -1 and r.direction == "down"]
    assert all("classes" in r.names for r in down)


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_rare_class_row_moves_nothing_with_classes(name, rare_class):
    X, y, relabelled, groups = rare_class

    def released(model):
        ups = [r for r in model.communication_.records if r.direction == "up" and r.round >= 0]
        noise = (model.noise_sigma_M_, model.noise_sigma_lambda_) if hasattr(
            model, "noise_sigma_M_") else (model.noise_sigma_,)
        return {r.shapes for r in ups}, [n.tolist() for n in noise]

    # without classes= the relabelled row changes the messages' shape and the noise scale
    # (the epsilon reported is the same): what the label sets release
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        before, after = (_fit(name, X, labels, groups) for labels in (y, relabelled))
    assert before.privacy_spent_["epsilon"] == after.privacy_spent_["epsilon"]
    assert released(before) != released(after)
    # with the public classes both depend on public inputs only
    before, after = (_fit(name, X, labels, groups, classes=[0, 1, 2])
                     for labels in (y, relabelled))
    assert released(before) == released(after)
    # the models, and the private scaling's histograms (4 features x 83 public bins)
    # and temperature's summed losses (8 public temperatures)
    assert released(before)[0] - {((4, 83),), ((8,),)} == {((3, 4),)}
    np.testing.assert_array_equal(before.classes_, after.classes_)


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_label_sets_are_listed_outside_and_warned(name, rare_class):
    X, y, _, groups = rare_class
    with pytest.warns(UserWarning, match=r"set of class labels.*classes="):
        model = _fit(name, X, y, groups)
    spent = model.privacy_spent_
    assert len(spent["outside"]) == 1 and spent["outside"][0].startswith("classes: ")
    assert not spent["strict"]
    assert np.isfinite(spent["epsilon"])  # the noisy releases' own bound, as before
    assert "outside" in spent["covers"]
    known = _fit(name, X, y, groups, classes=[0, 1, 2])
    assert known.privacy_spent_["outside"] == [] and known.privacy_spent_["strict"]
    assert known.privacy_spent_["epsilon"] == spent["epsilon"]


@pytest.mark.parametrize("name", sorted(ALL))
def test_non_private_fit_does_not_warn(name, rare_class):
    X, y, _, groups = rare_class
    params = {} if name == "FedOvADROClassifier" else {"epsilon": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # small sites keep their calibration losses (the small-client rule): not this test's
        warnings.filterwarnings("ignore", message="no site has more than")
        model = _fit(name, X, y, groups, **params)
    assert model.privacy_spent_["outside"] == []


@pytest.mark.parametrize("name", sorted(ALL))
def test_label_outside_classes_is_refused(name, rare_class):
    X, y, _, groups = rare_class
    with pytest.raises(ValueError, match=r"class labels \[2\] not in classes=\[0, 1\] "
                                         r"\(client 0\).*\(classes\)"):
        _fit(name, X, y, groups, classes=[0, 1])


@pytest.mark.parametrize("classes, match", [
    ([1], "at least 2"),
    ([[0, 1], [2, 3]], "1-d"),
    ([0.0, np.nan], "finite"),
    ([0, None], "numbers or strings"),
])
def test_invalid_classes(classes, match, rare_class):
    X, y, _, groups = rare_class
    with pytest.raises(ValueError, match=match):
        _fit("DPFedDROClassifier", X, y, groups, classes=classes)


def test_text_labels(rare_class):
    X, y, _, groups = rare_class
    text = np.array(["a", "b", "c"])[y]
    model = _fit("DPFedDROClassifier", X, text, groups, classes=["c", "b", "a"])
    assert model.classes_.tolist() == ["a", "b", "c"]
    assert set(model.predict(X)) <= {"a", "b", "c"}
    with pytest.raises(ValueError, match="not in classes"):
        _fit("DPFedDROClassifier", X, text, groups, classes=[0, 1, 2])


def test_balanced_weights_with_classes(every_site_every_class):
    # non-private: the class histograms go up over the public classes (zeros included); a
    # class no site holds has no rows to weigh
    X, y, groups = every_site_every_class
    y = np.where(y == 2, 1, y)  # classes 0 (30 rows) and 1 (60 rows)
    params = dict(epsilon=None, class_weight="balanced")
    sent = _fit("DPFedDROClassifier", X, y, groups, **params)
    public = _fit("DPFedDROClassifier", X, y, groups, classes=[0, 1], **params)
    np.testing.assert_array_equal(public.class_weight_, sent.class_weight_)
    np.testing.assert_array_equal(public.coef_, sent.coef_)
    wider = _fit("DPFedDROClassifier", X, y, groups, classes=[0, 1, 5], **params)
    np.testing.assert_allclose(wider.class_weight_, [90 / 60, 90 / 120, 1.0])
    assert wider.coef_.shape == (3, 4)
