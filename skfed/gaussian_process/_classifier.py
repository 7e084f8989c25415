"""Classification by maximum predictive evidence (pFedHGP paper sec. 3.8.1)."""

import numpy as np
from scipy.linalg import cho_solve
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ..base import transactional_fit
from ..federated._engine import blas_threads
from ..utils._validation import check_scale, validate_data
from ._linalg import chol_jitter
from ._pfedhgp import PFedHGPRegressor

__all__ = ["PFedHGPClassifier"]


class PFedHGPClassifier(ClassifierMixin, BaseEstimator):
    """Classify whole trajectories by the class-client with the highest evidence.

    Each class is a client of a :class:`PFedHGPRegressor` (paper sec. 3.8.1):
    a row of ``X`` is one object, e.g. one press cycle, whose ``n_features``
    values are observations at the inputs ``input_grid`` (by default
    ``0, 1, ..., n_features - 1``). Training stacks each class's objects as
    replicates on that grid and fits the hierarchy with one client per class.
    A test object ``y*`` is scored under each class ``c`` by the Gaussian
    predictive log-density with the FULL covariance (eq. 31)::

        l_c = log N(y*; mu_c(grid), Sigma_c(grid))

    and assigned to ``argmax_c l_c`` (eq. 32; equal class priors).
    Because all objects share the grid, one Cholesky factorization per class
    serves every test object.

    Parameters
    ----------
    estimator : PFedHGPRegressor or None, default=None
        The regressor to clone. ``None`` uses ``PFedHGPRegressor(optimizer=
        "cavi", n_rounds=10, tol=None, server_lr=0.1, normalize_y=True,
        mean_function="constant", ard=False)`` (one lengthscale, as before
        the regressor's ARD default: the same model on the default
        one-column grid) with ``min(40, n_features)``
        global and ``min(20, n_features)`` local inducing inputs and initial
        lengthscales 0.1 (global) and 0.05 (local) times the grid's range.
        With ``normalize_X=False`` and no ``input_bounds`` (the default
        regressor too), ``input_bounds`` is set to the grid's range: the grid
        is public, so ``Z_g`` starts on it as before and no input sums are
        sent.
    input_grid : array-like of shape (n_features,) or (n_features, d), default=None
        The inputs at which every object is observed.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Sorted class labels; class ``classes_[c]`` is client ``c`` of
        ``estimator_``.
    estimator_ : PFedHGPRegressor
        The fitted regressor (its clients are the classes, in order).
    n_features_in_ : int
        Number of features seen in ``fit``: the points of ``input_grid``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in ``fit``, when ``X`` has string column names.

    Examples
    --------
    >>> from skfed.datasets import make_press_tonnage
    >>> from skfed.gaussian_process import PFedHGPClassifier
    >>> X, y, t = make_press_tonnage(n_cycles=(6, 6), n_points=15, random_state=0)
    >>> clf = PFedHGPClassifier(input_grid=t).fit(X, y)
    >>> clf.predict(X[:3]).tolist()
    [0, 0, 0]
    """

    def __init__(self, estimator=None, *, input_grid=None):
        self.estimator = estimator
        self.input_grid = input_grid

    def _grid(self, n_features):
        if self.input_grid is None:
            return np.arange(n_features, dtype=float)[:, None]
        try:
            grid = np.asarray(self.input_grid)
            if np.iscomplexobj(grid):
                raise TypeError("complex values")
            grid = np.asarray(grid, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"input_grid must be an array of real numbers ({exc}).") from None
        if grid.ndim == 1:
            grid = grid[:, None]
        if grid.ndim != 2 or grid.shape[0] != n_features or not np.all(np.isfinite(grid)):
            raise ValueError(
                f"input_grid must be finite with {n_features} rows (one per feature of X), "
                f"got shape {grid.shape}."
            )
        return grid

    @transactional_fit
    def fit(self, X, y):
        """Fit the class-client hierarchy.

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)
            One object (trajectory) per row.
        y : array-like of shape (n_objects,)
            Class of each object.

        Returns
        -------
        self : PFedHGPClassifier
        """
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_scale(X, "X")  # X is the inner regressor's y: name it here
        check_classification_targets(y)
        self.classes_, yi = np.unique(y, return_inverse=True)
        grid = self._grid(X.shape[1])
        reps = int(np.bincount(yi).max())  # the largest class's rows of the stacked grid
        for col in grid.T:  # as the regressor's check of a client's X column, named here
            check_scale(np.tile(col, reps), "input_grid")
        if self.estimator is None:
            m = X.shape[1]
            span = float(np.mean(np.ptp(grid, axis=0))) or 1.0
            # tol, server_lr and init_variance_local as before the real-data defaults
            # (not measured here)
            # the variational fit: client_dissimilarity needs each client's own kernels
            est = PFedHGPRegressor(inference="variational", optimizer="cavi", n_rounds=10,
                                   tol=None, server_lr=0.1, init_variance_local=1.0,
                                   normalize_y=True, mean_function="constant", ard=False,
                                   n_inducing_global=min(40, m), n_inducing_local=min(20, m),
                                   init_lengthscale_global=0.1 * span,
                                   init_lengthscale_local=0.05 * span, random_state=0,
                                   normalize_X=False)  # lengthscales in units of the grid
        elif isinstance(self.estimator, PFedHGPRegressor):
            est = clone(self.estimator)
        else:
            raise ValueError(
                f"estimator must be a PFedHGPRegressor or None, got {self.estimator!r}.")
        if not est.normalize_X and est.input_bounds is None:
            # the grid is public: Z_g starts on its range, nothing about it need be sent
            est.set_params(input_bounds=(grid.min(axis=0), grid.max(axis=0)))
        Xr = np.tile(grid, (X.shape[0], 1))
        yr = X.ravel()
        groups = np.repeat(yi, X.shape[1])
        self.estimator_ = est.fit(Xr, yr, groups=groups)
        self._grid_ = grid
        return self

    def predict_log_likelihood(self, X):
        """Predictive log-density of each object under each class (eq. 31).

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)

        Returns
        -------
        loglik : ndarray of shape (n_objects, n_classes)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        check_scale(X, "X")  # as fit: such rows give NaN probabilities
        out = np.empty((X.shape[0], len(self.classes_)))
        with blas_threads(1):  # as the regressor's predict: the same bits beside threaded fits
            for c in range(len(self.classes_)):
                out[:, c] = self._class_log_likelihood(X, c)
        return out

    def _class_log_likelihood(self, X, c):
        """Log-density of each object under class ``c``: class ``c`` is client ``c`` of the
        regressor, its joint predictive over the grid, factored on the normalized scale
        (where the jitter is set)."""
        est = self.estimator_
        m = self._grid_.shape[0]
        mean, cov = est.predict(self._grid_, groups=np.full(m, c), return_cov=True)
        L, _ = chol_jitter(cov / est.y_std_**2, est.jitter)
        R = (X - mean) / est.y_std_
        quad = np.sum(R * cho_solve((L, True), R.T).T, axis=1)
        logdet = 2 * np.sum(np.log(np.diag(L))) + 2 * m * np.log(est.y_std_)
        return -0.5 * (quad + logdet + m * np.log(2 * np.pi))

    def predict_proba(self, X):
        """Softmax of the class log-likelihoods (equal priors).

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)

        Returns
        -------
        proba : ndarray of shape (n_objects, n_classes)
        """
        ll = self.predict_log_likelihood(X)
        return np.exp(ll - logsumexp(ll, axis=1, keepdims=True))

    def predict(self, X):
        """The class with the highest predictive evidence (eq. 32).

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_objects,)
        """
        ll = self.predict_log_likelihood(X)
        return self.classes_[np.argmax(ll, axis=1)]
