"""A scorer that sends the test rows' client labels to ``predict``."""

from inspect import signature

import numpy as np
from sklearn.base import is_classifier, is_regressor
from sklearn.metrics import get_scorer
from sklearn.utils.metadata_routing import _MetadataRequester
from sklearn.utils.multiclass import type_of_target

__all__ = ["make_personalized_scorer"]

RESPONSE_METHODS = ("predict", "predict_proba", "decision_function")


class PersonalizedScorer(_MetadataRequester):
    """Call ``estimator.<response_method>(X, groups=groups)`` and score the result.

    scikit-learn's scorers call ``predict`` without metadata
    (scikit-learn#27977), so a personalized model would be scored with its
    population prediction. This scorer *consumes* ``groups`` (requested by
    default for ``score``), so with metadata routing enabled ``GridSearchCV``
    and ``cross_validate`` route the test rows' groups to it, and it passes
    them on to the estimator's response method.

    Build it with :func:`make_personalized_scorer`.
    """

    __metadata_request__score = {"groups": True}

    def __init__(self, score_func, sign, kwargs, response_method):
        self._score_func = score_func
        self._sign = sign
        self._kwargs = kwargs
        self._response_method = response_method

    def score(self, X, y, groups=None, sample_weight=None):
        """Declare the metadata this scorer accepts (used by routing only)."""
        raise NotImplementedError("call the scorer: scorer(estimator, X, y, groups=...)")

    def _accept_sample_weight(self):
        return "sample_weight" in signature(self._score_func).parameters

    def __call__(self, estimator, X, y_true, groups=None, sample_weight=None):
        """Score ``estimator`` on ``X``, personalized by ``groups``.

        Parameters
        ----------
        estimator : estimator object
            A fitted skfed estimator (or a pipeline ending in one).
        X : array-like of shape (n_samples, n_features)
            Test rows.
        y_true : array-like of shape (n_samples,)
            True targets.
        groups : array-like of shape (n_samples,), default=None
            Client label of each test row; ``None`` scores the population
            prediction.
        sample_weight : array-like of shape (n_samples,), default=None
            Passed to the metric.

        Returns
        -------
        score : float
            Signed so that greater is better.
        """
        pos_label = None if is_regressor(estimator) else self._get_pos_label()
        name = self._method_name(estimator)
        y_pred = _response_values(estimator, name, X, groups, pos_label)
        kwargs = dict(self._kwargs)
        if sample_weight is not None:
            kwargs["sample_weight"] = sample_weight
        return self._sign * self._score_func(y_true, y_pred, **kwargs)

    def _get_pos_label(self):
        """``pos_label`` of the metric kwargs, else the metric's default, as scikit-learn."""
        if "pos_label" in self._kwargs:
            return self._kwargs["pos_label"]
        params = signature(self._score_func).parameters
        if "pos_label" in params:
            return params["pos_label"].default
        return None

    def _method_name(self, estimator):
        """The response method; of several alternatives, the first ``estimator`` has.

        scikit-learn's scorers do the same: ``roc_auc`` uses ``decision_function``,
        or ``predict_proba`` when the estimator has no ``decision_function``.
        """
        methods = self._response_method
        if isinstance(methods, str):
            return methods
        for name in methods:
            if hasattr(estimator, name):
                return name
        raise AttributeError(
            f"{type(estimator).__name__} has none of the response methods "
            f"{', '.join(methods)} that this scorer needs."
        )

    def __repr__(self):
        name = getattr(self._score_func, "__name__", repr(self._score_func))
        sign = "" if self._sign > 0 else ", greater_is_better=False"
        extra = "".join(f", {k}={v!r}" for k, v in self._kwargs.items())
        return (
            f"make_personalized_scorer({name}{sign}, "
            f"response_method={self._response_method!r}{extra})"
        )


def make_personalized_scorer(
    metric, *, response_method="predict", greater_is_better=True, **kwargs
):
    """Make a scorer that scores personalized (per-client) predictions.

    Use it as ``scoring=`` in ``GridSearchCV``, ``cross_validate`` or
    ``cross_val_score`` with ``sklearn.set_config(enable_metadata_routing=True)``
    and ``params={"groups": groups}``: the test rows' groups then reach
    ``estimator.predict(X, groups=...)``, also through a ``Pipeline``.
    Without routing, or with ``groups=None``, it scores the population
    prediction.

    Parameters
    ----------
    metric : str or callable
        A scikit-learn scorer name (``"r2"``, ``"neg_mean_squared_error"``,
        ``"accuracy"``, ...) or a metric ``metric(y_true, y_pred, **kwargs)``.
    response_method : {"predict", "predict_proba", "decision_function"}, \
            default="predict"
        Estimator method whose output is scored (callable ``metric`` only;
        a scorer name brings its own, and other values are refused). When the
        scorer lists alternatives (``"roc_auc"``: ``decision_function``, then
        ``predict_proba``), the first the estimator has is used, as in
        scikit-learn.
    greater_is_better : bool, default=True
        Whether ``metric`` is a score (True) or a loss (False, then negated).
        Callable ``metric`` only (a scorer name is already signed; False is
        refused).
    **kwargs : dict
        Extra arguments for ``metric``. For a binary classifier, ``pos_label``
        (else ``metric``'s default ``pos_label``, else ``classes_[1]``) also
        picks the ``predict_proba`` column and the sign of
        ``decision_function``, as in scikit-learn's scorers.

    Returns
    -------
    scorer : callable
        ``scorer(estimator, X, y, groups=None, sample_weight=None)``.

    Examples
    --------
    >>> import sklearn
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn.model_selection import cross_validate
    >>> from skfed.baselines import LocalEstimator
    >>> from skfed.datasets import make_federated_regression
    >>> from skfed.metrics import make_personalized_scorer
    >>> from skfed.model_selection import WithinClientKFold
    >>> X, y, groups = make_federated_regression(n_clients=4, random_state=0)
    >>> with sklearn.config_context(enable_metadata_routing=True):
    ...     cv = cross_validate(LocalEstimator(Ridge()), X, y, cv=WithinClientKFold(3),
    ...                         scoring=make_personalized_scorer("r2"),
    ...                         params={"groups": groups})
    >>> cv["test_score"].shape
    (3,)
    """
    if not isinstance(response_method, str) or response_method not in RESPONSE_METHODS:
        raise ValueError(
            f"response_method must be one of {RESPONSE_METHODS}, got {response_method!r}."
        )
    if not isinstance(greater_is_better, (bool, np.bool_)):
        raise ValueError(f"greater_is_better must be a bool, got {greater_is_better!r}.")
    if isinstance(metric, str):
        scorer = get_scorer(metric)
        try:
            score_func, sign, scorer_kwargs = scorer._score_func, scorer._sign, scorer._kwargs
            methods = _methods(scorer._response_method)
        except AttributeError:  # pragma: no cover - depends on scikit-learn internals
            raise ValueError(f"scorer {metric!r} cannot be personalized; pass its metric.")
        if response_method != "predict":
            own = methods if isinstance(methods, str) else " or ".join(methods)
            raise ValueError(
                f"response_method applies to a callable metric only; the scorer {metric!r} "
                f"uses its own ({own}). Pass its metric function to choose, got "
                f"response_method={response_method!r}."
            )
        if not greater_is_better:
            raise ValueError(
                f"greater_is_better applies to a callable metric only; the scorer {metric!r} "
                "is already signed so that greater is better, got greater_is_better=False."
            )
        return PersonalizedScorer(score_func, sign, {**scorer_kwargs, **kwargs}, methods)
    if not callable(metric):
        raise ValueError(f"metric must be a scorer name or a callable, got {metric!r}.")
    return PersonalizedScorer(metric, 1 if greater_is_better else -1, kwargs, response_method)


def _response_values(estimator, name, X, groups, pos_label):
    """``estimator.<name>(X, groups=groups)``, reduced as scikit-learn's scorers do.

    Mirrors ``sklearn.utils._response._get_response_values``: for a binary
    classifier, ``pos_label`` (default ``classes_[1]``) must be one of
    ``classes_``; ``predict_proba`` gives its column and ``decision_function``
    is negated when it is ``classes_[0]``. Multiclass output is unchanged.
    """
    method = getattr(estimator, name)
    if not is_classifier(estimator):
        return method(X) if groups is None else method(X, groups=groups)
    classes = estimator.classes_
    target_type = type_of_target(classes)
    if target_type == "binary":
        if pos_label is not None and pos_label not in classes.tolist():
            raise ValueError(
                f"pos_label={pos_label} is not a valid label: It should be one of {classes}"
            )
        elif pos_label is None:
            pos_label = classes[-1]
    y_pred = method(X) if groups is None else method(X, groups=groups)
    if name in ("predict_proba", "predict_log_proba"):
        if target_type == "binary" and y_pred.shape[1] < 2:
            raise ValueError(
                f"Got predict_proba of shape {y_pred.shape}, but need "
                "classifier with two classes."
            )
        if target_type == "binary":
            return y_pred[:, np.flatnonzero(classes == pos_label)[0]]
        if target_type == "multilabel-indicator":
            if isinstance(y_pred, list):
                return np.vstack([p[:, -1] for p in y_pred]).T
            return y_pred
    elif name == "decision_function":
        if target_type == "binary" and pos_label == classes[0]:
            return -1 * y_pred
    return y_pred


def _methods(response_method):
    """One method name, or a tuple of alternatives in order of preference.

    scikit-learn may list alternatives (``roc_auc``: decision_function, then
    predict_proba); the scorer uses the first the estimator has.
    """
    if isinstance(response_method, str):
        return response_method
    methods = tuple(str(m) for m in np.atleast_1d(response_method))
    return methods[0] if len(methods) == 1 else methods
