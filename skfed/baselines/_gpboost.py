"""GPBoost: grouped random effects with tree boosting, or its linear mixed model (centralized)."""

import contextlib
import difflib
import io
import math
import numbers
import re
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from ..base import FederatedEstimatorMixin, keyword_init
from ..utils._docstrings import fill_doc
from ..utils._threads import redirect_stdout
from ..utils._validation import (
    check_n_jobs,
    check_param_grid,
    check_positive_int,
    check_unknown_client,
    user_stacklevel,
)
from ._mixedlm_core import independent_columns
from ._random_effects import (
    ANCHOR_DEFAULTS,
    RandomEffectsMixin,
    check_cv,
    import_optional,
    inner_folds,
    location_scale,
    warn_untuned,
)

__all__ = ["GPBoostRegressor"]

_KINDS = ("trees", "linear")
#: boosting parameters the inner CV chooses from (with the number of rounds)
DEFAULT_GPBOOST_GRID = {"learning_rate": (0.05, 0.1), "max_depth": (2, 4, 6),
                        "min_data_in_leaf": (5, 20)}
# rounds of an untuned fit (too few rows for the inner CV): gpboost's own default
_UNTUNED_ROUNDS = 100
# residual variance below this fraction of Var(y): an exact fit, no noise left
# (gpboost's likelihood is NaN there: it refuses the data)
_EXACT_FIT_TOL = 1e-12


def _gpboost():
    return import_optional("gpboost", "GPBoostRegressor", "gpboost>=1.6.1")


def _log_to_python(gpb):
    """Send the native library's messages of this thread through Python's ``print``.

    gpboost registers its log callback when imported, and the native library
    (like LightGBM's) keeps the callback per thread: on any other thread (a
    fit under joblib's threading backend) its messages would go straight to
    the C-level stdout, past ``sys.stdout`` and the redirection that turns its
    warnings into Python warnings. Registering it again here covers this thread.
    """
    lib = getattr(gpb.basic, "_LIB", None)
    callback = getattr(lib, "callback", None)
    if callback is not None:
        lib.LGBM_RegisterLogCallback(callback)


# the learning rate under its names in gpboost (its native library's aliases)
_LEARNING_RATES = ("learning_rate", "shrinkage_rate", "eta")
# boosting parameters the inner CV may tune (those of gpboost's own tuner, and bagging_freq),
# named when a param_grid key is unknown; any other gpboost parameter is accepted too
_TUNABLE = ("learning_rate", "max_depth", "min_data_in_leaf", "num_leaves",
            "min_sum_hessian_in_leaf", "min_gain_to_split", "lambda_l1", "lambda_l2",
            "bagging_fraction", "bagging_freq", "feature_fraction", "max_bin", "cat_l2",
            "cat_smooth", "line_search_step_length")


def _check_learning_rates(grid):
    """Refuse a learning rate gpboost would refuse (the grid search skips such
    combinations, and with none left says only "Did not find any valid parameter
    combination")."""
    for key in _LEARNING_RATES:
        for value in grid.get(key, ()):
            if (not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_))
                    or not math.isfinite(value) or value <= 0):
                raise ValueError(
                    f"param_grid[{key!r}] values must be finite numbers > 0, got {value!r}.")


def _check_param_names(grid):
    """Refuse ``param_grid`` keys that gpboost does not know.

    gpboost's native library warns about an unknown parameter and ignores it:
    a typo would silently tune nothing (and replace the default grid). A small
    dataset built with the grid's first values shows which names it does not
    know; values it refuses are left to the fit.
    """
    gpb = _gpboost()
    # a verbosity in the grid could hide the warnings: it is a known name anyway
    probe = {key: next((v for v in values if v is not None), "0")
             for key, values in grid.items() if key not in ("verbose", "verbosity")}
    if not probe:
        return
    printed = io.StringIO()
    _log_to_python(gpb)
    with redirect_stdout(printed):
        with contextlib.suppress(gpb.basic.GPBoostError, TypeError, ValueError):
            gpb.Dataset(np.arange(4.0)[:, None], label=np.arange(4.0),
                        params={**probe, "verbose": 0}).construct()
    unknown = [key for key in probe
               if re.search(rf"Unknown parameter: {re.escape(key)}$", printed.getvalue(),
                            re.MULTILINE)]
    if unknown:
        hints = [f"{key!r} (did you mean {close[0]!r}?)"
                 if (close := difflib.get_close_matches(key, _TUNABLE, n=1)) else repr(key)
                 for key in unknown]
        raise ValueError(
            f"param_grid has keys that are not gpboost parameters: {', '.join(hints)}. Its "
            f"keys must be gpboost's boosting parameters (or their aliases), e.g. "
            f"{', '.join(_TUNABLE)}."
        )


@contextlib.contextmanager
def _gpboost_messages():
    """Collect gpboost's printed warnings (the list yielded); drop its notes.

    gpboost writes the messages of its native library with ``print``: a fit
    should not print, but a warning (an optimizer that stopped early) should
    still reach the user, as a Python warning that can be filtered. The
    redirection holds skfed's lock of ``sys.stdout`` (fits on threads take
    turns), so each fit restores the ``sys.stdout`` it found and collects its
    own messages.
    """
    buffer, found = io.StringIO(), []
    _log_to_python(_gpboost())
    try:
        with redirect_stdout(buffer):
            yield found
    finally:
        found += [line.split("[Warning]", 1)[1].strip()
                  for line in buffer.getvalue().splitlines() if "[Warning]" in line]


def _as_python(value):
    return value.item() if isinstance(value, np.generic) else value


@fill_doc
class GPBoostRegressor(RandomEffectsMixin, FederatedEstimatorMixin, RegressorMixin,
                       BaseEstimator):
    """GPBoost: a random intercept (and slopes) per client with a boosted or linear fixed part.

    A centralized, non-federated anchor of the benchmark, fitted on the
    pooled rows like :class:`MixedLMRegressor`. For the rows of client ``g``

    .. math:: y = F(x) + u_{g0} + x_S^\\top u_{gS} + \\varepsilon,
       \\quad u_{g0} \\sim N(0, \\sigma_0^2),\\ u_{gj} \\sim N(0, \\sigma_j^2),\\
       \\varepsilon \\sim N(0, \\sigma^2),

    with independent random effects (no covariance between the intercept
    and the slopes, unlike :class:`MixedLMRegressor`), where ``S`` are the
    ``random_slopes`` features. ``kind="trees"`` learns ``F`` by gradient
    tree boosting jointly with the variances (the GPBoost algorithm of
    Sigrist, 2022); ``kind="linear"`` is the linear mixed model
    ``F(x) = beta_0 + x' beta``, whose variances gpboost estimates by maximum
    likelihood (it has no REML).

    ``kind="trees"`` tunes its boosting by an inner cross-validation on the
    training rows only: every combination of ``param_grid`` is scored by
    gpboost's ``grid_search_tune_parameters`` (the mean squared error on the
    held-out rows, predicted with the random effects of seen clients), each
    run stopped early after ``early_stopping_rounds`` rounds without
    improvement; the best combination is refitted on all rows with its best
    number of rounds. ``kind="linear"`` has nothing to tune.

    ``predict(X, groups)`` adds each seen client's posterior mean random
    effects to ``F(x)``; rows with ``groups=None`` or a client not seen in
    ``fit`` (with ``unknown_client="global"``) get ``F(x)``, the population
    prediction (gpboost's own prediction for a new group level).

    Requires gpboost, of the ``bench`` extra (``python -m pip install -e ".[bench]"`` in
    the skfed clone).

    Parameters
    ----------
    kind : {"trees", "linear"}, default="trees"
        The fixed part: boosted trees, or a linear function with an intercept.
    random_slopes : None, "all" or list of int or str, default=None
        Features with a random slope next to the random intercept: ``None``
        for a random intercept only, ``"all"``, or column indices or feature
        names (names need ``X`` with column names).
    param_grid : dict or None, default=None
        ``kind="trees"``: gpboost boosting parameters and the values the inner
        CV tries (every combination); ``None`` for
        ``{"learning_rate": [0.05, 0.1], "max_depth": [2, 4, 6],
        "min_data_in_leaf": [5, 20]}``. A name gpboost does not know (it would
        ignore it) is an error.
    n_estimators : int, default=1000
        ``kind="trees"``: most boosting rounds; the inner CV stops each run
        early, and the refit uses the best run's number of rounds.
    early_stopping_rounds : int, default=20
        ``kind="trees"``: rounds without a lower held-out error after which a
        run of the inner CV stops.
    cv : int or cross-validation splitter, default=3
        ``kind="trees"``: the inner CV. An int is the number of folds of
        :class:`~skfed.model_selection.WithinClientKFold` (held-out rows of
        every client with at least ``cv`` rows, shuffled by ``random_state``);
        a splitter (e.g. ``GroupKFold(3)``, which holds out whole clients) is
        called as ``cv.split(X, y, client_index)``. When the rows cannot be
        split (no client with ``cv`` rows, fewer clients than folds), the fit
        warns and uses the first value of each grid entry with 100 rounds.
    %(unknown_client_population)s
    random_state : int, RandomState instance or None, default=None
        Seeds the inner CV's shuffle and gpboost's ``seed`` (of the booster
        and of the ``GPModel``).
    n_jobs : int or None, default=None
        Threads of gpboost (``num_threads`` of the booster and
        ``num_parallel_threads`` of the ``GPModel``); ``None`` means 1 and
        ``-1`` every core, as in scikit-learn (gpboost's own default is every
        core, which on a shared machine makes its many small steps wait on
        each other). A fit is
        reproducible for a given ``n_jobs``; gpboost's sums over threads make
        fits with different ``n_jobs`` differ in the last bits (about 1e-15).

    Attributes
    ----------
    booster_ : gpboost.Booster or None
        ``kind="trees"``: the refitted booster, whose trees are the fixed part
        ``F`` fitted to the standardized ``y`` (``predict`` maps it back);
        ``None`` when ``y`` is constant.
    best_params_ : dict
        ``kind="trees"``: the grid's combination chosen by the inner CV (the
        first one when it could not run).
    n_estimators_ : int
        ``kind="trees"``: boosting rounds of the refit.
    cv_score_ : float
        ``kind="trees"``: the inner CV's mean squared error of the best
        combination, in the units of ``y`` squared (NaN when it could not run).
    coef_ : ndarray of shape (n_features,)
        ``kind="linear"``: fixed-effect coefficients (0 for constant or
        collinear columns, which are dropped before fitting).
    intercept_ : float
        ``kind="linear"``: fixed intercept.
    random_slopes_ : ndarray of shape (n_slopes,)
        Features with a random slope in the fitted model (requested slopes on
        constant or collinear columns are dropped with a warning).
    random_effects_ : ndarray of shape (n_clients, 1 + n_slopes)
        Posterior mean random effects of each client: the intercept, then the
        slopes of ``random_slopes_``; rows follow ``clients_``.
    random_effects_var_ : ndarray of shape (1 + n_slopes,)
        Estimated variances of the random intercept and slopes.
    noise_variance_ : float
        Estimated residual variance.
    %(clients_)s
    %(features_in_)s

    See Also
    --------
    MixedLMRegressor : The linear mixed model by REML (statsmodels), correlated effects.
    MERFRegressor : Mixed-effects random forest.

    Notes
    -----
    ``y`` is standardized before gpboost sees it and every estimate is
    mapped back: gpboost's boosting steps are in units of the inverse
    variance, so on raw units with a large variance (sleepstudy's is about
    3,000) the trees barely move from the mean in hundreds of rounds. The
    random-slope columns are divided by their standard deviation (not
    centred: with independent effects, centring would change the model).
    ``y`` that the fixed part fits exactly (a constant ``y`` for the trees,
    a linear one for the linear model) is fitted without gpboost, whose
    likelihood is undefined there, with zero random effects and noise.

    References
    ----------
    F. Sigrist, "Gaussian process boosting", Journal of Machine Learning
    Research 23(232), 2022.

    Examples
    --------
    >>> from skfed.baselines import GPBoostRegressor
    >>> from skfed.datasets import make_federated_regression
    >>> X, y, groups = make_federated_regression(n_clients=5, n_features=2, random_state=0)
    >>> model = GPBoostRegressor(kind="linear").fit(X, y, groups=groups)
    >>> model.random_effects_.shape
    (5, 1)
    >>> model.predict(X[:3], groups=groups[:3]).shape
    (3,)
    """

    __init__ = keyword_init(
        dict(kind="trees", random_slopes=None, param_grid=None, n_estimators=1000,
             early_stopping_rounds=20), ANCHOR_DEFAULTS, positional=2)

    @classmethod
    def _test_instances(cls):
        """Instances for the common checks: small trees grid, and the linear model."""
        return [cls(param_grid={"learning_rate": [0.1], "max_depth": [2, 4]}, n_estimators=200),
                cls(kind="linear", random_slopes="all")]

    def _check_params(self):
        if not isinstance(self.kind, str) or self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {self.kind!r}.")
        check_unknown_client(self.unknown_client)
        grid = check_param_grid(self.param_grid, DEFAULT_GPBOOST_GRID)
        for reserved in ("num_boost_round", "num_iterations", "n_estimators",
                         "early_stopping_round", "early_stopping_rounds", "metric"):
            if reserved in grid:
                raise ValueError(
                    f"param_grid may not set {reserved!r}: the number of rounds is chosen by "
                    "early stopping (n_estimators, early_stopping_rounds), on the squared error."
                )
        _check_learning_rates(grid)
        check_positive_int(self.n_estimators, "n_estimators")
        check_positive_int(self.early_stopping_rounds, "early_stopping_rounds")
        check_cv(self.cv)
        check_n_jobs(self.n_jobs)
        if self.param_grid is not None:  # the default grid's names are known
            _check_param_names(grid)
        return grid

    def _fit_standardized(self, X, y, Z, client_index, n_clients, grid, cv_seed, seed):
        """The fit on standardized ``y`` and ``Z`` (see ``RandomEffectsMixin``)."""
        problem = _Problem(
            gpb=_gpboost(), X=X, y=y, client_index=client_index, n_clients=n_clients, Z=Z,
            seed=seed, threads=check_n_jobs(self.n_jobs))
        with _gpboost_messages() as messages:
            if self.kind == "linear":
                effects, variances = self._fit_linear(problem)
            else:
                effects, variances = self._fit_trees(problem, grid, cv_seed)
        for message in dict.fromkeys(messages):  # once each: the inner CV repeats them
            warnings.warn(f"gpboost: {message}", UserWarning, stacklevel=user_stacklevel())
        self.random_effects_var_ = variances[1:]
        return effects, variances[0]

    def _unscale(self, y_center, y_scale, unit):
        if self.kind == "linear":
            self.coef_ = y_scale * self.coef_
            self.intercept_ = float(y_center + y_scale * self.intercept_)
        else:
            self.cv_score_ = float(self.cv_score_ * y_scale**2)
        self.random_effects_var_ = y_scale**2 * self.random_effects_var_ / unit**2

    def _fit_linear(self, pb):
        """The linear mixed model on standardized columns.

        Sets ``coef_`` and ``intercept_`` in units of the standardized ``y`` (``fit``
        rescales them); returns the random effects and the variances (noise first).
        """
        n, p = pb.X.shape
        x_center, x_scale = location_scale(pb.X)
        Xs = (pb.X - x_center) / x_scale
        # gpboost needs a full-rank design: constant and collinear columns get 0, as in R
        keep = independent_columns(Xs, first=np.ones(n))
        design = np.column_stack([np.ones(n), Xs[:, keep]])
        beta, *_ = np.linalg.lstsq(design, pb.y, rcond=None)
        if np.mean((pb.y - design @ beta) ** 2) <= _EXACT_FIT_TOL:
            effects, variances = pb.zero_effects()
        else:
            model = pb.gp_model()
            model.fit(y=pb.y, X=design, params={"trace": False})
            beta = np.asarray(model.get_coef(), dtype=float).ravel()[:design.shape[1]]
            variances = pb.variances(model)
            effects = pb.posterior_effects(lambda groups, Z: model.predict(
                X_pred=np.zeros((groups.size, design.shape[1])), group_data_pred=groups,
                group_rand_coef_data_pred=Z, predict_var=False)["mu"])
        coef = np.zeros(p)
        coef[keep] = beta[1:] / x_scale[keep]
        self.coef_ = coef
        self.intercept_ = float(beta[0] - coef @ x_center)
        return effects, variances

    def _fit_trees(self, pb, grid, cv_seed):
        """Tune by the inner CV, refit with the best number of rounds.

        Sets ``booster_``, ``best_params_``, ``n_estimators_`` and ``cv_score_`` (in
        standardized units); returns the random effects and the variances (noise first).
        """
        gpb = pb.gpb
        first = {key: _as_python(values[0]) for key, values in grid.items()}
        params = {"verbose": -1, "seed": pb.seed, "num_threads": pb.threads}
        if np.all(pb.y == pb.y[0]):  # constant y: the trees are that constant
            self.booster_, self.best_params_, self.n_estimators_ = None, first, 0
            self.cv_score_ = float("nan")
            return pb.zero_effects()
        folds, reason = inner_folds(self.cv, pb.X, pb.y, pb.client_index, cv_seed)
        if folds is None:
            warn_untuned("GPBoostRegressor", reason,
                         f"with the first value of each param_grid entry and "
                         f"{_UNTUNED_ROUNDS} rounds")
            best, rounds = first, min(_UNTUNED_ROUNDS, int(self.n_estimators))
            score = float("nan")
        else:
            found = gpb.grid_search_tune_parameters(
                param_grid=grid, train_set=pb.dataset(), gp_model=pb.gp_model(),
                params=params, folds=folds, num_boost_round=int(self.n_estimators),
                early_stopping_rounds=int(self.early_stopping_rounds), metric="mse",
                verbose_eval=0, seed=cv_seed)
            best = {key: _as_python(value) for key, value in found["best_params"].items()}
            rounds, score = int(found["best_iter"]), float(found["best_score"])
        model = pb.gp_model()
        booster = gpb.train(params={**params, **best}, train_set=pb.dataset(),
                            gp_model=model, num_boost_round=rounds)
        self.booster_, self.best_params_, self.n_estimators_ = booster, best, rounds
        self.cv_score_ = score
        effects = pb.posterior_effects(lambda groups, Z: booster.predict(
            data=np.zeros((groups.size, pb.X.shape[1])), group_data_pred=groups,
            group_rand_coef_data_pred=Z, predict_var=False,
            pred_latent=True)["random_effect_mean"])
        return effects, pb.variances(model)

    def _fixed_part(self, X):
        if self.kind == "linear":
            return X @ self.coef_ + self.intercept_
        if self.booster_ is None:  # fitted on a constant y
            return np.full(X.shape[0], self._y_center)
        trees = self.booster_.predict(data=X, ignore_gp_model=True, pred_latent=True)
        return self._y_center + self._y_scale * np.asarray(trees, dtype=np.float64)


class _Problem:
    """One standardized fit: the data gpboost sees and how to build its pieces."""

    def __init__(self, gpb, X, y, client_index, n_clients, Z, seed, threads):
        self.gpb, self.X, self.y, self.client_index = gpb, X, y, client_index
        self.n_clients, self.Z, self.seed, self.threads = n_clients, Z, seed, threads

    @property
    def n_effects(self):
        return 1 + self.Z.shape[1]

    def gp_model(self):
        slopes = {}
        if self.Z.shape[1]:
            slopes = {"group_rand_coef_data": self.Z,
                      "ind_effect_group_rand_coef": [1] * self.Z.shape[1]}
        # Cholesky: exact. gpboost's default for random slopes is its iterative (stochastic)
        # solvers, whose predictions change from one call to the next (by 1% on 100 rows)
        return self.gpb.GPModel(group_data=self.client_index, likelihood="gaussian",
                                matrix_inversion_method="cholesky",
                                num_parallel_threads=self.threads, seed=self.seed, **slopes)

    def dataset(self):
        return self.gpb.Dataset(self.X, self.y, free_raw_data=False, params={"verbose": -1})

    def zero_effects(self):
        """An exact fit: no random effects, no noise."""
        return np.zeros((self.n_clients, self.n_effects)), np.zeros(1 + self.n_effects)

    def variances(self, model):
        """Noise, random intercept and random slope variances of a fitted ``GPModel``."""
        return np.asarray(model.get_cov_pars(), dtype=float).ravel()[:1 + self.n_effects]

    def posterior_effects(self, predict_effect):
        """Each client's posterior mean effects from gpboost's prediction of the random part.

        ``predict_effect(groups, Z)`` is the predicted random part at client labels
        ``groups`` and random-slope columns ``Z``: at ``Z = 0`` the intercept, at the
        unit vector ``e_j`` the intercept plus slope ``j``.
        """
        q, s = self.n_effects, self.Z.shape[1]
        groups = np.repeat(np.arange(self.n_clients), q)
        Z = np.tile(np.vstack([np.zeros((1, s)), np.eye(s)]), (self.n_clients, 1))
        values = np.asarray(predict_effect(groups, Z if s else None), dtype=float)
        effects = values.reshape(self.n_clients, q)
        effects[:, 1:] -= effects[:, :1]
        return effects
