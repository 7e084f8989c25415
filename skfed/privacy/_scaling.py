"""Private feature scaling: per-feature ranges from noisy histograms on a public grid.

A private linear model needs every row inside a public norm bound, and raw
features (an age, an income) are on scales no user-free choice fits. Each
site releases, once, the histograms of its features over a fixed public grid
of symmetric-logarithmic bins, with Gaussian noise; the server sums them,
drops the bins the noise could have made and reads a robust range per feature
(a low and a high quantile). The sites map each feature into ``[-1, 1]`` by
that range, clip it there and scale the row by ``norm_bound / sqrt(p)``, so
every row satisfies the bound whatever range the server sends.

The grid depends on nothing but its parameters, so the release's L2
sensitivity is fixed: replacing one row moves one count per feature from one
bin to another, ``sqrt(2 p)`` in all.
"""

import math

import numpy as np

from ._mechanisms import gaussian_mechanism

__all__ = [
    "histogram_edges",
    "feature_histograms",
    "histogram_sensitivity",
    "kept_counts",
    "ranges_from_histograms",
    "scale_rows",
]

#: decades of the grid on each side of zero (|x| from 1e-3 to 1e7) and bins per decade
GRID_DECADES = (-3, 7)
BINS_PER_DECADE = 4
#: the quantiles that bound each feature's range
RANGE_QUANTILES = (0.02, 0.98)
#: expected number of empty bins of a whole release (every feature's) that survive
#: the noise threshold: each bin is tested at the (1 - rate / n_bins) normal quantile
#: (about 4 standard deviations for 7 features of 83 bins)
FALSE_BIN_RATE = 0.01


def histogram_edges(decades=GRID_DECADES, bins_per_decade=BINS_PER_DECADE):
    """Inner edges of the public grid: ``-10^k .. -10^lo, 10^lo .. 10^k`` (increasing).

    Bin ``i`` holds ``edges[i - 1] <= x < edges[i]`` (the first and last bins
    are unbounded), so the middle bin is ``[-10^lo, 10^lo)`` and holds zero.

    Examples
    --------
    >>> from skfed.privacy._scaling import histogram_edges
    >>> e = histogram_edges((0, 1), 1)
    >>> e.tolist()
    [-10.0, -1.0, 1.0, 10.0]
    """
    lo, hi = decades
    pos = 10.0 ** (np.arange(lo * bins_per_decade, hi * bins_per_decade + 1) / bins_per_decade)
    return np.concatenate([-pos[::-1], pos])


def feature_histograms(X, edges):
    """Counts of each feature's values in the bins of ``edges``, shape ``(p, len(edges) + 1)``."""
    X = np.asarray(X, dtype=float)
    n_bins = edges.size + 1
    idx = np.searchsorted(edges, X, side="right")  # bin of every value
    out = np.zeros((X.shape[1], n_bins))
    for j in range(X.shape[1]):
        out[j] = np.bincount(idx[:, j], minlength=n_bins)
    return out


def histogram_sensitivity(n_features):
    """L2 sensitivity of :func:`feature_histograms` to replacing one row: ``sqrt(2 p)``."""
    return math.sqrt(2.0 * n_features)


def _bin_bounds(edges):
    """Finite lower and upper value of every bin (the outer bins end at their edge)."""
    lower = np.concatenate([[edges[0]], edges])
    upper = np.concatenate([edges, [edges[-1]]])
    return lower, upper


def _quantile(counts, lower, upper, q):
    """The ``q`` quantile of a histogram, linear within the bin that holds it."""
    cum = np.cumsum(counts)
    target = q * cum[-1]
    b = int(np.searchsorted(cum, target, side="left"))
    b = min(b, counts.size - 1)
    before = cum[b] - counts[b]
    frac = 0.0 if counts[b] <= 0 else (target - before) / counts[b]
    return lower[b] + min(max(frac, 0.0), 1.0) * (upper[b] - lower[b])


def kept_counts(counts, noise_std, false_bin_rate=FALSE_BIN_RATE):
    """The noisy ``counts`` with every bin the noise could have made set to 0.

    A bin is kept at ``t * noise_std`` or more, ``t`` the normal quantile at
    which all the bins of ``counts`` together keep ``false_bin_rate`` empty
    bins on average; ``noise_std`` may be one value per bin (merged bins).
    """
    from scipy.special import ndtri  # here: a Flower site's process needs no scipy

    counts = np.asarray(counts, dtype=float)
    threshold = float(ndtri(1.0 - false_bin_rate / counts.size))
    return np.where(counts >= threshold * noise_std, np.maximum(counts, 0.0), 0.0)


def ranges_from_histograms(counts, edges, noise_std, quantiles=RANGE_QUANTILES,
                           false_bin_rate=FALSE_BIN_RATE):
    """Each feature's centre and half-range from summed noisy histograms (post-processing).

    Parameters
    ----------
    counts : ndarray of shape (n_features, n_bins)
        The sum of the sites' noisy histograms.
    edges : ndarray
        The grid (:func:`histogram_edges`).
    noise_std : float
        Standard deviation of the noise of one summed count (public: the
        sites' noise standard deviations are set by the privacy plan).
    quantiles : tuple of float, default=(0.02, 0.98)
        The range is between these quantiles of the kept counts.
    false_bin_rate : float, default=0.01
        Bins below ``t * noise_std`` are dropped (noise, not rows), ``t`` the
        normal quantile at which all the bins together keep ``false_bin_rate``
        empty bins on average.

    Returns
    -------
    center, half_range : ndarray of shape (n_features,)
        ``half_range > 0``. A feature whose quantiles coincide (e.g. a
        dummy set on few rows) takes the extent of its kept bins; a feature
        with no kept bin takes centre 0 and half-range 1.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.privacy._scaling import feature_histograms, histogram_edges
    >>> from skfed.privacy._scaling import ranges_from_histograms
    >>> edges = histogram_edges()
    >>> X = np.random.default_rng(0).uniform(20, 80, size=(1000, 1))
    >>> c, h = ranges_from_histograms(feature_histograms(X, edges), edges, 0.0)
    >>> bool(15 < c[0] - h[0] < 25 and 80 < c[0] + h[0] < 100)  # grid bins: 1.78x wide
    True
    """
    counts = kept_counts(counts, noise_std, false_bin_rate)
    lower, upper = _bin_bounds(edges)
    center = np.zeros(counts.shape[0])
    half = np.ones(counts.shape[0])
    for j, kept in enumerate(counts):
        if kept.sum() <= 0:
            continue
        lo = _quantile(kept, lower, upper, quantiles[0])
        hi = _quantile(kept, lower, upper, quantiles[1])
        if not hi > lo:  # the bulk sits in one value: span the kept bins instead
            bins = np.flatnonzero(kept)
            lo, hi = lower[bins[0]], upper[bins[-1]]
        if not hi > lo:
            continue
        center[j], half[j] = 0.5 * (lo + hi), 0.5 * (hi - lo)
    return center, half


def scale_rows(X, center, half_range, norm_bound):
    """Map each feature into ``[-1, 1]`` by its range, clip, and bound the row norm.

    ``clip((x - center) / half_range, -1, 1) * norm_bound / sqrt(p)``: every
    row's L2 norm is at most ``norm_bound``, whatever ``center`` and
    ``half_range`` are (the site's guarantee does not rest on the server).
    """
    X = np.asarray(X, dtype=float)
    Z = np.clip((X - center) / half_range, -1.0, 1.0)
    return Z * (norm_bound / math.sqrt(X.shape[1]))


class PrivateScaling:
    """Both sides of the private feature scaling of a federated fit.

    Hyperparameters only (the server and every site build the same object
    from the estimator's parameters). With public ``bounds`` nothing is
    released; otherwise each site releases :meth:`site_release` once, the
    server forms the ranges by :meth:`combine` and broadcasts them, and the
    sites map their rows by :meth:`transform`.

    Parameters
    ----------
    n_features : int
        Number of features scaled.
    norm_bound : float
        The bound on every scaled row's L2 norm.
    noise_multiplier : float or None
        Noise standard deviation over L2 sensitivity of the histograms.
    bounds : ndarray of shape (2, n_features) or None
        Public low and high value of each feature.
    """

    def __init__(self, n_features, norm_bound, noise_multiplier=None, bounds=None):
        self.n_features = int(n_features)
        self.norm_bound = float(norm_bound)
        self.noise_multiplier = noise_multiplier
        self.bounds = bounds
        self.edges = histogram_edges()

    @property
    def releases(self):
        """Whether the sites release histograms (no public bounds)."""
        return self.bounds is None

    @property
    def sigma(self):
        """Noise standard deviation of each released count."""
        return self.noise_multiplier * histogram_sensitivity(self.n_features)

    def site_release(self, X, rng):
        """The site's feature histograms with Gaussian noise (its only scaling release)."""
        return gaussian_mechanism(feature_histograms(X, self.edges), self.sigma, rng)

    def combine(self, histograms):
        """Server: the ranges, ``{"feature_center", "feature_half_range"}``, from the sites'
        noisy histograms (post-processing of releases)."""
        total = sum(np.asarray(h, dtype=float) for h in histograms)
        noise_std = self.sigma * math.sqrt(len(histograms))
        center, half = ranges_from_histograms(total, self.edges, noise_std)
        return {"feature_center": center, "feature_half_range": half}

    def ranges(self, broadcast=None):
        """``(center, half_range)``: from the public bounds, or checked from ``broadcast``."""
        if self.bounds is not None:
            low, high = self.bounds
            return 0.5 * (low + high), 0.5 * (high - low)
        center = np.asarray(broadcast["feature_center"], dtype=float)
        half = np.asarray(broadcast["feature_half_range"], dtype=float)
        shape = (self.n_features,)
        # the site's own check of what the server sent: the norm bound holds whatever
        # the values (scale_rows clips), but nonsense must not pass silently
        if (center.shape != shape or half.shape != shape or not np.isfinite(center).all()
                or not np.isfinite(half).all() or (half <= 0).any()):
            raise ValueError(
                "the server's feature ranges are malformed (need finite centres and positive "
                f"half-ranges of shape {shape})."
            )
        return center, half

    def transform(self, X, broadcast=None):
        """The rows in the scaled space (:func:`scale_rows`)."""
        center, half = self.ranges(broadcast)
        return scale_rows(X, center, half, self.norm_bound)
