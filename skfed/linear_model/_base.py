"""Shared pieces of the federated linear classifiers: privacy plans, prediction."""

import functools
import math
import numbers
from types import SimpleNamespace

import dp_accounting
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ..base import FederatedEstimatorMixin, transactional_fit
from ..federated import ClientData, fit_federated
from ..privacy import (
    calibrate_noise_multiplier,
    check_epsilon,
    check_privacy_budget,
    dpfeddro_epsilon,
    dpfeddro_per_round_epsilon,
    epsilon_spent,
    gaussian_event,
    split_round_budget,
)
from ..utils._validation import (
    check_positive_int, check_scale, check_unknown_client, map_clients, validate_data,
)

PRIVACY_ACCOUNTANTS = ("paper", "rdp", "pld")
NORM_RTOL = 1e-9  # rows scaled to norm L in floating point may exceed L by a few ulps


def check_real(value, name, low=None, low_open=False):
    """Return ``value`` as float if finite (and ``>= low`` / ``> low``), else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}.")
    return float(value)


def classical_multiplier(epsilon, delta):
    """Noise multiplier ``sqrt(2 ln(1.25/delta)) / epsilon`` of the classical calibration."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def privacy_spent(n_rounds, epsilons, delta, delta_bar, accountant):
    """Total epsilon of ``n_rounds`` rounds of classical Gaussian releases.

    ``epsilons`` holds the per-round budget of each release in a round (zeros
    are skipped). ``"paper"`` is the closed-form moments-accountant bound;
    ``"rdp"``/``"pld"`` run dp-accounting on the same noise multipliers.
    """
    epsilons = [e for e in epsilons if e > 0]
    if accountant == "paper":
        e = list(epsilons) + [0.0]
        return dpfeddro_epsilon(n_rounds, e[0], math.sqrt(sum(x * x for x in e[1:])), delta,
                                delta_bar)
    return epsilon_spent(_rounds_event(n_rounds, epsilons, delta), delta_bar, accountant)


def _rounds_event(n_rounds, epsilons, delta):
    """dp-accounting event of ``n_rounds`` rounds of the classical releases ``epsilons``."""
    events = [gaussian_event(classical_multiplier(e, delta), n_rounds) for e in epsilons]
    return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)


def privacy_plan(est, split):
    """Per-round ``(epsilons, delta, delta_bar)`` of an estimator, or None without privacy.

    ``split`` is the share of ``epsilon^2`` of the first release (None: one
    release per round). Reads ``epsilon``, ``delta``, ``target_epsilon``,
    ``target_delta``, ``accountant`` and ``n_rounds`` from ``est``. Results
    are cached: calibrating a total budget with the PLD accountant takes
    about a second, and a fit needs the plan more than once.
    """
    key = (est.epsilon, est.delta, est.target_epsilon, est.target_delta, est.accountant,
           est.n_rounds, split)
    try:
        return _cached_plan(*key)
    except TypeError:  # unhashable parameters: validate and compute without the cache
        return _privacy_plan(SimpleNamespace(**dict(zip(_PLAN_KEYS, key))), split)


_PLAN_KEYS = ("epsilon", "delta", "target_epsilon", "target_delta", "accountant", "n_rounds")


@functools.lru_cache(maxsize=32)
def _cached_plan(epsilon, delta, target_epsilon, target_delta, accountant, n_rounds, split):
    values = (epsilon, delta, target_epsilon, target_delta, accountant, n_rounds)
    return _privacy_plan(SimpleNamespace(**dict(zip(_PLAN_KEYS, values))), split)


def _privacy_plan(est, split):
    if est.accountant not in PRIVACY_ACCOUNTANTS:
        raise ValueError(
            f"accountant must be one of {PRIVACY_ACCOUNTANTS}, got {est.accountant!r}."
        )

    def split_eps(eps):
        return split_round_budget(eps, split) if split is not None else (eps,)

    if est.target_epsilon is not None:
        if est.target_delta is None:
            raise ValueError("target_delta must be given with target_epsilon.")
        target, delta = check_privacy_budget(
            est.target_epsilon, est.target_delta, allow_none=False,
            eps_name="target_epsilon", delta_name="target_delta",
        )
        if est.accountant == "paper":
            eps = dpfeddro_per_round_epsilon(target, est.n_rounds, delta)
        else:
            # Calibrate the round's noise multiplier z = sqrt(2 ln(1.25/delta)) / eps
            # (the releases' multipliers are fixed multiples of it) by the one
            # bracketed search of skfed.privacy, on the very events privacy_spent
            # composes, so the spent epsilon is <= target.
            scale = classical_multiplier(1.0, delta)
            try:
                z = calibrate_noise_multiplier(
                    target, delta, est.n_rounds, accountant=est.accountant,
                    make_event=lambda z: _rounds_event(est.n_rounds, split_eps(scale / z),
                                                       delta),
                )
            except ValueError as exc:
                raise ValueError(
                    f"target_epsilon={target} cannot be calibrated in {est.n_rounds} rounds "
                    f"with accountant={est.accountant!r}: {exc}"
                ) from exc
            eps = scale / z
        return split_eps(eps), delta, delta
    # one "no noise" rule for every private estimator: None, or its alias inf
    if check_epsilon(est.epsilon) is None:
        return None
    eps, delta = check_privacy_budget(est.epsilon, est.delta, allow_none=False)
    return split_eps(eps), delta, delta


def _label_array(labels, name):
    """Class labels as an array that may cross in a message (numbers or text)."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "biufU":
        return labels
    if all(isinstance(v, str) for v in labels.ravel()):
        return labels.astype(str)
    raise ValueError(
        f"{name}: class labels must be numbers or strings to be federated, got "
        f"{sorted({type(v).__name__ for v in labels.ravel()})}."
    )


class LinearClientMixin:
    """``prepare_client`` of the linear algorithms: encode labels, add the intercept.

    ``classes`` and ``intercept_scaling`` are set by the estimator from the
    set-up summary; the rewrite happens on the site.
    """

    classes = None
    intercept_scaling = None
    #: set from the set-up summary when the estimator standardizes (non-private only)
    feature_mean = None
    feature_scale = None

    def prepare_client(self, data):
        if self.classes is None:  # built by hand on encoded rows (no set-up exchange)
            return data
        y = _label_array(data.y, "y")
        codes = np.searchsorted(self.classes, y)
        codes = np.minimum(codes, self.classes.size - 1)
        if not np.array_equal(self.classes[codes], y):
            raise ValueError(f"client {data.label!r} holds class labels outside classes_.")
        X = data.X
        if self.feature_mean is not None:
            X = (X - self.feature_mean) / self.feature_scale
        if self.intercept_scaling is not None:
            X = np.hstack([X, np.full((X.shape[0], 1), self.intercept_scaling)])
        return ClientData(X=X, y=codes.astype(np.int64), sample_weight=data.sample_weight,
                          label=data.label, index=data.index)


def check_norm_bound(X, bound):
    """Refuse rows with ``||x||_2 > bound`` (never clip silently)."""
    norms = np.sqrt(np.einsum("ij,ij->i", X, X))  # no n x p temporary
    worst = int(np.argmax(norms))
    if norms[worst] > bound * (1.0 + NORM_RTOL):
        raise ValueError(
            f"row {worst} of X has l2 norm {norms[worst]:.6g} > norm_bound={bound:g}; "
            "the privacy guarantee needs ||x|| <= norm_bound for every row. Scale the "
            "rows first (e.g. skfed.preprocessing.NormClipper); they are never clipped "
            "silently."
        )


def client_weights(alpha, sizes):
    """``alpha_g`` from "uniform", "size" or an explicit array."""
    g = sizes.size
    if isinstance(alpha, str):
        if alpha == "uniform":
            return np.full(g, 1.0 / g)
        if alpha == "size":
            return sizes / sizes.sum()
        raise ValueError(f"alpha must be 'uniform', 'size' or an array, got {alpha!r}.")
    arr = np.asarray(alpha, dtype=float)
    if arr.shape != (g,) or np.any(arr < 0) or not np.isclose(arr.sum(), 1.0):
        raise ValueError(
            f"alpha must hold {g} non-negative client weights summing to 1, got {alpha!r}."
        )
    return arr


def per_client(value, n_clients, name):
    """A scalar >= 0 broadcast to every client, or one value per client."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(n_clients, float(arr))
    if arr.shape != (n_clients,) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(
            f"{name} must be a number >= 0 or one per client ({n_clients}), got {value!r}."
        )
    return arr


class _LinearFederatedClassifier(FederatedEstimatorMixin, ClassifierMixin, BaseEstimator):
    """Prediction with one global linear model ``scores = X @ coef_.T + intercept_``."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        return tags

    def _fits_intercept(self):
        """Whether the constant feature is appended (estimators may resolve "auto")."""
        return bool(self.fit_intercept)

    def _set_model(self, M):
        if self._fits_intercept():
            self.coef_ = np.ascontiguousarray(M[:, :-1])
            self.intercept_ = M[:, -1] * float(self.intercept_scaling)
        else:
            self.coef_ = np.ascontiguousarray(M)
            self.intercept_ = np.zeros(M.shape[0])

    # -- the contract of skfed.federated.fit_federated (also run by Flower) --

    #: Whether the estimator adds noise when ``epsilon``/``target_epsilon`` is set.
    _private = True

    def _is_private(self):
        # epsilon=inf is an alias of None (check_epsilon): no noise, no norm bound;
        # a total target has no such alias (target_epsilon=inf is an error)
        if not self._private:
            return False
        if self.target_epsilon is not None:
            check_epsilon(self.target_epsilon, name="target_epsilon", allow_none=False)
            return True
        return check_epsilon(self.epsilon) is not None

    def _privacy_plan(self):
        """Per-round ``(epsilons, delta, delta_bar)`` or None (see :func:`privacy_plan`)."""
        return privacy_plan(self, None) if self._private else None

    def _check_params(self):
        """Validate the hyperparameters (subclasses extend)."""
        check_positive_int(self.n_rounds, "n_rounds")
        check_unknown_client(self.unknown_client)

    def _validate_site_data(self, X, y, reset=False):
        """The checks one site runs on its own rows (in-process: on the pooled rows).

        With privacy, a row whose norm exceeds ``norm_bound`` is an error
        here, on the site, before anything is sent.
        """
        X, y = validate_data(self, X, y, reset=reset, dtype=np.float64)
        check_scale(X, "X")  # else the local QP solvers fail deep inside (LocalSolveError)
        check_classification_targets(y)
        self._check_params()
        if self._is_private():
            check_norm_bound(X, check_real(self.norm_bound, "norm_bound", 0.0, low_open=True))
        return X, y

    def _site_summary(self, X, y):
        """A site's class labels: the union over sites is ``classes_``.

        Which labels a site holds is released in the set-up exchange, outside
        the differential privacy guarantee (like the row counts).
        """
        return {"classes": _label_array(np.unique(y), "y")}

    def _combine_site_summaries(self, labels, summaries):
        kinds = {s["classes"].dtype.kind == "U" for s in summaries}
        if len(kinds) > 1:
            raise ValueError("y: some sites hold text class labels and others numbers.")
        classes = np.unique(np.concatenate([s["classes"] for s in summaries]))
        if classes.size < 2:
            raise ValueError(
                f"y has 1 class ({classes[0]!r}) over all sites; {type(self).__name__} "
                "needs at least 2 classes."
            )
        return {"classes": classes}

    def _engine_params(self):
        return dict(n_rounds=check_positive_int(self.n_rounds, "n_rounds"),
                    client_fraction=getattr(self, "client_fraction", 1.0),
                    on_client_error=getattr(self, "on_client_error", "raise"),
                    random_state=self.random_state, n_jobs=self.n_jobs, verbose=self.verbose)

    def _fit_plan(self, setup):
        """Everything built from the set-up summary: the algorithm and its constants.

        Deterministic, so the server and every site build the same algorithm.
        Returns ``(algorithm, plan, norm_bound, alpha, attrs)`` where
        ``attrs`` are fitted attributes of the estimator (step sizes, noise).
        """
        self._check_params()
        plan = self._privacy_plan()
        classes = np.asarray(setup["classes"])
        sizes = np.asarray(setup["n_samples"], dtype=float)
        L = check_real(getattr(self, "norm_bound", 1.0), "norm_bound", 0.0, low_open=True)
        scaling = None
        if self._fits_intercept():  # the constant feature counts towards the norm bound
            scaling = check_real(self.intercept_scaling, "intercept_scaling", 0.0,
                                 low_open=True)
            L = math.sqrt(L * L + scaling * scaling)
        alpha = client_weights(self.alpha, sizes)
        shape = (classes.size, int(setup["n_features"]) + (scaling is not None))
        algorithm, attrs = self._algorithm(plan, sizes, shape, L, alpha)
        algorithm.classes = classes
        algorithm.intercept_scaling = scaling
        return algorithm, plan, L, alpha, attrs

    def _federated_algorithm(self, setup):
        return self._fit_plan(setup)[0]

    @transactional_fit
    def fit(self, X, y, groups=None):
        """Train by federated rounds, one client per distinct label of ``groups``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows; with privacy, every row must have
            ``||x||_2 <= norm_bound``.
        y : array-like of shape (n_samples,)
            Class labels (any labels, at least two classes).
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` means one client. Every client
            needs at least two rows.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, y = self._validate_site_data(X, y, reset=True)
        result, setup, labels = fit_federated(self, X, y, groups, min_samples=2)
        self._set_federated_result(result, setup, labels)
        return self

    def _server_model(self, server_state):
        return server_state["coef"]

    def _set_federated_result(self, result, setup, labels):
        """Fitted attributes from the server state (and, in-process, the client states)."""
        algorithm, plan, _, alpha, attrs = self._fit_plan(setup)
        self._set_model(self._server_model(result.server_state))
        self.classes_ = np.asarray(setup["classes"]).copy()
        self.clients_ = labels
        self.client_weights_ = alpha
        self.n_features_in_ = int(setup["n_features"])
        self.n_iter_ = result.n_rounds
        self.communication_ = result.ledger
        for name, value in attrs.items():
            setattr(self, name, value)
        if plan is not None:
            eps, delta, delta_bar = plan
            self.epsilon_round_ = tuple(eps)
            self.noise_multiplier_ = tuple(classical_multiplier(e, delta) for e in eps)
            self.privacy_spent_ = (
                privacy_spent(self.n_iter_, eps, delta, delta_bar, self.accountant), delta_bar
            )
            self.privacy_unit_ = "record"
        else:
            self.epsilon_round_ = self.noise_multiplier_ = None
            self.privacy_spent_ = self.privacy_unit_ = None
        self._set_client_results(result, algorithm)

    def _set_client_results(self, result, algorithm):
        """Attributes from the client states (``None`` on a distributed run)."""

    # decision_function checks groups like predict: request them alike
    __metadata_request__decision_function = {"groups": True}

    def _scores(self, X, groups):
        """``X @ coef_.T + intercept_`` of shape (n_samples, n_classes), groups checked."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if groups is not None:
            map_clients(groups, self.clients_, X.shape[0], self.unknown_client)
        return X @ self.coef_.T + self.intercept_

    def decision_function(self, X, groups=None):
        """Class scores ``M x + b`` of the global model.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to score.
        groups : array-like of shape (n_samples,), default=None
            Client labels; checked (unknown labels follow ``unknown_client``),
            then ignored: the model is shared by all clients.

        Returns
        -------
        scores : ndarray of shape (n_samples, n_classes) or (n_samples,)
            For two classes, the score of ``classes_[1]`` minus that of
            ``classes_[0]``.
        """
        scores = self._scores(X, groups)
        if scores.shape[1] == 2:
            return scores[:, 1] - scores[:, 0]
        return scores

    def predict(self, X, groups=None):
        """Predict ``argmax_k (M x + b)_k`` with the global model.

        The methods of this module train one consensus model (local models
        are noisy or converging copies of it), so every row, of a seen client
        or not, is predicted with the global model; scorers that drop
        ``groups`` are therefore still right.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        groups : array-like of shape (n_samples,), default=None
            Client labels; checked, then ignored.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        scores = self.decision_function(X, groups)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]
