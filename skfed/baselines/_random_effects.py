"""What the benchmark's mixed-effects anchors (GPBoost, MERF) share.

Both are centralized models ``y = f(x) + u_g0 + x_S' u_gS + noise`` with a
fixed part ``f`` (trees, a forest or a line) and per-client random effects.
This module holds their common pieces: the lazy import of the optional
package, the standardization around it, the inner cross-validation folds of
their tuning, and :class:`RandomEffectsMixin` (``fit`` around their own fit
on standardized rows, and ``predict``: the fixed part plus each seen client's
effects).
"""

import numbers
import warnings

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..base import check_on_site, transactional_fit
from ..utils._docstrings import fill_doc
from ..utils._threads import quiet_warnings
from ..utils._validation import (
    check_groups, check_scale, install_hint, user_stacklevel, validate_data,
)

__all__ = ["ANCHOR_DEFAULTS", "RandomEffectsMixin", "RandomEffectsPredictMixin", "check_cv",
           "grid_points", "import_optional", "inner_folds", "location_scale",
           "standardized_problem", "warn_untuned"]

#: The defaults of the options both anchors take (``skfed.base.keyword_init``).
ANCHOR_DEFAULTS = dict(cv=3, unknown_client="global", random_state=None, n_jobs=None)


def import_optional(module, estimator, requirement):
    """Import ``module`` (a package of the ``bench`` extra) or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f'{estimator} needs {requirement}: {install_hint("bench")}, or pip install '
            f'"{requirement}".'
        ) from None


def location_scale(A):
    """Column means and root-mean-square deviations of ``A`` (a scale of 0 becomes 1).

    The deviations are divided by their largest absolute value before they
    are squared, so that tiny values (1e-300) do not underflow to a zero scale.
    """
    A = np.asarray(A, dtype=float)
    center = A.mean(axis=0)
    dev = A - center
    peak = np.max(np.abs(dev), axis=0) if dev.size else np.zeros(np.shape(center))
    safe = np.where(peak > 0, peak, 1.0)
    scale = peak * np.sqrt(np.mean((dev / safe) ** 2, axis=0))
    scale = np.where(scale > 0, scale, 1.0)
    return center, scale


def standardized_problem(estimator, X, y, groups):
    """What both anchors' ``fit`` starts with: the checked rows, the clients, the kept
    random-slope columns and the scalings.

    Returns ``(X, y, clients, client_index, kept, y_center, y_scale, z_scale)``:
    ``kept`` are the ``random_slopes`` columns that are not the intercept again (a
    constant column, or a combination of the intercept and the other slope columns,
    whose variance neither package can separate; a warning names the dropped ones),
    ``z_scale`` their scales (:func:`location_scale`).
    """
    from ._mixedlm import resolve_random_slopes
    from ._mixedlm_core import independent_columns

    X, y = validate_data(estimator, X, y, reset=True, y_numeric=True, dtype=np.float64)
    check_scale(X, "X")
    check_scale(y, "y")
    clients, client_index = check_groups(groups, X.shape[0])
    slopes = resolve_random_slopes(estimator.random_slopes, X.shape[1],
                                   getattr(estimator, "feature_names_in_", None))
    kept = slopes[independent_columns(X[:, slopes], first=np.ones(X.shape[0]))]
    if kept.size < slopes.size:
        warnings.warn(
            f"random slopes on features {sorted(set(slopes.tolist()) - set(kept.tolist()))} "
            "were dropped: those columns are constant or linear combinations of the "
            "intercept and the other random-slope columns.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    y_center, y_scale = location_scale(y)
    z_scale = location_scale(X[:, kept])[1]
    return X, y, clients, client_index, kept, y_center, y_scale, z_scale


def check_cv(cv):
    """``cv`` is an int >= 2 (within-client folds) or a splitter with ``split``."""
    if isinstance(cv, numbers.Integral) and not isinstance(cv, (bool, np.bool_)):
        if cv < 2:
            raise ValueError(f"cv must be an integer >= 2 or a splitter, got {cv!r}.")
        return
    if isinstance(cv, str) or not hasattr(cv, "split"):  # a str has a split method too
        raise ValueError(
            f"cv must be an integer >= 2 or a cross-validation splitter with a split "
            f"method (e.g. GroupKFold), got {cv!r}."
        )


def grid_points(grid):
    """Every combination of a ``{name: values}`` grid, the first values first."""
    import itertools

    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*grid.values())]


def inner_folds(cv, X, y, client_index, seed):
    """The inner-CV folds of the training rows, or ``None`` with the reason.

    An int ``cv`` splits within each client
    (:class:`~skfed.model_selection.WithinClientKFold`, shuffled by ``seed``):
    held-out rows of seen clients, as the seen-site protocol predicts them. A
    splitter is called as ``cv.split(X, y, client_index)``; ``GroupKFold``
    holds out whole clients, as the new-site protocol does. A split that
    raises ``ValueError`` (no client with ``cv`` rows, fewer clients than
    folds) or gives fewer than two folds with training and test rows is no
    split: the caller fits without tuning.
    """
    from ..model_selection import WithinClientKFold

    if isinstance(cv, numbers.Integral):
        cv = WithinClientKFold(int(cv), small_clients="train", shuffle=True, random_state=seed)
    try:
        with quiet_warnings():  # the splitter's notes (e.g. small clients): the fit says why
            folds = [(np.sort(np.asarray(tr)), np.sort(np.asarray(te)))
                     for tr, te in cv.split(X, y, client_index)]
    except ValueError as exc:
        return None, str(exc)
    folds = [(tr, te) for tr, te in folds if tr.size and te.size]
    if len(folds) < 2:
        return None, "fewer than two folds with both training and test rows"
    return folds, ""


def warn_untuned(estimator, reason, fallback):
    """Say that ``fit`` could not tune (``reason``) and what it fitted instead."""
    warnings.warn(
        f"{estimator}: the training rows cannot be split for the inner cross-validation "
        f"({reason}); fitted without tuning, {fallback}.",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


@fill_doc
class RandomEffectsPredictMixin:
    """``predict``: the fixed part plus each seen client's random intercept and slopes.

    Reads ``random_slopes_``, ``random_effects_`` (one row per client of
    ``clients_``: the intercept, then the slopes; ``None`` after a
    distributed fit, where they stay on the sites) and calls
    ``self._fixed_part(X)``.
    """

    def predict(self, X, groups=None):
        """Predict with the fixed part plus each seen client's random effects.

        Parameters
        ----------
        %(X_predict)s
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` asks for the population
            prediction (the fixed part only), as do clients not seen in
            ``fit`` (with ``unknown_client="global"``).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Predictions.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        index = self._client_index(groups, X.shape[0])
        # after a distributed fit (random_effects_ None) the effects stay on the sites
        check_on_site(index, self.clients_, self.random_effects_ is None)
        y_pred = np.asarray(self._fixed_part(X), dtype=np.float64).copy()
        seen = np.flatnonzero(index >= 0)
        if seen.size:
            u = self.random_effects_[index[seen]]
            y_pred[seen] += u[:, 0] + np.einsum(
                "ij,ij->i", X[np.ix_(seen, self.random_slopes_)], u[:, 1:]
            )
        return y_pred


@fill_doc
class RandomEffectsMixin(RandomEffectsPredictMixin):
    """``fit`` of the anchors (a fixed part plus per-client random effects), and ``predict``.

    ``fit`` checks the parameters (``self._check_params()`` returns the
    tuning grid), standardizes the rows (:func:`standardized_problem`), draws
    the inner-CV and model seeds from ``random_state`` and calls
    ``self._fit_standardized(X, y, Z, client_index, n_clients, grid, cv_seed,
    seed)`` on the standardized ``y`` and random-slope columns ``Z``; that
    returns the random effects (one row per client: the intercept, then the
    slopes) and the noise variance, and ``self._unscale(y_center, y_scale,
    unit)`` maps the estimator's own attributes back to the units of ``y``.
    """

    @transactional_fit
    def fit(self, X, y, groups=None):
        """Fit the fixed part and each client's random effects on the rows of all clients.

        %(fit_sections)s
        """
        grid = self._check_params()
        X, y, clients, client_index, kept, y_center, y_scale, z_scale = \
            standardized_problem(self, X, y, groups)
        rng = check_random_state(self.random_state)
        cv_seed, seed = (int(s) for s in rng.randint(0, 2**31 - 1, size=2))
        effects, noise = self._fit_standardized(
            X, (y - y_center) / y_scale, X[:, kept] / z_scale, client_index, clients.size,
            grid, cv_seed, seed)
        # back to the units of y and of the random-slope columns
        unit = np.concatenate([[1.0], z_scale])
        self._y_center, self._y_scale = float(y_center), float(y_scale)
        self.random_slopes_ = kept
        self.random_effects_ = y_scale * effects / unit
        self.noise_variance_ = float(y_scale**2 * noise)
        self.clients_ = clients
        self._unscale(y_center, y_scale, unit)
        return self
