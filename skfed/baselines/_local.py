"""Local-only and pooled baselines that wrap any scikit-learn estimator."""

import copy
import inspect
import warnings

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.utils import get_tags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    has_fit_parameter,
)

from ..base import FederatedEstimatorMixin, scatter_rows, transactional_fit
from ..federated import FederatedAlgorithm, Federation, run_federation
from ..utils._docstrings import fill_doc
from ..utils._validation import (
    check_estimator_param, check_groups, check_unknown_client, map_clients, validate_data,
    user_stacklevel,
)

__all__ = ["LocalEstimator", "PooledEstimator"]


def _inner_has(method):
    """``available_if`` check: the wrapped estimator provides ``method``."""

    def check(self):
        if hasattr(self, "estimator_"):
            return hasattr(self.estimator_, method)
        if hasattr(self, "estimators_"):
            return hasattr(next(m for m in self.estimators_ if m is not None), method)
        return hasattr(self.estimator, method)

    return check


def _accepts(method, name):
    """``method`` takes the keyword ``name``, by name or through ``**params``.

    A ``Pipeline``'s ``predict(X, **params)`` passes its params on to the last
    step's ``predict`` (with metadata routing off; with it on, to the steps
    that request them), so ``**params`` counts as accepting.
    """
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without signature
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class _BaseWrapper(FederatedEstimatorMixin, MetaEstimatorMixin, BaseEstimator):
    """Validation, tags and forwarding shared by the wrapping baselines."""

    def __init__(self, estimator):
        self.estimator = estimator

    @classmethod
    def _test_instances(cls):
        """Instances for the common checks: around a regressor and a classifier."""
        from sklearn.linear_model import LogisticRegression, Ridge

        return [cls(Ridge()), cls(LogisticRegression())]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        inner = get_tags(self.estimator)
        tags.estimator_type = inner.estimator_type
        tags.classifier_tags = copy.deepcopy(inner.classifier_tags)
        tags.regressor_tags = copy.deepcopy(inner.regressor_tags)
        tags.target_tags = copy.deepcopy(inner.target_tags)
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags

    @property
    def _wraps_classifier(self):
        return get_tags(self.estimator).estimator_type == "classifier"

    def _check_params(self):
        """The wrapped estimator's checks; its own parameters are checked when it is fitted."""
        check_estimator_param(self.estimator, "estimator", methods=("fit", "predict"))

    def _validate_fit(self, X, y, groups, sample_weight):
        """The parameters (:meth:`_check_params`), then the rows."""
        self._check_params()
        multi_output = get_tags(self.estimator).target_tags.multi_output
        X, y = validate_data(
            self,
            X,
            y,
            reset=True,
            multi_output=bool(multi_output) and not self._wraps_classifier,
            y_numeric=not self._wraps_classifier,
        )
        if self._wraps_classifier:
            check_classification_targets(y)
        if sample_weight is not None:
            if not has_fit_parameter(self.estimator, "sample_weight"):
                raise ValueError(
                    f"sample_weight was passed but {type(self.estimator).__name__}.fit "
                    "does not accept sample_weight (estimator)."
                )
            sample_weight = _check_sample_weight(sample_weight, X)
        return X, y, sample_weight

    def _set_classes(self, classes):
        """Set ``classes_``, or (``None``: a regressor) remove one left by an earlier fit.

        Called by ``fit`` when it sets the fitted attributes; a failed fit
        restores the previous ones (:func:`skfed.base.transactional_fit`).
        """
        if classes is None:
            self.__dict__.pop("classes_", None)
        else:
            self.classes_ = classes

    def _predict_kwargs(self, model, return_std):
        if not return_std:
            return {}
        if not _accepts(model.predict, "return_std"):
            raise ValueError(
                f"return_std=True but {type(model).__name__}.predict has no return_std."
            )
        return {"return_std": True}


MIN_LOCAL_SAMPLES = 2


class _Fallback:
    """Client state of a client without a model of its own (it uses the population model)."""

    def __init__(self, reason, error=None):
        self.reason = reason
        self.error = error


class _LocalFit(FederatedAlgorithm):
    """One round: each client fits its own clone; only its row count is sent
    (and, with ``sample_weight``, its total sample weight).

    A client with fewer than ``MIN_LOCAL_SAMPLES`` rows, a classifier's
    client holding a single class (rows of ``sample_weight`` 0 not counted,
    as if dropped), or a client on whose rows the wrapped
    ``fit`` raises a ``ValueError`` keeps a :class:`_Fallback` instead of a
    model (it still sends its row count: the message does not tell).
    """

    def __init__(self, estimator, classifier=False):
        self.estimator = estimator
        self.classifier = classifier

    def client_step(self, data, state, broadcast, rng):
        message = {"n_samples": np.int64(data.n_samples)}
        if data.sample_weight is not None:  # the client's weight in the population model
            message["sample_weight_sum"] = np.float64(data.sample_weight.sum())
        # a row of weight 0 is a row dropped (as the population weights treat it), so it
        # counts neither toward the minimum nor as a class the client holds
        y = data.y if data.sample_weight is None else data.y[data.sample_weight != 0]
        weighted = "" if data.sample_weight is None else " of non-zero sample_weight"
        if y.size < MIN_LOCAL_SAMPLES:
            reason = (f"{y.size} sample(s){weighted}, fewer than the {MIN_LOCAL_SAMPLES} rows "
                      "a local model needs")
            return _Fallback(reason), message
        if self.classifier:
            present = np.unique(y)
            if present.size < 2:
                return _Fallback(f"a single class ({present.tolist()[0]!r}) in its rows"
                                 f"{weighted}"), message
        model = clone(self.estimator)
        fit_params = {} if data.sample_weight is None else {"sample_weight": data.sample_weight}
        try:
            model.fit(data.X, data.y, **fit_params)
        except ValueError as exc:  # the wrapped estimator refuses this client's rows
            # (named as PooledEstimator does: the weights may be what it refused, e.g. negative
            # ones, which only some estimators accept)
            weights = "" if data.sample_weight is None else " (with sample_weight)"
            reason = f"{type(self.estimator).__name__}.fit raised ValueError{weights}: {exc}"
            return _Fallback(reason, exc), message
        return model, message

    def server_step(self, state, messages, rng):
        return {k: float(m["sample_weight_sum"]) if "sample_weight_sum" in m
                else int(m["n_samples"]) for k, m in messages.items()}, {}


@fill_doc
class LocalEstimator(_BaseWrapper):
    """One clone of an estimator per client, each trained only on its own rows.

    The local-only baseline of personalized federated learning: no
    information is shared between clients. ``predict(X, groups)`` routes each
    row to its client's model. Rows with ``groups=None`` or a client not seen
    in ``fit`` (with ``unknown_client="global"``) get the *population
    prediction*: the mixture of the client models weighted by their number of
    training rows (by their total sample weight when ``fit`` is given
    ``sample_weight``). For a regressor that is the weighted mean of the client
    predictions (with ``return_std=True``, the standard deviation of the
    mixture of the clients' predictive distributions); for a classifier, the
    weighted mean of ``predict_proba`` (a weighted vote if the estimator has
    no ``predict_proba``). With one client it is that client's model.

    That rule was measured against its alternatives for a classifier
    (``benchmarks/defaults/local_population_rule.py``): the weighted mean
    of log-probabilities (for a logistic model, of the log-odds) and equal
    client weights predicted new sites no better, by macro-F1 on 9 grouped
    data sets (up to 0.035 worse). With clients of a few rows, each local model sits near its
    client's class shares, and so does any pool of them: new sites then get
    mostly the majority class (macro-F1 0.473 against ``PooledEstimator``'s
    0.648 with 4 to 10 rows a client). That is the local-only baseline's
    weakness, which it is there to show.

    A client cannot always fit a model of its own. A client **falls back**
    to the population model (of the other clients) when it holds fewer than
    2 rows, when the estimator is a classifier and the client's rows hold a
    single class (in both, rows of ``sample_weight`` 0 count as dropped), or
    when the wrapped estimator's ``fit`` raises a ``ValueError`` on its rows
    (e.g. ``RidgeCV(cv=5)`` on fewer than 5 rows). ``fit`` then warns, lists
    those clients in ``fallback_clients_``, and ``predict``, ``predict_proba``
    and ``decision_function`` give their rows the population prediction. If
    every client falls back, ``fit`` raises a ``ValueError``. Other errors of
    the wrapped ``fit`` are raised.

    Training runs as one round of the :mod:`skfed.federated` protocol: each
    client fits locally and sends only its row count (and, with
    ``sample_weight``, the sum of its rows' weights).

    Parameters
    ----------
    estimator : estimator object
        A scikit-learn estimator; it is cloned once per client.
    %(unknown_client_population)s
    n_jobs : int or None, default=None
        Clients fitted in parallel on joblib threads. The fitted models do not
        depend on it; whether the wrapped estimator's own results do is its
        own matter (a ``RandomForestRegressor`` with ``n_jobs=None`` predicts
        on every core inside a joblib ``parallel_backend("threading")``
        context and sums its trees in the order the threads finish, so its
        predictions can change in the last bit from call to call there).

    Attributes
    ----------
    estimators_ : list of estimator or None
        The fitted clone of each client, in the order of ``clients_``;
        ``None`` for a client that fell back to the population model.
    %(clients_)s
    client_weights_ : ndarray of shape (n_clients,)
        Weight of each client's model in the population prediction: its
        share of the training rows of the clients with a model of their own
        (0 for the clients in ``fallback_clients_``). With ``sample_weight``,
        its share of their total sample weight instead, as duplicating rows
        would give: a row of weight 2 counts as two rows, a row of weight 0
        as none.
    fallback_clients_ : ndarray of shape (n_fallback,)
        Clients without a model of their own (see above); their rows get the
        population prediction.
    classes_ : ndarray of shape (n_classes,)
        Class labels (classifiers only).
    %(communication_)s
    %(features_in_)s

    Examples
    --------
    >>> from sklearn.linear_model import Ridge
    >>> from skfed.baselines import LocalEstimator
    >>> from skfed.datasets import make_federated_regression
    >>> X, y, groups = make_federated_regression(n_clients=3, random_state=0)
    >>> model = LocalEstimator(Ridge()).fit(X, y, groups=groups)
    >>> model.clients_.tolist()
    [0, 1, 2]
    >>> model.predict(X[:2], groups=groups[:2]).shape
    (2,)
    """

    def __init__(self, estimator, *, unknown_client="global", n_jobs=None):
        self.estimator = estimator
        self.unknown_client = unknown_client
        self.n_jobs = n_jobs

    def _check_params(self):
        super()._check_params()
        check_unknown_client(self.unknown_client)

    @transactional_fit
    def fit(self, X, y, groups=None, sample_weight=None):
        """Fit one clone of ``estimator`` per client.

        %(wrapper_fit)s
        """
        X, y, sample_weight = self._validate_fit(X, y, groups, sample_weight)
        federation = Federation.from_arrays(X, y, groups, sample_weight)
        result = run_federation(
            _LocalFit(self.estimator, classifier=self._wraps_classifier),
            federation, n_rounds=1, n_jobs=self.n_jobs,
        )
        labels = federation.labels
        states = result.client_states
        fallback = np.array([isinstance(m, _Fallback) for m in states], dtype=bool)
        reasons = [f"client {label!r}: {m.reason}"
                   for label, m in zip(labels.tolist(), states) if isinstance(m, _Fallback)]
        if fallback.all():
            errors = [m.error for m in states if m.error is not None]
            raise ValueError(
                "no client could fit a model of its own (a client: the rows of X and y with "
                "one label in groups), so there is no population model to fall back on: "
                f"{'; '.join(reasons[:5])}"
                + (" ..." if len(reasons) > 5 else "")
            ) from (errors[0] if errors else None)
        if fallback.any():
            warnings.warn(
                f"{fallback.sum()} of {fallback.size} clients use the population model "
                f"instead of a model of their own (fallback_clients_): "
                f"{'; '.join(reasons[:5])}" + (" ..." if len(reasons) > 5 else ""),
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        if sample_weight is None:
            sizes = np.where(fallback, 0, federation.n_samples)
        else:  # each client's total weight, from its message
            totals = np.array([result.server_state[k] for k in range(len(labels))])
            sizes = np.where(fallback, 0.0, totals)
            if (sizes < 0).any() or not sizes.sum() > 0:
                bad = [lab for lab, t in zip(labels.tolist(), sizes) if t < 0]
                raise ValueError(
                    "sample_weight must give the clients with a model of their own a "
                    "non-negative total weight, with a positive sum (their shares weight the "
                    f"population model); got totals {sizes.tolist()}"
                    + (f" (negative for clients {bad[:10]})." if bad else ".")
                )
        self.estimators_ = [None if f else m for f, m in zip(fallback, states)]
        self.clients_ = labels
        self.client_weights_ = sizes / sizes.sum()
        self.fallback_clients_ = labels[fallback]
        self._set_classes(np.unique(y) if self._wraps_classifier else None)
        self.communication_ = result.ledger
        return self

    def _fitted_models(self):
        """``(weight, model)`` of the clients with a model of their own."""
        return [(w, m) for w, m in zip(self.client_weights_, self.estimators_) if m is not None]

    def _validate_predict(self, X, groups):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        index = self._client_index(groups, X.shape[0])
        fallback = np.array([m is None for m in self.estimators_] + [False])
        return X, np.where(fallback[index], -1, index)  # index -1 reads the False

    def predict(self, X, groups=None, return_std=False):
        """Predict with each row's client model (population model for others).

        Parameters
        ----------
        %(X_predict)s
        %(groups_population)s
        %(return_std)s

        Returns
        -------
        %(y_pred_std)s
        """
        X, index = self._validate_predict(X, groups)
        # the fitted models decide, not the estimator parameter (set_params after fit, or a
        # failed refit that left this fit in place, may have changed it)
        if hasattr(self, "classes_"):
            if return_std:
                raise ValueError("return_std is only defined for regressors.")
            return scatter_rows(
                X.shape[0],
                index,
                lambda k, rows: self.estimators_[k].predict(X[rows]),
                lambda rows: self._population_class(X[rows]),
                dtype=self.classes_.dtype,
            )
        kwargs = self._predict_kwargs(self._fitted_models()[0][1], return_std)
        if not return_std:
            return scatter_rows(
                X.shape[0],
                index,
                lambda k, rows: self.estimators_[k].predict(X[rows]),
                lambda rows: self._population_mean_std(X[rows], False)[0],
            )
        # stack mean and std along a new last axis so one scatter handles both
        both = scatter_rows(
            X.shape[0],
            index,
            lambda k, rows: np.stack(self.estimators_[k].predict(X[rows], **kwargs), -1),
            lambda rows: np.stack(self._population_mean_std(X[rows], True), -1),
        )
        return both[..., 0], both[..., 1]

    def _population_mean_std(self, X, return_std):
        pairs = self._fitted_models()
        if len(pairs) == 1:
            model = pairs[0][1]
            out = model.predict(X, **self._predict_kwargs(model, return_std))
            return out if return_std else (out, None)
        w, models = zip(*pairs)
        if not return_std:
            mean = sum(wk * m.predict(X) for wk, m in pairs)
            return mean, None
        means, stds = zip(*(m.predict(X, return_std=True) for m in models))
        mean = sum(wk * mu for wk, mu in zip(w, means))
        second = sum(wk * (sd**2 + mu**2) for wk, mu, sd in zip(w, means, stds))
        return mean, np.sqrt(np.maximum(second - mean**2, 0.0))

    def _aligned_proba(self, model, X):
        """``model.predict_proba`` with columns aligned on ``self.classes_``."""
        proba = model.predict_proba(X)
        if np.array_equal(model.classes_, self.classes_):
            return proba
        out = np.zeros((X.shape[0], len(self.classes_)))
        out[:, np.searchsorted(self.classes_, model.classes_)] = proba
        return out

    def _population_class(self, X):
        pairs = self._fitted_models()
        if len(pairs) == 1:
            return pairs[0][1].predict(X)
        if hasattr(pairs[0][1], "predict_proba"):
            return self.classes_[np.argmax(self._population_proba(X), axis=1)]
        votes = np.zeros((X.shape[0], len(self.classes_)))
        for wk, m in pairs:
            votes[np.arange(X.shape[0]), np.searchsorted(self.classes_, m.predict(X))] += wk
        return self.classes_[np.argmax(votes, axis=1)]

    def _population_proba(self, X):
        return sum(wk * self._aligned_proba(m, X) for wk, m in self._fitted_models())

    @available_if(_inner_has("predict_proba"))
    def predict_proba(self, X, groups=None):
        """Class probabilities from each row's client model.

        Columns follow ``classes_``; a client that never saw a class gives it
        probability 0. Population rows (and rows of ``fallback_clients_``)
        get the weighted mean over the clients' models.

        Parameters
        ----------
        %(rows_by_client)s

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        X, index = self._validate_predict(X, groups)
        return scatter_rows(
            X.shape[0],
            index,
            lambda k, rows: self._aligned_proba(self.estimators_[k], X[rows]),
            lambda rows: self._population_proba(X[rows]),
            out_shape=(len(self.classes_),),
        )

    @available_if(_inner_has("decision_function"))
    def decision_function(self, X, groups=None):
        """Decision function of each row's client model.

        Defined when every client with a model of its own saw every class
        (otherwise the clients' scores are not comparable and a
        ``ValueError`` is raised). Rows of a seen client get its model's
        scores. Population rows (``groups=None``, unseen clients and rows of
        ``fallback_clients_``) get the scores of the population model that
        ``predict`` uses, so that the sign (binary) or the argmax
        (multiclass) gives ``predict``: with ``predict_proba``, the scores of
        the mixture of the clients' probabilities ``p`` (``predict_proba``),
        ``log(p[:, 1]) - log(p[:, 0])`` for two classes and ``log(p)`` for
        more (as ``LogisticRegression``'s scores, up to a constant per row),
        with ``p`` first clipped below at ``np.finfo(float).tiny`` (about
        2.2e-308) so that a probability of 0 gives a score of about -708
        instead of ``-inf``. With one client model, its own scores. Without
        ``predict_proba`` (``predict`` is then a weighted vote), the weighted
        mean of the clients' scores, whose sign or argmax may differ from
        the vote.

        Parameters
        ----------
        %(rows_by_client)s

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        X, index = self._validate_predict(X, groups)
        partial = [
            self.clients_[k]
            for k, m in enumerate(self.estimators_)
            if m is not None and not np.array_equal(m.classes_, self.classes_)
        ]
        if partial:
            raise ValueError(
                f"decision_function is undefined: clients {partial[:10]} did not see "
                "every class; use predict_proba."
            )
        return scatter_rows(
            X.shape[0],
            index,
            lambda k, rows: self.estimators_[k].decision_function(X[rows]),
            lambda rows: self._population_decision(X[rows]),
        )

    def _population_decision(self, X):
        """The scores of the population model of :meth:`_population_class`."""
        pairs = self._fitted_models()
        if len(pairs) == 1 or not hasattr(pairs[0][1], "predict_proba"):
            return sum(wk * m.decision_function(X) for wk, m in pairs)
        log_proba = np.log(np.maximum(self._population_proba(X), np.finfo(float).tiny))
        if len(self.classes_) == 2:
            return log_proba[:, 1] - log_proba[:, 0]
        return log_proba


def _pooled_method(name, summary, returns):
    """``PooledEstimator.<name>``: the fitted estimator's method of that name on the
    checked rows (defined when the wrapped estimator has it)."""

    def method(self, X, groups=None):
        X = self._validate_predict(X, groups)
        return getattr(self.estimator_, name)(X)

    method.__name__, method.__qualname__ = name, f"PooledEstimator.{name}"
    method.__doc__ = f"""{summary}

        Parameters
        ----------
        %(rows_pooled)s

        Returns
        -------
        {returns}
        """
    return available_if(_inner_has(name))(method)


@fill_doc
class PooledEstimator(_BaseWrapper):
    """The centralized reference: one estimator fitted on all clients' rows.

    What one could do if the raw records could be pooled: it ignores client
    boundaries and is *not* federated (no privacy; nothing goes through
    :mod:`skfed.federated`). ``groups`` is accepted (and checked) so the
    estimator drops into the same ``Pipeline``/``GridSearchCV`` code as the
    federated estimators, but it does not change the predictions.

    Parameters
    ----------
    estimator : estimator object
        A scikit-learn estimator; it is cloned and fitted on the pooled rows.

    Attributes
    ----------
    estimator_ : estimator
        The fitted clone.
    %(clients_)s
    classes_ : ndarray of shape (n_classes,)
        Class labels (classifiers only).
    %(features_in_)s

    Examples
    --------
    A classifier on the pooled rows of three clients; ``groups`` is recorded
    but does not change the model:

    >>> from sklearn.linear_model import LogisticRegression
    >>> from skfed.baselines import PooledEstimator
    >>> from skfed.datasets import make_federated_regression
    >>> X, y, groups = make_federated_regression(n_clients=3, random_state=0)
    >>> model = PooledEstimator(LogisticRegression()).fit(X, y > 0, groups=groups)
    >>> model.clients_.tolist(), model.classes_.tolist()
    ([0, 1, 2], [False, True])
    >>> bool((model.predict(X, groups=groups) == model.predict(X)).all())
    True
    """

    @transactional_fit
    def fit(self, X, y, groups=None, sample_weight=None):
        """Fit the estimator on the rows of all clients together (``groups`` is recorded).

        %(wrapper_fit)s
        """
        X, y, sample_weight = self._validate_fit(X, y, groups, sample_weight)
        clients, _ = check_groups(groups, X.shape[0])
        fit_params = {} if sample_weight is None else {"sample_weight": sample_weight}
        try:
            self.estimator_ = clone(self.estimator).fit(X, y, **fit_params)
        except ValueError as exc:  # say which inputs the wrapped estimator refused
            weights = "" if sample_weight is None else " (with sample_weight)"
            raise ValueError(
                f"{type(self.estimator).__name__}.fit refused the pooled X and y{weights}: {exc}"
            ) from exc
        self.clients_ = clients
        self._set_classes(self.estimator_.classes_ if self._wraps_classifier else None)
        return self

    def _validate_predict(self, X, groups):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        if groups is not None:  # checked for length only: the model is shared
            map_clients(groups, self.clients_, X.shape[0], "global")
        return X

    def predict(self, X, groups=None, return_std=False, **predict_params):
        """Predict with the pooled model (``groups`` does not change it).

        Parameters
        ----------
        %(X_predict)s
        %(groups_ignored)s
        %(return_std)s
        **predict_params : dict
            Passed on to the wrapped estimator's ``predict`` (e.g.
            ``return_cov=True`` of a Gaussian process).

        Returns
        -------
        %(y_pred_std)s
        """
        X = self._validate_predict(X, groups)
        kwargs = {**self._predict_kwargs(self.estimator_, return_std), **predict_params}
        return self.estimator_.predict(X, **kwargs)

    predict_proba = _pooled_method(
        "predict_proba", "Class probabilities of the pooled model.",
        "proba : ndarray of shape (n_samples, n_classes)")
    decision_function = _pooled_method(
        "decision_function", "Decision function of the pooled model.",
        "scores : ndarray of shape (n_samples,) or (n_samples, n_classes)")
