"""Shared docstring entries (``skfed.utils._docstrings``) are filled in wherever they are named."""

import inspect

import pytest

from skfed.utils._docstrings import DOCS, fill_doc
from skfed.utils.discovery import all_estimators


def _docstrings(cls):
    yield cls.__name__, cls.__doc__
    for name, member in inspect.getmembers(cls):
        if not name.startswith("__") and callable(member):
            yield f"{cls.__name__}.{name}", getattr(member, "__doc__", None)


@pytest.mark.parametrize("name, cls", all_estimators())
def test_no_placeholder_is_left_in_an_estimator_docstring(name, cls):
    for where, doc in _docstrings(cls):
        assert "%(" not in (doc or ""), where


def test_an_entry_takes_the_indentation_of_its_placeholder_and_may_name_others():
    @fill_doc
    class Model:
        """Model.

        Parameters
        ----------
        %(fit_rows)s
        """

        def predict(self, X):
            """Predict.

            Parameters
            ----------
            %(X_predict)s
            """

    lines = Model.__doc__.splitlines()
    assert "        X : array-like of shape (n_samples, n_features)" in lines
    assert "            Training rows of all clients." in lines
    assert "        groups : array-like of shape (n_samples,), default=None" in lines
    assert "                Rows to predict." in Model.predict.__doc__.splitlines()


def test_an_unknown_entry_fails_where_it_is_named():
    def f():
        """F.

        %(no_such_entry)s
        """

    with pytest.raises(KeyError, match="no_such_entry"):
        fill_doc(f)


def test_every_entry_starts_with_a_numpydoc_name_line():
    for name, text in DOCS.items():
        first = text.splitlines()[0]
        assert " : " in first or first.startswith(("%(", "Parameters")), name
