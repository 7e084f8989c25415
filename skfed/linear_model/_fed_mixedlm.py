"""Federated linear mixed model: exact (RE)ML from statistics the sites send once."""

import copy
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import StrOptions

from ..base import FederatedEstimator
from ..baselines._mixedlm import (
    MixedPredictMixin, resolve_random_slopes, warn_collinear_slopes,
)
from ..baselines._mixedlm_core import _blups
from ..federated import FederatedAlgorithm
from ..federated._release import MIN_ROWS_MOMENTS, gram_gated
from ..utils._docstrings import fill_doc
from ..utils._param_validation import UNKNOWN_CLIENT, positive_int
from ..utils._validation import check_scale, user_stacklevel, validate_data
from ._mixedlm_stats import MixedLMStats, fit_from_stats, site_statistics

__all__ = ["FedMixedLMRegressor"]


class _FedMixedLM(FederatedAlgorithm):
    """One round of sufficient statistics up, the fitted model down, BLUPs at the sites."""

    finalize_clients = True
    client_step_draws = False

    def __init__(self, slopes, fit_intercept, reml, max_iter):
        self.slopes = slopes
        self.fit_intercept = fit_intercept
        self.reml = reml
        self.max_iter = max_iter

    def asks_every_client(self, server_state):
        return True

    def prepare_client(self, data):
        # the statistics are the Gram matrix of [1, X, y] in another basis: a site whose
        # rows it would give back (skfed.federated._release.sends_gram) sends its count only
        return gram_gated(data)

    def client_step(self, data, state, broadcast, rng):
        if not data.sends_gram:
            return state, {"n_samples": np.int64(data.n_samples)}
        n, sums, cross = site_statistics(data.X, data.y)
        return state, {"n_samples": np.int64(n), "sums": sums, "cross": cross}

    def server_step(self, state, messages, rng):
        senders = sorted(k for k, m in messages.items() if "sums" in m)
        if not senders:
            total = int(sum(int(m["n_samples"]) for m in messages.values()))
            raise ValueError(
                f"no client sent its statistics (n_samples={total} in all): each needs "
                f"{MIN_ROWS_MOMENTS} or more rows, with every column of X and y and every "
                f"product of two columns nonzero on no row or on {MIN_ROWS_MOMENTS} or more "
                "(doc/releases.md); a fit needs at least one such client (groups)."
            )
        stats = MixedLMStats([messages[k]["n_samples"] for k in senders],
                             [messages[k]["sums"] for k in senders],
                             [messages[k]["cross"] for k in senders], self.fit_intercept)
        fit = fit_from_stats(stats, self.slopes, reml=self.reml, max_iter=self.max_iter)
        broadcast = {"coef": fit.coef, "intercept": fit.intercept,
                     "random_slopes": fit.slopes.astype(np.int64),
                     "random_effects_cov": fit.random_effects_cov,
                     "noise_variance": fit.noise_variance}
        return (fit, np.asarray(senders, dtype=np.intp)), broadcast

    def client_finalize(self, data, state, broadcast, rng):
        # the site's BLUP from its own rows: it stays at the site
        slopes = np.asarray(broadcast["random_slopes"], dtype=np.intp)
        X = data.X
        Z = np.column_stack([np.ones(X.shape[0]), X[:, slopes]])
        resid = data.y - X @ broadcast["coef"] - float(broadcast["intercept"])
        return _blups(Z, resid, np.zeros(X.shape[0], dtype=np.intp), 1,
                      np.asarray(broadcast["random_effects_cov"]),
                      float(broadcast["noise_variance"]))[0]


@fill_doc
class FedMixedLMRegressor(FederatedEstimator, MixedPredictMixin, RegressorMixin,
                          BaseEstimator):
    """Linear mixed model fitted exactly from statistics each client sends once.

    The model of :class:`~skfed.baselines.MixedLMRegressor` (a random
    intercept and random slopes per client, fixed effects shared), fitted by
    a federated protocol instead of on pooled rows. For the rows of client
    ``g``

    .. math:: y = \\beta_0 + x^\\top \\beta + u_{g0} + x_S^\\top u_{gS} + \\varepsilon,
       \\quad u_g \\sim N(0, \\Sigma),\\ \\varepsilon \\sim N(0, \\sigma^2),

    where ``S`` are the ``random_slopes`` features. The likelihood of each
    client's rows depends on them only through its row count and the cross
    products of ``[1, X, y]`` (Woodbury's formula on
    ``V_g = Z_g Sigma Z_g' + sigma^2 I``), so each client sends those once;
    the server maximizes the REML (or ML) likelihood exactly, profiling out
    ``beta`` (generalized least squares) and ``sigma^2``, and broadcasts the
    estimate; each client then computes its random effects (its BLUP
    ``E[u_g | y]``) from its own rows, and they stay with it. The estimates
    equal statsmodels' ``MixedLM`` on the rows of the clients that sent
    their statistics (to its optimizer's tolerance), in a fraction of its time.

    A client with fewer than 3 rows, or a column of ``X`` or ``y`` (or a
    product of two columns) nonzero on only one or two of its rows, sends
    its row count only: its statistics would give its rows back
    (``doc/releases.md``). It is left out of the estimate, with a warning
    (``excluded_clients_``), but still computes its random effects from the
    broadcast model. If no client may send, ``fit`` raises a ``ValueError``.

    ``predict(X, groups)`` adds each seen client's random effects to the
    fixed effects. Rows with ``groups=None`` or a client not seen in ``fit``
    (with ``unknown_client="global"``) get the population prediction
    ``beta_0 + x' beta``.

    Parameters
    ----------
    %(mixed_model)s
    max_iter : int, default=200
        Maximum BFGS iterations of the server's optimizer (a few Newton steps
        follow).
    %(unknown_client_population)s

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Fixed-effect coefficients. Constant or collinear columns (linear
        combinations of earlier columns and the intercept, on the clients
        that sent statistics) are dropped before fitting and get 0.
    intercept_ : float
        Fixed intercept (0 with ``fit_intercept=False``).
    random_slopes_ : ndarray of shape (n_slopes,)
        Indices of the features with a random slope in the fitted model
        (requested slopes on constant or collinear columns are dropped with a
        warning).
    random_effects_ : ndarray of shape (n_clients, 1 + n_slopes) or None
        Each client's BLUP of its random effects: the intercept, then the
        slopes of ``random_slopes_``; rows follow ``clients_``. ``None`` after
        a fit on a distributed engine: they stay on the sites
        (``skfed.federated.flower.site_model``).
    random_effects_cov_ : ndarray of shape (1 + n_slopes, 1 + n_slopes)
        Estimated covariance ``Sigma`` of the random effects.
    noise_variance_ : float
        Estimated residual variance ``sigma^2``.
    converged_ : bool
        Whether the optimizer reached a stationary point (otherwise a
        ``ConvergenceWarning`` is issued).
    method_ : str
        ``"bfgs"``, or ``"exact"`` when the fixed effects fit ``y`` exactly
        and every variance is 0.
    n_iter_ : int
        Optimizer iterations (0 for an exact fit).
    %(clients_)s
    excluded_clients_ : ndarray of shape (n_excluded,)
        Clients that sent their row count only (see above).
    %(communication_)s
    %(features_in_)s

    See Also
    --------
    skfed.baselines.MixedLMRegressor : The same model on pooled rows (statsmodels).

    Notes
    -----
    The server profiles ``beta`` and ``sigma^2`` out of the likelihood and
    maximizes it over the Cholesky factor of ``Sigma / sigma^2`` (Bates et
    al., 2015) with an analytic gradient, on statistics standardized by the
    pooled means and scales; a variance estimated at 0 (``Sigma`` singular)
    is reached as any other value. One round: the statistics go up once, the
    estimate comes down once.

    References
    ----------
    N. M. Laird and J. H. Ware, "Random-effects models for longitudinal data",
    Biometrics 38(4), 1982.

    D. Bates, M. Maechler, B. Bolker and S. Walker, "Fitting linear
    mixed-effects models using lme4", Journal of Statistical Software 67(1), 2015.

    Examples
    --------
    >>> from skfed.datasets import make_federated_regression
    >>> from skfed.linear_model import FedMixedLMRegressor
    >>> X, y, groups = make_federated_regression(n_clients=5, n_features=2, random_state=0)
    >>> model = FedMixedLMRegressor(random_slopes=[0]).fit(X, y, groups=groups)
    >>> model.random_effects_.shape, model.excluded_clients_.size
    ((5, 2), 0)
    >>> personal, population = model.predict(X, groups=groups), model.predict(X)
    >>> bool(((y - personal) ** 2).mean() < ((y - population) ** 2).mean())
    True
    """

    def __init__(self, random_slopes=None, *, fit_intercept=True, reml=True, max_iter=200,
                 unknown_client="global"):
        self.random_slopes = random_slopes
        self.fit_intercept = fit_intercept
        self.reml = reml
        self.max_iter = max_iter
        self.unknown_client = unknown_client

    _parameter_constraints = {
        "random_slopes": [None, StrOptions({"all"}), "array-like"],
        "fit_intercept": ["boolean"],
        "reml": ["boolean"],
        "max_iter": [positive_int()],
        **UNKNOWN_CLIENT,
    }

    @classmethod
    def _test_instances(cls):
        """Instances for the common checks: random intercept, and random slopes on all."""
        return [cls(), cls(random_slopes="all")]

    # -- the hooks of skfed.federated.FederatedContract (fit is FederatedEstimator's) --

    def _validate_site_data(self, X, y, reset=False, groups=None):
        """Validate one site's (or the pooled) training rows."""
        X, y = validate_data(self, X, y, reset=reset, y_numeric=True, dtype=np.float64)
        check_scale(X, "X")  # an overflowing sum of squares would give NaN statistics
        check_scale(y, "y")
        return X, y

    def _federated_algorithm(self, setup):
        """The client and server steps, from the parameters and the set-up summary."""
        slopes = resolve_random_slopes(self.random_slopes, int(setup["n_features"]),
                                       getattr(self, "feature_names_in_", None))
        return _FedMixedLM(slopes=slopes, fit_intercept=bool(self.fit_intercept),
                           reml=bool(self.reml), max_iter=int(self.max_iter))

    def _set_fitted(self, fit):
        """Fitted attributes from the server's estimate and (in-process) the sites' BLUPs."""
        result, labels = fit.result, np.asarray(fit.labels)
        mixed, senders = result.server_state
        excluded = np.setdiff1d(np.arange(len(labels)), senders)
        if excluded.size:
            warnings.warn(
                f"{excluded.size} of {len(labels)} clients sent their row count only (fewer "
                f"than {MIN_ROWS_MOMENTS} rows, or a column of X or y or a product of two "
                f"columns nonzero on only one or two of their rows: their statistics would "
                f"give rows back, doc/releases.md): {labels[excluded][:10].tolist()}. The "
                "estimate uses the other clients' rows; these still get their random "
                "effects (excluded_clients_).",
                UserWarning, stacklevel=user_stacklevel(),
            )
        warn_collinear_slopes(mixed)
        if not mixed.converged:
            warnings.warn(
                f"FedMixedLMRegressor did not converge in max_iter={self.max_iter} "
                "iterations; increase max_iter or use fewer random slopes.",
                ConvergenceWarning, stacklevel=user_stacklevel(),
            )
        states = result.client_states
        self._set_mixed_fit(
            mixed, None if states is None else np.array(states, dtype=float), labels)
        self.excluded_clients_ = labels[excluded]
        self.communication_ = result.ledger
        self.n_features_in_ = int(fit.setup["n_features"])

    def _with_site_state(self, label, state):
        """This fitted model with one site's random effects (see ``skfed.federated.flower``)."""
        site = copy.deepcopy(self)
        site.clients_ = np.array([label])
        site.random_effects_ = np.asarray(state, dtype=float)[None]
        return site
