"""Row-norm bounding for differentially private estimators."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sklearn.utils.validation import check_is_fitted

from ..utils._validation import validate_data

__all__ = ["NormClipper", "make_minmax_l2_pipeline"]


class NormClipper(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Bound every row's l2 norm by ``max_norm``: ``x / max(1, ||x|| / max_norm)``.

    Norms are computed on each row divided by its largest absolute entry,
    so rows with huge (``1e300``) or tiny (``1e-300``) finite entries are
    scaled right instead of overflowing to 0 or underflowing to no change.

    A stateless, data-independent transform (``fit`` learns nothing from the
    rows), so it does not consume privacy budget. It enforces the assumption
    ``||x||_2 <= L`` on which the sensitivities of private estimators such as
    :class:`skfed.DPFedDROClassifier` rest. With ``mode="normalize"`` every
    row is scaled to norm exactly ``max_norm`` (zero rows stay zero), as
    scikit-learn's ``Normalizer`` does.

    The paper's preprocessing is min-max scaling with training statistics
    followed by l2 normalisation (:func:`make_minmax_l2_pipeline`). The
    min-max statistics are computed from the private rows and are **not**
    covered by the privacy guarantee; use public feature ranges
    (``MinMaxScaler`` fitted on public bounds) when that matters.

    Parameters
    ----------
    max_norm : float, default=1.0
        The bound ``L`` (> 0).
    mode : {"clip", "normalize"}, default="clip"
        Shrink only rows above the bound, or scale every non-zero row onto it.

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen in ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in ``fit``, when ``X`` has string column names.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.preprocessing import NormClipper
    >>> NormClipper(max_norm=1.0).fit_transform(np.array([[3.0, 4.0], [0.3, 0.4]])).tolist()
    [[0.6, 0.8], [0.3, 0.4]]
    """

    def __init__(self, max_norm=1.0, mode="clip"):
        self.max_norm = max_norm
        self.mode = mode

    def fit(self, X, y=None):
        """Check ``X`` and the parameters; nothing is learned from the rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.
        y : None
            Ignored.

        Returns
        -------
        self : NormClipper
            The fitted transformer.
        """
        validate_data(self, X, reset=True)
        self._check_params()
        return self

    def _check_params(self):
        if (isinstance(self.max_norm, bool) or not isinstance(self.max_norm, numbers.Real)
                or not np.isfinite(self.max_norm) or self.max_norm <= 0):
            raise ValueError(f"max_norm must be a finite number > 0, got {self.max_norm!r}.")
        if self.mode not in ("clip", "normalize"):
            raise ValueError(f"mode must be 'clip' or 'normalize', got {self.mode!r}.")

    def transform(self, X):
        """Scale the rows.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features)
            Rows with ``||x||_2 <= max_norm``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        self._check_params()
        max_norm = self.max_norm
        peak, unit, r = _scaled_rows(X)
        with np.errstate(over="ignore", divide="ignore"):
            # ||x|| = peak * r (inf only beyond the float range); compared as
            # r > max_norm / peak, which cannot overflow for a non-zero row
            ratio = max_norm / np.where(peak > 0, peak, 1.0)
            scale = peak * r / max_norm
        nonzero = peak > 0
        rows = (nonzero & (r > ratio) if self.mode == "clip" else nonzero).ravel()
        out = X.copy()
        # x / (||x|| / L) where that quotient is a normal float; otherwise the
        # scaled row, (x / peak) * (L / r), which neither overflows nor underflows
        plain = rows & (np.isfinite(scale) & (scale >= np.finfo(X.dtype).tiny)).ravel()
        out[plain] = X[plain] / scale[plain]
        rest = rows & ~plain
        out[rest] = unit[rest] * (max_norm / r[rest])
        # rounding may land a few ulps above the bound, by the scaled norm or by the
        # plain one in float64 (np.linalg.norm, where it does not overflow); pull back
        peak, unit, r = _scaled_rows(out)
        with np.errstate(over="ignore", divide="ignore"):
            over = ((peak > 0) & (r > max_norm / np.where(peak > 0, peak, 1.0))).ravel()
            norm64 = np.linalg.norm(out.astype(np.float64, copy=False), axis=1)
        over |= np.isfinite(norm64) & (norm64 > max_norm)
        if np.any(over):
            shrink = 1.0 - 4 * np.finfo(out.dtype).eps
            out[over] = unit[over] * (max_norm * shrink / r[over])
        return out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _scaled_rows(X):
    """Each row's max-abs entry ``peak``, the row divided by it, and that row's norm ``r``.

    ``||x|| = peak * r`` with ``r`` in ``[1, sqrt(n_features)]`` for a
    non-zero row: squaring the entries of ``x / peak`` neither overflows
    (rows near 1e300) nor underflows (rows near 1e-300) as squaring ``x``
    does. Zero rows give ``peak = r = 0``.
    """
    peak = np.max(np.abs(X), axis=1, keepdims=True)
    unit = X / np.where(peak > 0, peak, 1.0)
    return peak, unit, np.linalg.norm(unit, axis=1, keepdims=True)


def make_minmax_l2_pipeline(max_norm=1.0, mode="clip"):
    """The paper's preprocessing: per-feature min-max to [0, 1], then row-norm bounding.

    The paper writes "l2 normalisation so that each sample has norm at most 1"
    without saying whether rows are normalised or only clipped; ``mode``
    chooses. The min-max statistics come from the training rows and are not
    covered by any privacy guarantee.

    Parameters
    ----------
    max_norm : float, default=1.0
        The bound ``L``.
    mode : {"clip", "normalize"}, default="clip"
        See :class:`NormClipper`.

    Returns
    -------
    pipeline : sklearn.pipeline.Pipeline

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.preprocessing import make_minmax_l2_pipeline
    >>> Xt = make_minmax_l2_pipeline().fit_transform(np.arange(12.0).reshape(4, 3))
    >>> bool(np.all(np.linalg.norm(Xt, axis=1) <= 1.0))
    True
    """
    return make_pipeline(MinMaxScaler(), NormClipper(max_norm=max_norm, mode=mode))
