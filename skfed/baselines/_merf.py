"""MERF: mixed-effects random forest (package ``merf``), centralized."""

import contextlib
import copy
import logging

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import RandomForestRegressor

from ..base import FederatedEstimatorMixin, keyword_init
from ..utils._docstrings import fill_doc
from ..utils._validation import (
    check_n_jobs,
    check_param_grid,
    check_positive_int,
    check_unknown_client,
)
from ._random_effects import (
    ANCHOR_DEFAULTS,
    RandomEffectsMixin,
    check_cv,
    grid_points,
    import_optional,
    inner_folds,
    warn_untuned,
)

__all__ = ["MERFRegressor"]

#: forest parameters the inner CV chooses from
DEFAULT_MERF_GRID = {"min_samples_leaf": (1, 5, 20)}


def _merf():
    """The ``merf`` module, without the logging set-up its import does.

    ``import merf`` calls ``logging.basicConfig(level=INFO)``: from then on every
    library's INFO records (merf's own line per EM iteration among them) would be
    printed. The root logger's handlers and level are put back as they were.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    module = import_optional("merf", "MERFRegressor", "merf>=1.0")
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    return module


@contextlib.contextmanager
def _quiet_merf():
    """merf logs each EM iteration at INFO; keep a fit quiet whatever the logging set-up."""
    logger = logging.getLogger("merf")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with np.errstate(all="ignore"):  # log(0) of a zero variance in merf's GLL trace
            yield
    finally:
        logger.setLevel(level)


class _OrderedForest(RandomForestRegressor):
    """A random forest whose ``predict`` adds up its trees in their order.

    With ``n_jobs`` > 1 scikit-learn's ``predict`` adds the trees' predictions
    in the order its threads finish them, so the sums change in the last bits
    from run to run (merf's EM loop amplifies that to 1e-4). The trees
    themselves do not depend on ``n_jobs`` (each one has its own seed):
    fitted on ``n_jobs`` threads and predicted on one, the forest gives the
    same predictions, to the bit, for every ``n_jobs``.
    """

    def predict(self, X):
        forest = copy.copy(self)  # shares the trees; self is left as it is (threads)
        forest.n_jobs = 1
        return RandomForestRegressor.predict(forest, X)


@fill_doc
class MERFRegressor(RandomEffectsMixin, FederatedEstimatorMixin, RegressorMixin,
                    BaseEstimator):
    """Mixed-effects random forest: a random forest plus a random intercept (and slopes) per client.

    A centralized, non-federated anchor of the benchmark, fitted on the
    pooled rows like :class:`MixedLMRegressor`. For the rows of client ``g``

    .. math:: y = f(x) + z^\\top b_g + \\varepsilon, \\quad z = (1, x_S),
       \\quad b_g \\sim N(0, D),\\ \\varepsilon \\sim N(0, \\sigma^2),

    where ``f`` is a random forest, ``S`` are the ``random_slopes``
    features and ``D`` is an unstructured covariance. The ``merf`` package
    fits it by the EM algorithm of Hajjem, Bellavance and Larocque (2014):
    the forest is refitted to ``y - z' b_g`` at each of ``max_iterations``
    iterations, then ``b_g``, ``D`` and ``sigma^2`` are updated.

    The forest's parameters are tuned by an inner cross-validation on the
    training rows only: every combination of ``param_grid`` is fitted on the
    training folds and scored by the squared error of its predictions on the
    held-out rows (seen clients with their random effects); the best one is
    refitted on all rows. ``min_samples_leaf`` is the parameter that matters
    most: the EM step reads the random effects off the forest's residuals on
    its own training rows, which fully grown trees nearly interpolate.

    ``predict(X, groups)`` adds each seen client's ``z' b_g`` to ``f(x)``;
    rows with ``groups=None`` or a client not seen in ``fit`` (with
    ``unknown_client="global"``) get ``f(x)``, the population prediction (as
    merf's own ``predict`` does for a new cluster).

    Requires merf, of the ``bench`` extra (``python -m pip install -e ".[bench]"`` in the
    skfed clone).

    Parameters
    ----------
    random_slopes : None, "all" or list of int or str, default=None
        Features with a random slope next to the random intercept (the
        columns of ``z`` after the column of ones): ``None`` for a random
        intercept only, ``"all"``, or column indices or feature names (names
        need ``X`` with column names).
    n_estimators : int, default=100
        Trees of the forest.
    param_grid : dict or None, default=None
        :class:`~sklearn.ensemble.RandomForestRegressor` parameters and the
        values the inner CV tries (every combination); ``None`` for
        ``{"min_samples_leaf": [1, 5, 20]}``. An empty dict, or one value per
        entry, fits without the inner CV.
    max_iterations : int, default=10
        EM iterations (merf's default is 20; the variances and random effects
        change by less than 1% after the fifth on the benchmark's data sets,
        and each iteration is a forest fit).
    cv : int or cross-validation splitter, default=3
        The inner CV. An int is the number of folds of
        :class:`~skfed.model_selection.WithinClientKFold` (held-out rows of
        every client with at least ``cv`` rows, shuffled by ``random_state``);
        a splitter (e.g. ``GroupKFold(3)``, which holds out whole clients) is
        called as ``cv.split(X, y, client_index)``. When the rows cannot be
        split (no client with ``cv`` rows, fewer clients than folds), the fit
        warns and uses the first value of each grid entry.
    %(unknown_client_population)s
    random_state : int, RandomState instance or None, default=None
        Seeds the inner CV's shuffle and the forest's ``random_state``.
    n_jobs : int or None, default=None
        ``n_jobs`` of the forest's fits (``None`` means 1); it predicts on one
        thread, so the fit and the predictions are the same, to the bit, for
        every ``n_jobs``.

    Attributes
    ----------
    forest_ : sklearn.ensemble.RandomForestRegressor
        The fixed part ``f``, fitted to the standardized ``y`` (``predict``
        maps it back).
    best_params_ : dict
        The grid's combination chosen by the inner CV (the first one when it
        could not run).
    cv_score_ : float
        The inner CV's mean squared error of the best combination, in the
        units of ``y`` squared (NaN when it did not run).
    random_slopes_ : ndarray of shape (n_slopes,)
        Features with a random slope in the fitted model (requested slopes on
        constant or collinear columns are dropped with a warning).
    random_effects_ : ndarray of shape (n_clients, 1 + n_slopes)
        Each client's ``b_g``: the intercept, then the slopes of
        ``random_slopes_``; rows follow ``clients_``.
    random_effects_cov_ : ndarray of shape (1 + n_slopes, 1 + n_slopes)
        Estimated covariance ``D`` of the random effects.
    noise_variance_ : float
        Estimated residual variance ``sigma^2``.
    n_iter_ : int
        EM iterations run.
    %(clients_)s
    %(features_in_)s

    See Also
    --------
    MixedLMRegressor : The linear mixed model (statsmodels).
    GPBoostRegressor : Grouped random effects with tree boosting.

    Notes
    -----
    ``y`` is standardized before merf sees it (its EM starts at ``D = I``
    and ``sigma^2 = 1``, a start on the scale of a standardized ``y``) and
    every estimate is mapped back; the forest is equivariant to it. The
    random-slope columns of ``z`` are divided by their standard deviation
    (an exact reparametrization of ``b_g`` and ``D``).

    References
    ----------
    A. Hajjem, F. Bellavance and D. Larocque, "Mixed-effects random forest
    for clustered data", Journal of Statistical Computation and Simulation
    84(6), 2014.

    Examples
    --------
    >>> from skfed.baselines import MERFRegressor
    >>> from skfed.datasets import make_federated_regression
    >>> X, y, groups = make_federated_regression(n_clients=5, n_features=2, random_state=0)
    >>> model = MERFRegressor(n_estimators=20, param_grid={}, random_state=0)
    >>> model.fit(X, y, groups=groups).random_effects_.shape
    (5, 1)
    >>> model.predict(X[:3], groups=groups[:3]).shape
    (3,)
    """

    __init__ = keyword_init(
        dict(random_slopes=None, n_estimators=100, param_grid=None, max_iterations=10),
        ANCHOR_DEFAULTS, positional=1)

    @classmethod
    def _test_instances(cls):
        """Instance for the common checks: a small forest, one leaf size (no inner CV:
        tests/baselines/test_anchors.py covers the tuning; with it the checks took minutes),
        few iterations."""
        return [cls(n_estimators=5, param_grid={"min_samples_leaf": [5]},
                    max_iterations=2, random_slopes="all")]

    def _check_params(self):
        check_unknown_client(self.unknown_client)
        grid = check_param_grid(self.param_grid, DEFAULT_MERF_GRID)
        for reserved in ("n_estimators", "random_state", "n_jobs"):
            if reserved in grid:
                raise ValueError(f"param_grid may not set {reserved!r}: it is a parameter of "
                                 "MERFRegressor.")
        check_positive_int(self.n_estimators, "n_estimators")
        check_positive_int(self.max_iterations, "max_iterations")
        check_cv(self.cv)
        check_n_jobs(self.n_jobs)
        return grid

    def _fit_standardized(self, X, y, Z, client_index, n_clients, grid, cv_seed, seed):
        """Tune the forest by the inner CV, then fit it on all rows (``RandomEffectsMixin``)."""
        merf = _merf()
        Z = np.column_stack([np.ones(X.shape[0]), Z])

        def fit_one(params, rows):
            return self._fit_merf(merf, params, X[rows], Z[rows], y[rows],
                                  client_index[rows], seed)

        candidates = grid_points(grid)
        best, score = candidates[0], float("nan")
        if len(candidates) > 1:
            folds, reason = inner_folds(self.cv, X, y, client_index, cv_seed)
            if folds is None:
                warn_untuned("MERFRegressor", reason,
                             "with the first value of each param_grid entry")
            else:
                scores = [self._cv_error(fit_one, params, folds, X, Z, y, client_index)
                          for params in candidates]
                k = int(np.argmin(scores))
                best, score = candidates[k], scores[k]
        self.forest_, effects, self.random_effects_cov_, noise, self.n_iter_ = \
            fit_one(best, slice(None))
        self.best_params_ = dict(best)
        self.cv_score_ = score
        return effects, noise

    def _unscale(self, y_center, y_scale, unit):
        self.cv_score_ = float(self.cv_score_ * y_scale**2)
        self.random_effects_cov_ = y_scale**2 * self.random_effects_cov_ / np.outer(unit, unit)

    def _fit_merf(self, merf, params, X, Z, y, client_index, seed):
        """One merf fit: ``(forest, b per client (all clients; unseen 0), D, sigma^2, n_iter)``."""
        import pandas as pd

        forest = _OrderedForest(n_estimators=int(self.n_estimators), random_state=seed,
                                       n_jobs=self.n_jobs, **params)
        model = merf.MERF(fixed_effects_model=forest, max_iterations=int(self.max_iterations))
        # merf's clusters must be a pandas Series; client indices keep its labels simple
        with _quiet_merf():
            model.fit(X, Z, pd.Series(client_index), y)
        effects = np.zeros((int(client_index.max()) + 1 if client_index.size else 0, Z.shape[1]))
        trained = model.trained_b
        effects[trained.index.to_numpy(dtype=int)] = trained.to_numpy(dtype=float)
        cov = np.atleast_2d(np.asarray(model.D_hat_history[-1], dtype=float))
        return (model.trained_fe_model, effects, cov, float(model.sigma2_hat_history[-1]),
                len(model.gll_history))

    @staticmethod
    def _cv_error(fit_one, params, folds, X, Z, y, client_index):
        """Squared error over every held-out row of the folds (seen clients personalized)."""
        sse = n = 0.0
        for train, test in folds:
            forest, effects, _, _, _ = fit_one(params, train)
            pred = forest.predict(X[test])
            seen = np.isin(client_index[test], client_index[train])
            u = effects[client_index[test][seen]]
            pred[seen] += np.einsum("ij,ij->i", Z[test][seen], u)
            sse += float(np.sum((y[test] - pred) ** 2))
            n += test.size
        return sse / n

    def _fixed_part(self, X):
        return self._y_center + self._y_scale * self.forest_.predict(X)
