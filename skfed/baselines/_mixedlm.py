"""Linear mixed model (statsmodels MixedLM): the statistician's grouped-regression reference."""

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning

from ..base import FederatedEstimatorMixin, transactional_fit
from ..utils._docstrings import fill_doc
from ..utils._validation import (
    check_groups,
    check_positive_int,
    check_scale,
    check_unknown_client,
    install_hint,
    user_stacklevel,
    validate_data,
)
from ._mixedlm_core import fit_mixedlm
from ._random_effects import RandomEffectsPredictMixin

__all__ = ["MixedLMRegressor", "MixedPredictMixin", "resolve_random_slopes"]

# scipy optimizers statsmodels' MixedLM.fit accepts ("newton"/"ncg" are refused
# by statsmodels; "minimize"/"basinhopping" need options we do not pass on)
_METHODS = ("bfgs", "lbfgs", "cg", "powell", "nm")


def _import_statsmodels():
    try:
        import statsmodels  # noqa: F401
    except ImportError:
        raise ImportError(
            f"MixedLMRegressor needs statsmodels>=0.14: {install_hint('bench')} (the test "
            'extra has it too), or pip install "statsmodels>=0.14".'
        ) from None


def resolve_random_slopes(slopes, n_features, feature_names=None):
    """Column indices of the ``random_slopes`` parameter (None, "all", indices or names).

    Parameters
    ----------
    slopes : None, "all" or list of int or str
    n_features : int
    feature_names : ndarray of str or None
        ``feature_names_in_`` of the fitted estimator, for names.

    Returns
    -------
    slopes : ndarray of int
    """
    if slopes is None:
        return np.array([], dtype=np.intp)
    if isinstance(slopes, str):
        if slopes == "all":
            return np.arange(n_features, dtype=np.intp)
        raise ValueError(
            f"random_slopes must be None, 'all' or a list of column indices or "
            f"feature names, got the string {slopes!r} (for one feature, pass "
            f"[{slopes!r}])."
        )
    if isinstance(slopes, (numbers.Integral, np.integer)):
        raise ValueError(
            f"random_slopes must be None, 'all' or a list, got {slopes!r} "
            f"(for one feature, pass [{slopes!r}])."
        )
    try:
        items = list(slopes)
    except TypeError:
        raise ValueError(
            f"random_slopes must be None, 'all' or a list of column indices or "
            f"feature names, got {slopes!r}."
        ) from None
    names = feature_names
    out = []
    for item in items:
        if isinstance(item, str):
            if names is None:
                raise ValueError(
                    f"random_slopes names the feature {item!r}, but X has no "
                    "feature names; pass column indices or a DataFrame."
                )
            hits = np.flatnonzero(names == item)
            if not hits.size:
                raise ValueError(
                    f"random_slopes names the feature {item!r}, which is not a "
                    f"column of X (columns: {names.tolist()[:20]})."
                )
            out.append(int(hits[0]))
        elif isinstance(item, (numbers.Integral, np.integer)) and not isinstance(
            item, (bool, np.bool_)
        ):
            if not -n_features <= item < n_features:
                raise ValueError(
                    f"random_slopes has the column index {item}, but X has "
                    f"{n_features} features."
                )
            out.append(int(item) % n_features)
        else:
            raise ValueError(
                f"random_slopes entries must be column indices or feature names, "
                f"got {item!r}."
            )
    if len(set(out)) != len(out):
        raise ValueError(f"random_slopes names a feature twice: {slopes!r}.")
    return np.asarray(out, dtype=np.intp)


def warn_collinear_slopes(fit):
    """Warn that the requested random slopes of a ``MixedLMFit`` were dropped as collinear."""
    if fit.collinear_slopes.size:
        warnings.warn(
            f"random slopes on features {fit.collinear_slopes.tolist()} were dropped: those "
            "columns are constant or linear combinations of the intercept and the "
            "other random-slope columns.",
            UserWarning, stacklevel=user_stacklevel(),
        )


class MixedPredictMixin(RandomEffectsPredictMixin):
    """``predict`` of the mixed models: fixed effects plus each seen client's random effects.

    Reads ``coef_``, ``intercept_``, ``random_slopes_``, ``random_effects_`` (``None``
    after a distributed fit: the random effects stay on the sites) and ``clients_``.
    """

    def _fixed_part(self, X):
        return X @ self.coef_ + self.intercept_

    def _set_mixed_fit(self, fit, random_effects, clients):
        """Fitted attributes from a ``MixedLMFit``, the BLUPs by client and their labels."""
        self.coef_ = fit.coef
        self.intercept_ = fit.intercept
        self.random_slopes_ = fit.slopes
        self.random_effects_ = random_effects
        self.random_effects_cov_ = fit.random_effects_cov
        self.noise_variance_ = fit.noise_variance
        self.converged_ = fit.converged
        self.method_ = fit.method
        self.n_iter_ = fit.n_iter
        self.clients_ = clients


@fill_doc
class MixedLMRegressor(MixedPredictMixin, FederatedEstimatorMixin, RegressorMixin,
                       BaseEstimator):
    """Linear mixed model with a random intercept and random slopes per client.

    The centralized, non-private reference for grouped regression: the model
    a statistician fits when all rows can be pooled (no federation, no
    privacy), as ``lme4::lmer(y ~ x1 + x2 + (1 + x1 | group))`` in R. For the
    rows of client ``g``

    .. math:: y = \\beta_0 + x^\\top \\beta + u_{g0} + x_S^\\top u_{gS} + \\varepsilon,
       \\quad u_g \\sim N(0, \\Sigma),\\ \\varepsilon \\sim N(0, \\sigma^2),

    where ``S`` are the ``random_slopes`` features. ``Sigma`` and
    ``sigma^2`` are estimated by REML (or ML) with statsmodels
    :class:`~statsmodels.regression.mixed_linear_model.MixedLM`; the fixed
    effects are their generalized least-squares estimates and each client's
    random effects ``u_g`` its BLUP ``E[u_g | y]``.

    ``predict(X, groups)`` adds each seen client's BLUP to the fixed effects.
    Rows with ``groups=None`` or a client not seen in ``fit`` (with
    ``unknown_client="global"``) get the *population prediction*
    ``beta_0 + x' beta``, the mean over new clients.

    Requires statsmodels, of the ``bench`` extra (``python -m pip install -e ".[bench]"``
    in the skfed clone).

    Parameters
    ----------
    %(mixed_model)s
    method : str or list of str, default=("bfgs", "powell")
        scipy optimizers for the variance components, tried in turn until one
        converges (each continues from the best previous estimate; an
        optimizer that raises is skipped). Any of ``"bfgs"``, ``"lbfgs"``,
        ``"cg"``, ``"powell"``, ``"nm"``. The default was chosen by
        ``benchmarks/defaults/mixedlm_method.py``: BFGS is fast on identified problems
        and derivative-free Powell reaches the boundary (a zero variance), where
        gradient methods stall.
    max_iter : int, default=200
        Maximum iterations of each optimizer.
    %(unknown_client_population)s

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Fixed-effect coefficients. Constant or collinear columns (linear
        combinations of earlier columns and the intercept) are dropped
        before fitting and get 0, as in R, which reports them as ``NA``.
    intercept_ : float
        Fixed intercept (0 with ``fit_intercept=False``).
    random_slopes_ : ndarray of shape (n_slopes,)
        Indices of the features with a random slope in the fitted model.
        Requested slopes on constant or collinear columns are dropped with a
        warning; if every optimizer fails with random slopes, the model falls
        back to a random intercept only, with a warning.
    random_effects_ : ndarray of shape (n_clients, 1 + n_slopes)
        BLUP of each client's random effects: the intercept, then the slopes
        of ``random_slopes_``; rows follow ``clients_``.
    random_effects_cov_ : ndarray of shape (1 + n_slopes, 1 + n_slopes)
        Estimated covariance ``Sigma`` of the random effects.
    noise_variance_ : float
        Estimated residual variance ``sigma^2``.
    converged_ : bool
        Whether an optimizer converged (otherwise the estimate with the
        highest likelihood is kept and a ``ConvergenceWarning`` is issued).
    method_ : str
        The optimizer that produced the estimate (``"exact"`` when the fixed
        effects fit ``y`` exactly and every variance is 0).
    n_iter_ : int
        Optimizer iterations, summed over the methods run (0 for an exact fit).
    %(clients_)s
    %(features_in_)s

    See Also
    --------
    PooledEstimator : One model on the pooled rows, ignoring the groups.
    LocalEstimator : One model per client, sharing nothing.

    Notes
    -----
    ``X`` and ``y`` are standardized before statsmodels sees them (an exact
    reparametrization for an unstructured ``Sigma``) and every estimate is
    mapped back. The BLUPs are computed as
    ``(sigma^2 I + Sigma Z_g' Z_g)^-1 Sigma Z_g' r_g``, which equals
    statsmodels' ``MixedLMResults.random_effects`` and stays defined when
    ``Sigma`` is singular (a variance estimated at 0). A single client, or
    clients with one row, are valid: the variance components are then
    estimated poorly (often at 0) but the fit does not fail.

    References
    ----------
    N. M. Laird and J. H. Ware, "Random-effects models for longitudinal data",
    Biometrics 38(4), 1982.

    Examples
    --------
    >>> from skfed.baselines import MixedLMRegressor
    >>> from skfed.datasets import make_federated_regression
    >>> X, y, groups = make_federated_regression(n_clients=5, n_features=2, random_state=0)
    >>> model = MixedLMRegressor(random_slopes=[0]).fit(X, y, groups=groups)
    >>> model.random_effects_.shape
    (5, 2)
    >>> model.predict(X[:3], groups=groups[:3]).shape
    (3,)
    """

    def __init__(self, random_slopes=None, *, fit_intercept=True, reml=True,
                 method=("bfgs", "powell"), max_iter=200, unknown_client="global"):
        self.random_slopes = random_slopes
        self.fit_intercept = fit_intercept
        self.reml = reml
        self.method = method
        self.max_iter = max_iter
        self.unknown_client = unknown_client

    @classmethod
    def _test_instances(cls):
        """Instances for the common checks: random intercept, and random slopes on all."""
        return [cls(), cls(random_slopes="all")]

    def _check_params(self):
        check_unknown_client(self.unknown_client)
        for name in ("fit_intercept", "reml"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        methods = [self.method] if isinstance(self.method, str) else self.method
        try:
            methods = list(methods)
        except TypeError:
            methods = None
        if not methods or any(not isinstance(m, str) or m not in _METHODS for m in methods):
            raise ValueError(
                f"method must be one of {_METHODS} or a non-empty list of them, "
                f"got {self.method!r}."
            )
        return methods, check_positive_int(self.max_iter, "max_iter")

    def _resolve_slopes(self, n_features):
        return resolve_random_slopes(self.random_slopes, n_features,
                                     getattr(self, "feature_names_in_", None))

    @transactional_fit
    def fit(self, X, y, groups=None):
        """Fit the mixed model by (RE)ML on the rows of all clients.

        %(fit_sections)s
        """
        _import_statsmodels()
        methods, max_iter = self._check_params()
        X, y = validate_data(self, X, y, reset=True, y_numeric=True, dtype=np.float64)
        check_scale(X, "X")  # an overflowing sum of squares would give NaN predictions
        check_scale(y, "y")
        clients, client_index = check_groups(groups, X.shape[0])
        slopes = self._resolve_slopes(X.shape[1])
        fit = fit_mixedlm(X, y, client_index, len(clients), slopes,
                          fit_intercept=bool(self.fit_intercept), reml=bool(self.reml),
                          methods=methods, max_iter=max_iter)
        warn_collinear_slopes(fit)
        if not fit.converged:
            warnings.warn(
                f"MixedLM did not converge with methods {methods} in max_iter={max_iter} "
                "iterations each; the estimate with the highest likelihood is kept. "
                "Increase max_iter, try other methods or fewer random slopes.",
                ConvergenceWarning, stacklevel=user_stacklevel(),
            )
        self._set_mixed_fit(fit, fit.random_effects, clients)
        return self



