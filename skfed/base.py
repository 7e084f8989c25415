"""Behaviour shared by every skfed estimator."""

import functools
import inspect

import numpy as np
import sklearn
from sklearn.utils.validation import check_is_fitted

from .federated import fit_federated
from .utils._docstrings import fill_doc
from .utils._validation import (
    _names_argument, _refuse_missing_targets, check_params, map_clients, split_groups,
)

__all__ = ["FederatedEstimator", "FederatedEstimatorMixin", "checked_fit", "init_defaults",
           "keyword_init", "transactional_fit"]


def init_defaults(estimator_class):
    """The ``__init__`` parameters of an estimator class and their defaults, in order.

    Parameters
    ----------
    estimator_class : type
        A scikit-learn estimator class (its parameters are keyword or
        positional-or-keyword arguments with defaults).

    Returns
    -------
    defaults : dict
        Parameter name to default value.
    """
    params = inspect.signature(estimator_class.__init__).parameters.values()
    return {p.name: p.default for p in params
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def keyword_init(*defaults, positional=0, **more):
    """An estimator's ``__init__`` built from its parameters' defaults.

    For an estimator whose parameters are those of another one (or of a
    shared table) plus a few: the ``__init__`` takes every parameter by name
    and stores it unchanged under that name, as scikit-learn asks of an
    estimator. Its signature (``__signature__``) lists them all with their
    defaults, so ``get_params``, ``clone``, ``repr``, ``help()`` and Sphinx
    see them as if written out.

    Parameters
    ----------
    *defaults : mapping
        Parameter name to default value (e.g. :func:`init_defaults` of a
        parent class), merged in order.
    positional : int, default=0
        How many of the first parameters may also be passed by position;
        the others are keyword-only.
    **more
        Further parameters and their defaults; a name given before keeps
        its place and takes the new default.

    Returns
    -------
    __init__ : function
        Assign it in the class body: ``__init__ = keyword_init(...)``.

    Examples
    --------
    >>> from sklearn.base import BaseEstimator
    >>> from skfed.base import keyword_init
    >>> class Model(BaseEstimator):
    ...     __init__ = keyword_init({"alpha": 1.0}, n_iter=10)
    >>> Model(n_iter=5)
    Model(n_iter=5)
    """
    table = {}
    for mapping in defaults:
        table.update(mapping)
    table.update(more)
    names = list(table)

    def __init__(self, *args, **params):
        if len(args) > positional:
            raise TypeError(f"{type(self).__name__}.__init__() takes {positional} positional "
                            f"argument(s) but {len(args)} were given")
        for name, value in zip(names, args):
            if name in params:
                raise TypeError(f"{type(self).__name__}.__init__() got multiple values for "
                                f"argument {name!r}")
            params[name] = value
        unknown = sorted(set(params) - set(table))
        if unknown:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword "
                            f"argument {unknown[0]!r}")
        for name, default in table.items():
            setattr(self, name, params.get(name, default))

    Parameter = inspect.Parameter
    __init__.__signature__ = inspect.Signature(
        [Parameter("self", Parameter.POSITIONAL_OR_KEYWORD)]
        + [Parameter(name, Parameter.POSITIONAL_OR_KEYWORD if i < positional
                     else Parameter.KEYWORD_ONLY, default=table[name])
           for i, name in enumerate(names)])
    return __init__


def transactional_fit(fit):
    """Decorate ``fit`` so that a failed fit leaves the estimator as it was.

    The instance ``__dict__`` is snapshotted (shallowly) before ``fit`` runs
    and restored if it raises. That is enough because skfed's ``fit`` methods
    assign new attribute values instead of mutating old ones in place.
    """

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        snapshot = dict(self.__dict__)
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(snapshot)
            raise

    return wrapper


def checked_fit(fit):
    """Decorate ``fit``: the parameters checked once before it runs, a failed fit undone.

    :func:`skfed.utils.check_params` checks the parameters (scikit-learn's
    ``_parameter_constraints``, then the estimator's ``_check_params``)
    once; ``fit`` then runs with scikit-learn's parameter validation
    switched off (``sklearn.config_context(skip_parameter_validation=True)``),
    so that the scikit-learn functions it calls do not check theirs again,
    and under :func:`transactional_fit`. It does with public API what
    scikit-learn's private ``_fit_context(prefer_skip_nested_validation=True)``
    does. Not for a meta-estimator, whose inner estimator's parameters must
    still be checked when it is fitted.
    """

    @transactional_fit
    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        check_params(self)
        with sklearn.config_context(skip_parameter_validation=True):
            return fit(self, *args, **kwargs)

    return wrapper


def _check_score_target(y, n_rows):
    """Refuse a ``y`` for ``score`` by name: missing or non-finite values, complex
    values, or another number of rows than ``X`` (scikit-learn's metrics say
    "Input contains NaN." or "Found input variables with inconsistent numbers of
    samples: [17, 18]" without naming it). The metric then reads ``y`` as given.
    """
    from sklearn.utils.validation import check_array

    _refuse_missing_targets(y)
    try:
        y = check_array(y, ensure_2d=False, allow_nd=True, dtype=None, input_name="y")
    except (ValueError, TypeError) as exc:
        if _names_argument(str(exc)):
            raise
        raise type(exc)(f"y: {exc}") from exc
    if y.shape[0] != n_rows:
        raise ValueError(f"y has {y.shape[0]} rows but X has {n_rows}: score needs one target "
                         "per row of X.")


class FederatedEstimatorMixin:
    """Mixin for estimators fitted with ``fit(X, y, groups=client_labels)``.

    * ``groups`` is requested by default for ``fit``, ``predict`` and
      ``score``, so with ``sklearn.set_config(enable_metadata_routing=True)``
      one ``groups=`` argument reaches the CV splitter, ``fit`` (train rows)
      and ``score`` (test rows) inside ``Pipeline`` and ``GridSearchCV``
      without ``set_*_request`` calls. Users can still opt out with
      ``set_fit_request(groups=False)``.
    * ``predict(X, groups=None)`` gives the population (new-client)
      prediction; unseen labels follow the ``unknown_client`` parameter.
    * ``score(X, y, groups=None)`` is R^2 for regressors and accuracy for
      classifiers, computed on personalized predictions when groups are given.

    Put it before the scikit-learn mixins and ``BaseEstimator``:
    ``class MyRegressor(FederatedEstimatorMixin, RegressorMixin, BaseEstimator)``.
    """

    __metadata_request__fit = {"groups": True}
    __metadata_request__predict = {"groups": True}
    __metadata_request__score = {"groups": True}

    def _check_params(self):
        """Checks of several hyperparameters together, after the constraints (none here)."""

    def _client_index(self, groups, n_samples):
        """Map predict-time ``groups`` to indices into ``clients_`` (-1: population)."""
        return map_clients(
            groups,
            self.clients_,
            n_samples,
            unknown_client=getattr(self, "unknown_client", "global"),
        )

    def score(self, X, y, groups=None, sample_weight=None):
        """Score personalized predictions.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test rows.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            True targets (as many outputs as ``n_outputs_``, where the
            estimator records it); a tensor regressor's
            ``(n_samples, *output_shape_)`` too, each entry an output.
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` scores the population model.
        sample_weight : array-like of shape (n_samples,), default=None
            Sample weights.

        Returns
        -------
        score : float
            R^2 for a regressor (averaged uniformly over outputs), accuracy
            for a classifier.
        """
        check_is_fitted(self)
        n_outputs = getattr(self, "n_outputs_", None)
        Q = np.shape(y)[1] if np.ndim(y) == 2 else 1
        if n_outputs is not None and Q != n_outputs:
            raise ValueError(f"y has {Q} output(s) but the model was fitted with "
                             f"n_outputs_={n_outputs}.")
        # sklearn.metrics on first use: a Flower site's process, started for each message,
        # does not score
        from sklearn.metrics import accuracy_score, r2_score

        y_pred = self.predict(X, groups=groups)
        _check_score_target(y, len(y_pred))
        if _is_classifier(self):
            return accuracy_score(y, y_pred, sample_weight=sample_weight)
        if np.ndim(y_pred) > 2:  # a tensor response: each entry is an output
            if np.size(y) != np.size(y_pred):
                raise ValueError(f"y has shape {np.shape(y)}; the model predicts responses of "
                                 f"shape {np.shape(y_pred)[1:]} per row.")
            y = np.reshape(np.asarray(y, dtype=float), np.shape(y_pred)).reshape(len(y_pred), -1)
            y_pred = np.reshape(y_pred, (len(y_pred), -1))
        return r2_score(y, y_pred, sample_weight=sample_weight)


@fill_doc
class FederatedEstimator(FederatedEstimatorMixin):
    """Base class of the estimators trained by federated rounds; it owns ``fit``.

    ``fit(X, y, groups)`` validates the hyperparameters once (scikit-learn's
    ``_parameter_constraints``, then :meth:`_check_params`), validates the
    rows (:meth:`_validate_site_data`), runs the set-up exchange and the
    rounds (:func:`skfed.federated.fit_federated`, which builds the algorithm
    once) and sets the fitted attributes (:meth:`_set_fitted`). A failed fit
    leaves the estimator as it was.

    A subclass provides the hooks of :class:`skfed.federated.FederatedContract`;
    the same hooks run it on Flower (:mod:`skfed.federated.flower`). The
    defaults here: no extra set-up entries, and the engine options read from
    the usual parameters. Put it first, scikit-learn's mixins next and
    ``BaseEstimator`` last:
    ``class MyRegressor(FederatedEstimator, RegressorMixin, BaseEstimator)``.
    See :doc:`/extending` ("Write your own federated estimator").
    """

    #: Fewest rows a client may hold.
    _min_client_rows = 1

    # scikit-learn's constraints, checked by ``fit`` before anything else
    _parameter_constraints: dict = {}

    @checked_fit
    def fit(self, X, y, groups=None):
        """Train by federated rounds, one client per distinct label of ``groups``.

        Parameters
        ----------
        %(X_fit)s
        %(y_fit_multi)s
        %(groups_fit)s

        Returns
        -------
        self : object
            The fitted estimator.
        """
        # the parameters were checked once (checked_fit); groups are split once, and site
        # validation and the federation take the split as it is
        groups = split_groups(groups, X)
        X, y = self._validate_site_data(X, y, reset=True, groups=groups)
        self._set_fitted(self._run_federation(X, y, groups))
        return self

    def _run_federation(self, X, y, groups):
        """The federated fit of validated rows (in-process)."""
        return fit_federated(self, X, y, groups, min_samples=self._min_client_rows)

    # -- the hooks of skfed.federated.FederatedContract (_check_params: the mixin's) ---

    def _validate_site_data(self, X, y, reset=False, groups=None):
        """The checks a site runs on its own rows; returns ``(X, y)``.

        In-process ``fit`` passes the pooled rows with their client labels
        ``groups``, so that checks per client (and their warnings) name the
        clients; a site of a distributed run passes its own rows alone.
        ``groups`` is split once by ``fit``: :func:`skfed.utils.check_groups`
        returns that split (labels, each row's client index) without splitting again.
        """
        raise NotImplementedError

    def _site_summary(self, X, y):
        """Extra entries of a site's set-up message (none by default)."""
        return {}

    def _combine_site_summaries(self, labels, summaries):
        """Extra entries of the set-up summary (none by default)."""
        return {}

    def _federated_algorithm(self, setup):
        """The client and server steps, from the parameters and ``setup`` only."""
        raise NotImplementedError

    def _privacy_claim(self):
        """What a full fit guarantees each site, from the parameters only; None: no noise.

        A private estimator returns ``{"epsilon", "delta", "noise_multiplier"}``:
        the total ``(epsilon, delta)`` its ``privacy_spent_`` reports when every
        round runs, and the smallest noise standard deviation over L2
        sensitivity among a site's releases. A site of a distributed run
        checks it against its own limits before it sends anything, and a
        private fit's client steps draw from the site's secret entropy
        (:mod:`skfed.federated.flower`).
        """
        return None

    def _engine_params(self):
        """The engine's options, from the usual parameters (one round without ``n_rounds``)."""
        rounds = getattr(self, "n_rounds", 1)  # "auto": resolved by the estimator
        return dict(n_rounds=rounds if isinstance(rounds, str) else int(rounds),
                    client_fraction=getattr(self, "client_fraction", 1.0),
                    on_client_error=getattr(self, "on_client_error", "raise"),
                    random_state=getattr(self, "random_state", None),
                    n_jobs=getattr(self, "n_jobs", None), verbose=getattr(self, "verbose", 0))

    def _set_fitted(self, fit):
        """Fitted attributes from a :class:`skfed.federated.FederatedFit`."""
        raise NotImplementedError


def _is_classifier(est):
    try:
        return est.__sklearn_tags__().estimator_type == "classifier"
    except AttributeError:  # pragma: no cover - only without sklearn tags
        return False


def scatter_rows(n_samples, client_index, fn, fallback, out_shape=(), dtype=float):
    """Evaluate ``fn(k, rows)`` on each client's rows, ``fallback(rows)`` on index -1.

    A helper for ``predict``: rows are grouped by client so that each client
    model is called once.
    """
    out = None
    for k in np.unique(client_index):
        rows = np.flatnonzero(client_index == k)
        values = np.asarray(fallback(rows) if k < 0 else fn(k, rows))
        if out is None:
            out = np.empty((n_samples, *values.shape[1:]), dtype=values.dtype)
        out[rows] = values
    if out is None:
        out = np.empty((0, *out_shape), dtype=dtype)
    return out


def check_on_site(client_index, clients, on_site):
    """Refuse rows of seen clients whose personalized parts stayed on their sites.

    After a fit on a distributed engine the coordinator holds only the shared
    parts; a personalized prediction for a client runs on that client's site
    (``skfed.federated.flower.site_model``).

    Parameters
    ----------
    client_index : ndarray of int
        Each row's client index (``-1`` for unseen clients and ``groups=None``).
    clients : ndarray
        The fitted client labels.
    on_site : bool
        Whether the personalized parts stayed on the sites.
    """
    seen = client_index[client_index >= 0]
    if on_site and seen.size:
        label = clients.tolist()[seen[0]]
        raise ValueError(
            f"client {label!r} was fitted on a distributed engine: its personalized model "
            "lives on its site (skfed.federated.flower.site_model). Predict there, or pass "
            "groups=None for the shared model."
        )
