"""``skfed.base.keyword_init``: an ``__init__`` from a table of defaults, as scikit-learn
sees it."""

import inspect

import pytest
from sklearn.base import BaseEstimator, clone

from skfed.base import init_defaults, keyword_init


class Parent(BaseEstimator):
    __init__ = keyword_init({"alpha": 1.0, "n_iter": 10}, positional=1)


class Child(Parent):
    __init__ = keyword_init(init_defaults(Parent), n_iter=20, weights="uniform")


def test_signature_get_params_clone_and_repr():
    sig = inspect.signature(Child)
    assert list(sig.parameters) == ["alpha", "n_iter", "weights"]
    assert all(p.kind is p.KEYWORD_ONLY for p in sig.parameters.values())
    alpha = inspect.signature(Parent).parameters["alpha"]
    assert alpha.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    model = Child(weights="size")
    assert model.get_params() == {"alpha": 1.0, "n_iter": 20, "weights": "size"}
    assert clone(model).get_params() == model.get_params()
    assert repr(model) == "Child(weights='size')"
    assert Parent(3.0).alpha == 3.0


def test_wrong_arguments_are_refused_as_python_does():
    with pytest.raises(TypeError, match="unexpected keyword argument 'beta'"):
        Child(beta=1)
    with pytest.raises(TypeError, match="positional"):
        Child(1.0)
    with pytest.raises(TypeError, match="multiple values"):
        Parent(1.0, alpha=2.0)
