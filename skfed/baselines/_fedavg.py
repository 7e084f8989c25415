"""FedAvg for linear regression, with optional local fine-tuning (a pFL baseline)."""

import copy

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_array, check_is_fitted

from ..base import FederatedEstimator, check_on_site, keyword_init, scatter_rows
from ..federated import FederatedAlgorithm
from ..federated._release import MIN_ROWS_MOMENTS, gram_gated, too_few_rows_warning
from ..utils._docstrings import fill_doc
from ..utils._param_validation import (
    FEDERATION_CONSTRAINTS, FEDERATION_DEFAULTS, nonnegative_real, positive_int, positive_real,
)
from ..utils._validation import check_scale, validate_data

__all__ = ["FedAvgRegressor"]


# a fixed-step local update that multiplies a client's loss by more than this diverges
DIVERGENCE_FACTOR = 1e3


def _objective(X, y, coef, intercept, alpha):
    """``0.5 * mean((X w + b - y)^2) + 0.5 * alpha * ||w||^2`` (inf once it overflows)."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = X @ coef + intercept - y
        return float(0.5 * np.mean(r * r) + 0.5 * alpha * (coef @ coef))


def _local_sgd(X, y, coef, intercept, n_epochs, rng, learning_rate, alpha, batch_size,
               fit_intercept):
    """``n_epochs`` of mini-batch SGD from ``(coef, intercept)``; returns new arrays."""
    from ._kernels import sgd_squared_epochs  # numba: loaded by the first fit, not on import

    order = np.stack([rng.permutation(X.shape[0]) for _ in range(n_epochs)]).astype(np.int64)
    coef = np.array(coef, dtype=float)  # the kernel updates it in place
    intercept = sgd_squared_epochs(
        X, y, coef, float(intercept), order, learning_rate, alpha, batch_size, fit_intercept
    )
    return coef, intercept


class _FedAvg(FederatedAlgorithm):
    """FedAvg (McMahan et al., 2017): local SGD epochs, size-weighted averaging."""

    def __init__(self, n_features, local_epochs, learning_rate, alpha, batch_size,
                 fit_intercept, fine_tune_epochs):
        self.n_features = n_features
        self.local_epochs = local_epochs
        self.learning_rate = learning_rate
        self.alpha = alpha
        self.batch_size = batch_size
        self.fit_intercept = fit_intercept
        self.fine_tune_epochs = fine_tune_epochs
        self.finalize_clients = fine_tune_epochs > 0

    def _step_size(self, X):
        if self.learning_rate != "auto":
            return self.learning_rate
        # 1 / (a bound on the smoothness of any mini-batch loss): stable for any scaling
        lipschitz = np.max(np.einsum("ij,ij->i", X, X)) + float(self.fit_intercept) + self.alpha
        return 1.0 / max(lipschitz, 1e-12)

    def _sgd(self, data, coef, intercept, n_epochs, rng):
        new_coef, new_intercept = _local_sgd(data.X, data.y, coef, intercept, n_epochs, rng,
                                             self._step_size(data.X), self.alpha,
                                             self.batch_size, self.fit_intercept)
        if self.learning_rate != "auto":  # the "auto" step cannot diverge: skip the check
            self._check_divergence(data, (coef, intercept), (new_coef, new_intercept),
                                   n_epochs)
        return new_coef, new_intercept

    def _check_divergence(self, data, start, end, n_epochs):
        """Raise if a fixed-step local update blew the client's loss up.

        A stable SGD step keeps the loss within a modest factor of the larger
        of its starting value and the loss of the zero model (noise can only
        add that much); a step above the stability limit multiplies it by a
        large factor every batch, long before the values overflow.
        """
        X, y = data.X, data.y
        before = _objective(X, y, *start, self.alpha)
        after = _objective(X, y, *end, self.alpha)
        scale = max(before, float(0.5 * np.mean(y * y)))
        if not np.isfinite(after) or after > DIVERGENCE_FACTOR * scale:
            raise FloatingPointError(
                f"FedAvg diverged: {n_epochs} local epoch(s) of SGD took this client's loss "
                f"from {before:.3g} to {after:.3g}. learning_rate={self.learning_rate!r} is "
                "too large for these rows: lower learning_rate, use learning_rate='auto', "
                "or standardize X."
            )

    def server_init(self, rng):
        coef, intercept = np.zeros(self.n_features), 0.0
        return (coef, intercept), {"coef": coef, "intercept": intercept}

    def prepare_client(self, data):
        # a least-squares update is a function of the Gram matrix of [1, X, y], and the
        # updates from several broadcast models give it back: a one-row client's first
        # update is its row (coefficient change / intercept change), two rows follow up
        # to their order. Such a client sends its row count only, decided on the site
        # (skfed.federated._release.sends_gram); it still fine-tunes
        return gram_gated(data)

    def client_step(self, data, state, broadcast, rng):
        if not data.sends_gram:
            return state, {"n_samples": np.int64(data.n_samples)}
        coef, intercept = self._sgd(data, broadcast["coef"], broadcast["intercept"],
                                    self.local_epochs, rng)
        return state, {"coef": coef, "intercept": intercept,
                       "n_samples": np.int64(data.n_samples)}

    def server_step(self, state, messages, rng):
        updates = [m for m in messages.values() if "coef" in m]
        if not updates:  # every client asked this round is too small to send an update
            coef, intercept = state
            return state, {"coef": coef, "intercept": intercept}
        n = np.array([m["n_samples"] for m in updates], dtype=float)
        w = n / n.sum()
        coef = sum(wk * m["coef"] for wk, m in zip(w, updates))
        intercept = float(sum(wk * m["intercept"] for wk, m in zip(w, updates)))
        if not (np.all(np.isfinite(coef)) and np.isfinite(intercept)):
            raise FloatingPointError(
                "FedAvg diverged (non-finite coefficients); lower learning_rate, use "
                "learning_rate='auto', or standardize X."
            )
        return (coef, intercept), {"coef": coef, "intercept": intercept}

    def client_finalize(self, data, state, broadcast, rng):
        # local fine-tuning of the final global model: the personalized model
        return self._sgd(data, broadcast["coef"], broadcast["intercept"],
                         self.fine_tune_epochs, rng)


@fill_doc
class FedAvgRegressor(FederatedEstimator, RegressorMixin, BaseEstimator):
    """Federated averaging of linear least-squares models, optionally fine-tuned per client.

    Each round, every sampled client runs ``local_epochs`` of mini-batch SGD
    on ``0.5 * mean((X w + b - y)^2) + 0.5 * alpha * ||w||^2`` from the
    current global model and sends its model and row count; the server
    averages the models weighted by row counts (FedAvg, McMahan et al.,
    2017). With ``fine_tune_epochs > 0`` each client then fine-tunes the
    final global model on its own rows ("FedAvg + fine-tuning", a standard
    personalized baseline); the fine-tuned models stay with the clients.

    A client with fewer than 3 rows, or a column of ``X`` or ``y`` (or a
    product of two columns) nonzero on only one or two of its rows, sends
    its row count only: its updates would give its rows back
    (``doc/releases.md``). It takes no part in the average (a warning if no
    client does: the global model stays zero) but fine-tunes.

    ``predict(X, groups)`` uses each row's fine-tuned client model, or the
    global model for ``groups=None``, unseen clients (with
    ``unknown_client="global"``) or when ``fine_tune_epochs=0``.

    Parameters
    ----------
    n_rounds : int, default=50
        Communication rounds.
    local_epochs : int, default=1
        Passes over its rows a client makes per round.
    learning_rate : float or "auto", default="auto"
        SGD step size. ``"auto"``: each client uses
        ``1 / (max_i ||x_i||^2 + fit_intercept + alpha)`` computed on its own
        rows, a step at which mini-batch SGD cannot diverge. With a fixed
        step, each client checks its local update: if it makes the client's
        loss non-finite or more than 1000 times the larger of its starting
        loss and the zero model's loss ``0.5 * mean(y^2)``, the step raises a
        ``FloatingPointError`` naming ``learning_rate`` (handled like any
        client error, see ``on_client_error``), instead of returning a
        diverged model with finite but huge predictions.
    batch_size : int, default=32
        Rows per SGD step.
    alpha : float, default=1e-4
        L2 penalty on the coefficients.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    fine_tune_epochs : int, default=0
        Local epochs of fine-tuning after the last round (0: no personalization).
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients sampled per round.
    on_client_error : {"raise", "skip"}, default="raise"
        Policy for a client step that fails (see :func:`skfed.federated.run_federation`).
        Under ``"skip"``, a client whose fine-tuning step fails keeps the
        global model (listed in ``fallback_clients_``).
    unknown_client : {"global", "error"}, default="global"
        Prediction for clients not seen in ``fit``.
    n_jobs : int or None, default=None
        Threads for the client steps of a round; results do not depend on it.
    random_state : int, RandomState instance or None, default=None
        Seed of client sampling and SGD row orders.
    verbose : int, default=0
        Print one line per round.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Global coefficients.
    intercept_ : float
        Global intercept.
    client_coefs_ : ndarray of shape (n_clients, n_features) or None
        Fine-tuned coefficients per client (the global ones without
        fine-tuning). ``None`` when fine-tuned on a distributed engine: the
        fine-tuned models stay on the sites (``skfed.federated.flower.site_model``).
    client_intercepts_ : ndarray of shape (n_clients,) or None
        Fine-tuned intercepts per client (``None`` as ``client_coefs_``).
    %(clients_)s
    fallback_clients_ : ndarray of shape (n_fallback,)
        Clients whose fine-tuning step failed under ``on_client_error="skip"``
        (the failure is in ``communication_.failures``): their rows are
        predicted with the global model. Empty without fine-tuning, and after
        a fit on a distributed engine (where such a site's model is the global
        one and the coordinator sees the failure in ``communication_.failures``).
    n_iter_ : int
        Rounds run.
    %(communication_)s
    %(features_in_)s

    Examples
    --------
    >>> from skfed.baselines import FedAvgRegressor
    >>> from skfed.datasets import make_federated_regression
    >>> X, y, groups = make_federated_regression(n_clients=4, heterogeneity=0.0,
    ...                                          random_state=0)
    >>> model = FedAvgRegressor(n_rounds=30, random_state=0).fit(X, y, groups=groups)
    >>> round(model.score(X, y), 2)
    0.98
    """

    __init__ = keyword_init(
        dict(n_rounds=50, local_epochs=1, learning_rate="auto", batch_size=32, alpha=1e-4,
             fit_intercept=True, fine_tune_epochs=0),
        FEDERATION_DEFAULTS, positional=1)

    _parameter_constraints = {
        **FEDERATION_CONSTRAINTS,
        "local_epochs": [positive_int()],
        "learning_rate": [StrOptions({"auto"}), positive_real()],
        "batch_size": [positive_int()],
        "alpha": [nonnegative_real()],
        "fit_intercept": ["boolean"],
        "fine_tune_epochs": [positive_int(0)],
    }

    # -- the hooks of skfed.federated.FederatedContract (fit is FederatedEstimator's) --

    def _federated_algorithm(self, setup):
        """The client and server steps, built from the set-up summary only."""
        lr = self.learning_rate
        return _FedAvg(
            n_features=int(setup["n_features"]),
            local_epochs=int(self.local_epochs),
            learning_rate=lr if isinstance(lr, str) else float(lr),
            alpha=float(self.alpha),
            batch_size=int(self.batch_size),
            fit_intercept=bool(self.fit_intercept),
            fine_tune_epochs=int(self.fine_tune_epochs),
        )

    def _validate_site_data(self, X, y, reset=False, groups=None):
        """Validate one site's (or the pooled) training rows.

        ``y`` may be numbers or strings of numbers (converted to float as
        scikit-learn's regressors do).
        """
        X, y = validate_data(self, X, y, reset=reset, y_numeric=True, dtype=np.float64)
        if y.dtype != np.float64:  # e.g. strings of numbers, which the kernel cannot read
            try:
                y = check_array(y, ensure_2d=False, dtype=np.float64, input_name="y")
            except ValueError as exc:
                raise ValueError(f"y must hold numbers (a regression target): {exc}") from None
        check_scale(X, "X")  # else the SGD steps overflow (FloatingPointError "diverged")
        check_scale(y, "y")
        return X, y

    def _set_fitted(self, fit):
        """Copy the global model (and, when known, the clients' models) into attributes.

        ``result.client_states`` is ``None`` on a distributed run: the
        fine-tuned models then stay with the sites (``client_coefs_`` and
        ``client_intercepts_`` are ``None``).
        """
        result, setup, labels = fit.result, fit.setup, fit.labels
        coef, intercept = result.server_state
        if not any("coef" in r.names for r in result.ledger.records if r.direction == "up"):
            too_few_rows_warning("the global model", MIN_ROWS_MOMENTS,
                                 "the global model is zero (fine-tuning starts from it)",
                                 sent="model updates")
        states = result.client_states
        if not self.fine_tune_epochs:
            states = [(coef, intercept)] * len(labels)
        failed = np.zeros(len(labels), dtype=bool)
        if states is not None:
            # a client whose fine-tuning failed (on_client_error="skip") kept no model
            failed = np.array([s is None for s in states], dtype=bool)
            states = [(coef, intercept) if s is None else s for s in states]
        self.fallback_clients_ = np.asarray(labels)[failed]
        self.coef_ = coef
        self.intercept_ = intercept
        self.client_coefs_ = None if states is None else np.array([c for c, _ in states])
        self.client_intercepts_ = None if states is None else \
            np.array([b for _, b in states], dtype=float)
        self.clients_ = labels
        self.n_features_in_ = int(setup["n_features"])
        self.n_iter_ = result.n_rounds
        self.communication_ = result.ledger

    def _with_site_state(self, label, state):
        """This fitted model with one site's fine-tuned model (see ``skfed.federated.flower``)."""
        site = copy.deepcopy(self)
        fine_tuned = self.fine_tune_epochs and state is not None  # None: fine-tuning failed
        coef, intercept = state if fine_tuned else (self.coef_, self.intercept_)
        site.clients_ = np.array([label])
        site.client_coefs_ = np.asarray(coef)[None]
        site.client_intercepts_ = np.array([intercept], dtype=float)
        return site

    def predict(self, X, groups=None):
        """Predict with each row's client model (the global model for others).

        Parameters
        ----------
        %(X_predict)s
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` uses the global model.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        index = self._client_index(groups, X.shape[0])
        check_on_site(index, self.clients_, self.client_coefs_ is None)
        return scatter_rows(
            X.shape[0],
            index,
            lambda k, rows: X[rows] @ self.client_coefs_[k] + self.client_intercepts_[k],
            lambda rows: X[rows] @ self.coef_ + self.intercept_,
        )
