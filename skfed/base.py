"""Behaviour shared by every skfed estimator."""

import functools

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils.validation import check_is_fitted

from .federated import fit_federated
from .utils._validation import check_params, map_clients, split_groups

__all__ = ["FederatedEstimator", "FederatedEstimatorMixin", "transactional_fit"]


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
            estimator records it).
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
        if _is_classifier(self):
            return accuracy_score(y, y_pred, sample_weight=sample_weight)
        return r2_score(y, y_pred, sample_weight=sample_weight)


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

    @transactional_fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, groups=None):
        """Train by federated rounds, one client per distinct label of ``groups``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows of all clients.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets.
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` means a single client.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        check_params(self)  # the constraints were checked by _fit_context, once
        # split once: site validation and the federation take the split as it is
        groups = split_groups(groups)
        X, y = self._validate_site_data(X, y, reset=True, groups=groups)
        self._set_fitted(self._run_federation(X, y, groups))
        return self

    def _run_federation(self, X, y, groups):
        """The federated fit of validated rows (in-process)."""
        return fit_federated(self, X, y, groups, min_samples=self._min_client_rows)

    # -- the hooks of skfed.federated.FederatedContract --------------------------

    def _check_params(self):
        """Checks of several hyperparameters together (after the constraints)."""

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
