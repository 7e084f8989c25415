"""Shared pieces of the federated linear classifiers: privacy plans, prediction."""

import math
import numbers

import dp_accounting
import numpy as np
from scipy.optimize import brentq
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ..base import FederatedEstimatorMixin
from ..federated import ClientData, Federation
from ..privacy import (
    check_privacy_budget,
    dpfeddro_epsilon,
    dpfeddro_per_round_epsilon,
    epsilon_spent,
    gaussian_event,
    split_round_budget,
)
from ..utils._validation import check_groups, map_clients

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
    events = [gaussian_event(classical_multiplier(e, delta), n_rounds) for e in epsilons]
    event = events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(events)
    return epsilon_spent(event, delta_bar, accountant)


def privacy_plan(est, split):
    """Per-round ``(epsilons, delta, delta_bar)`` of an estimator, or None without privacy.

    ``split`` is the share of ``epsilon^2`` of the first release (None: one
    release per round). Reads ``epsilon``, ``delta``, ``target_epsilon``,
    ``target_delta``, ``accountant`` and ``n_rounds`` from ``est``.
    """
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
            def excess(log_eps):
                return privacy_spent(est.n_rounds, split_eps(math.exp(log_eps)), delta, delta,
                                     est.accountant) - target

            lo, hi = math.log(1e-6), math.log(max(target, 1.0) * 10.0)
            if excess(hi) < 0:
                raise ValueError(
                    f"target_epsilon={target} is too large to calibrate in "
                    f"{est.n_rounds} rounds; lower it."
                )
            # round down so the spent epsilon never exceeds the target
            eps = math.exp(brentq(excess, lo, hi, xtol=1e-7)) * (1.0 - 1e-6)
        return split_eps(eps), delta, delta
    if est.epsilon is None:
        return None
    eps, delta = check_privacy_budget(est.epsilon, est.delta, allow_none=False)
    return split_eps(eps), delta, delta


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

    def _set_model(self, M):
        if self.fit_intercept:
            self.coef_ = np.ascontiguousarray(M[:, :-1])
            self.intercept_ = M[:, -1] * float(self.intercept_scaling)
        else:
            self.coef_ = np.ascontiguousarray(M)
            self.intercept_ = np.zeros(M.shape[0])

    def _encode_classes(self, y):
        """Sorted class labels and ``y`` as int64 codes; at least two classes."""
        classes, y_enc = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                f"y has 1 class ({classes[0]!r}); {type(self).__name__} needs at least 2 "
                "classes."
            )
        return classes, y_enc.astype(np.int64)

    def _federate(self, X, y_enc, groups, bound, private):
        """Check the norm bound (private fits), add the intercept column, split by client.

        Returns the augmented rows, their norm bound, the federation and the
        client weights.
        """
        if private:
            check_norm_bound(X, bound)
        Xa, bound = self._add_intercept(X, bound)
        federation = make_federation(Xa, y_enc, groups, min_samples=2)
        alpha = client_weights(self.alpha, federation.n_samples.astype(float))
        return Xa, bound, federation, alpha

    def _add_intercept(self, X, bound):
        """Append the constant feature; it counts towards the norm bound."""
        if not self.fit_intercept:
            return X, bound
        b = check_real(self.intercept_scaling, "intercept_scaling", 0.0, low_open=True)
        return np.hstack([X, np.full((X.shape[0], 1), b)]), math.sqrt(bound * bound + b * b)

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
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if groups is not None:
            map_clients(groups, self.clients_, X.shape[0], self.unknown_client)
        scores = X @ self.coef_.T + self.intercept_
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


def make_federation(X, y, groups, min_samples=2):
    """``Federation.from_arrays``, without copying rows already grouped by client.

    When the rows of each client are contiguous (e.g. sorted by ``groups``),
    every client gets a view of ``X`` instead of a copy, so training holds the
    data once in memory.
    """
    labels, client_index = check_groups(groups, X.shape[0])
    if client_index.size and not np.all(np.diff(client_index) >= 0):
        return Federation.from_arrays(X, y, groups, min_samples=min_samples)
    bounds = np.searchsorted(client_index, np.arange(labels.size + 1))
    clients, rows = [], []
    for k, label in enumerate(labels.tolist()):
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        if hi - lo < min_samples:
            raise ValueError(
                f"client {label!r} has {hi - lo} row(s) but this estimator needs at least "
                f"{min_samples} per client (groups)."
            )
        clients.append(ClientData(X=X[lo:hi], y=y[lo:hi], label=label, index=k))
        rows.append(np.arange(lo, hi))
    return Federation(clients=tuple(clients), labels=labels, row_index=tuple(rows))
