"""Private scaling of a tensor regression's entries: one range for X, one for y.

A strict private fit needs public truncation levels and a public step size,
and raw tensors (pixel intensities, counts, a response shifted by 1000) come
on scales no user-free constant fits. Each site releases the histograms of
all its covariate entries and of all its response entries on the fixed
public grid of :mod:`skfed.privacy._scaling`, with Gaussian noise; the server
reads a robust range (the 2% and 98% quantiles) of each. The grid's bins are
1.78 times wide, too coarse for entries far from 0 relative to their spread
(a response of 1000 +- 70 falls in two bins), so a second release, of the
entries mapped by that first range on a uniform grid (:data:`REFINED_EDGES`),
refines it (``N_PASSES``). The sites then map every entry into
``[-RANGE_SD, RANGE_SD]`` by it (the response's widened ``RESPONSE_MARGIN``
times: clipped responses bias the fit) and clip there. A Gaussian covariate
entry then has about unit variance and a Gaussian response a standard deviation
of about 0.4, so the levels and the step become public functions of the shapes
(:data:`SCALED_LEVELS`), and every
scaled covariate tensor has norm at most ``RANGE_SD sqrt(p)`` whatever the
server sends.

Few rows spread over many bins leave every fine bin under the noise
threshold, so the server reads each histogram coarse-to-fine
(:func:`read_range`): it also merges adjacent bins (post-processing, no
further release) and reads the finest merge that keeps nearly all the mass
the coarsest keeps. A second release that shows nothing keeps the first
range; a first one that shows nothing leaves ``(-1, 1)`` with a warning that
names the public bounds to pass.

One range per tensor, not per entry: a per-entry map would not keep the
Tucker rank of the coefficient tensor in raw units (a mode-wise rank is not
invariant under entrywise rescaling), and the pooled histogram is ``sqrt(p)``
times less noisy relative to its counts (measured in
``benchmarks/defaults/pftr_private_raw.py``). Each row adds its entries with weight
``1 / p`` (``1 / q`` for y), so a row moves at most 1 in total between bins:
replacing it changes a histogram by at most ``sqrt(2)`` in L2 norm, and the
release of both by 2.
"""

import math
import warnings

import numpy as np
from scipy.special import ndtri

from ..federated import FederatedAlgorithm
from ..privacy._mechanisms import gaussian_mechanism
from ..privacy._scaling import (
    FALSE_BIN_RATE,
    RANGE_QUANTILES,
    histogram_edges,
    kept_counts,
    ranges_from_histograms,
)
from ..utils._validation import user_stacklevel

__all__ = ["RANGE_SD", "RESPONSE_MARGIN", "SCALED_LEVELS", "ScalingRound", "TensorScaling",
           "entry_histogram", "read_range"]

#: the half-width of the scaled range: the 98% normal quantile (a Gaussian entry's 2%-98%
#: range maps to about +-2 standard deviations, so it comes out with unit variance)
RANGE_SD = float(ndtri(RANGE_QUANTILES[1]))

#: the public constants of a fit in the scaled space, as multiples of sqrt(p) (covariates)
#: and sqrt(q) (responses): a standardized row has norm about sqrt(p); chosen on the paper's
#: simulation design made raw (benchmarks/defaults/pftr_private_raw.py --tune)
SCALED_LEVELS = {"tau_x": 1.0, "tau_e": 0.25, "intercept_tau_x": 1.0, "intercept_tau_y": 1.0,
                 "step_size": 1.0}

#: the releases of the scaling: the raw entries' histograms, then those of the entries
#: mapped by the first range (each a Gaussian release of sensitivity 2)
N_PASSES = 2

#: the second release's grid, in the coordinates of the first range (which maps the bulk
#: into [-1, 1]): 128 bins of width 1 / 32, room for a first range 2 times too narrow
REFINED_EDGES = np.linspace(-2.0, 2.0, 129)

#: coarse-to-fine reading: the numbers of adjacent bins merged on the raw grid (up to 1 bin
#: a decade) and on the refined one (up to bins of width 1 / 2)
MERGES = {"raw": (1, 2, 4), "refined": (1, 2, 4, 8, 16)}

#: the finest merge keeping at least this share of the largest kept mass is read
KEPT_SHARE = 0.8

#: a refined half-range (in units of the first) inside this interval keeps the first range:
#: the refined grid's fine bins lose the tails of a spread histogram (measured: it read X
#: narrower than the first pass did, which was closer), while a first range 5 times too wide
#: (entries far from 0 on the logarithmic grid) or too narrow is worth replacing
KEEP_FIRST = (0.2, 1.3)

#: the response's range read is widened this many times before its entries are mapped:
#: clipping responses biases the fit toward 0 (at the read 2%-98% range, 4% of them clipped,
#: the A0 error of the split recipe at n_k = 250 was 0.46 against 0.13 with the range read
#: 2 times too wide); 2.5 times it clips a Gaussian response beyond 5 sd (on the paper's
#: design 0.1% were clipped at 2 times) and leaves it a sd of about 0.4, near what
#: SCALED_LEVELS were chosen for. Margins 1, 1.5, 2, 2.5, 3 gave A0 errors 0.46, 0.25, 0.12,
#: 0.10, 0.10 at n_k = 250 and 0.77, 0.71, 0.68, 0.66, 0.66 at 50 (2.5 and 3 tie;
#: benchmarks/defaults/pftr_private_raw.py --tune-margin, replications 1000-1004). Covariates keep
#: the read range: 1.5 times it adds noise relative to their spread (A0 0.12 -> 0.42)
RESPONSE_MARGIN = 2.5

#: the broadcast ranges of the released parts (x first), one value per part
CENTER, HALF_RANGE = "scale_center", "scale_half_range"


def entry_histogram(M, edges):
    """Counts of all entries of ``M`` (n x d) in the bins of ``edges``, each row weighing 1.

    Every entry adds ``1 / d``, so replacing one row changes the histogram by at
    most ``sqrt(2)`` in L2 norm (two non-negative vectors of sum 1).
    """
    M = np.asarray(M, dtype=float)
    idx = np.searchsorted(edges, M.reshape(-1), side="right")
    return np.bincount(idx, minlength=edges.size + 1) / M.shape[1]


def merge_bins(counts, edges, k):
    """The histogram on the grid of every ``k``-th edge: its counts and how many bins
    each merges."""
    lower = np.concatenate([[-np.inf], edges])  # the lower edge of every bin
    idx = np.searchsorted(edges[::k], lower, side="right")
    n_bins = edges[::k].size + 1
    return np.bincount(idx, counts, n_bins), np.bincount(idx, minlength=n_bins)


def fold(counts, edges):
    """The histogram of the absolute values, on the positive half of a grid symmetric about
    0 with a middle bin: its counts, how many bins each adds, and its edges."""
    mid = edges.size // 2  # the middle bin, which holds 0
    folded, n_bins = counts[mid:].copy(), np.ones(counts.size - mid)
    folded[1:] += counts[:mid][::-1]
    n_bins[1:] += 1
    return folded, n_bins, edges[mid:]


def read_range(counts, edges, noise_std, merges=(1,), false_bin_rate=FALSE_BIN_RATE,
               folded=False):
    """The centre and half-range of one noisy histogram, read coarse-to-fine; ``None`` if
    no bin of any merge stands above the noise (post-processing).

    Few rows spread over many bins leave each under the threshold of
    :func:`kept_counts`; merging ``k`` adjacent bins adds their counts and only
    ``sqrt(k)`` times the noise. The finest merge keeping ``KEPT_SHARE`` of the
    largest kept mass is read (:func:`ranges_from_histograms`), so a fine
    grid on which one bin survives alone cannot give a range unrelated to the
    bulk. ``folded`` (a grid symmetric about 0) also reads the histogram of the
    absolute values last, a range ``(-h, h)``: entries spread on both sides of 0
    can leave one side under the threshold, and a one-sided range would clip
    the other side away. ``false_bin_rate`` is shared by the readings.
    """
    sources = [(counts, np.ones(counts.size), edges, False)]
    if folded:
        sources.append((*fold(counts, edges), True))
    readings = []
    for source, n_fine, grid, absolute in sources:
        for k in merges:
            merged, n_merged = merge_bins(source, grid, k)
            kept = kept_counts(merged, noise_std * np.sqrt(merge_bins(n_fine, grid, k)[0]),
                               false_bin_rate / (len(merges) * len(sources)))
            readings.append((kept.sum(), kept, grid[::k], absolute))
    top = max(r[0] for r in readings)
    if top <= 0:
        return None
    _, kept, grid, absolute = next(r for r in readings if r[0] >= KEPT_SHARE * top)
    if absolute:  # the 96% quantile of |x|: the 2% and 98% ones of a symmetric spread
        center, half = ranges_from_histograms(kept[None], grid, 0.0,
                                              (0.0, 1.0 - 2.0 * (1.0 - RANGE_QUANTILES[1])))
        return 0.0, float(center[0] + half[0])
    center, half = ranges_from_histograms(kept[None], grid, 0.0)
    return float(center[0]), float(half[0])


class TensorScaling:
    """Both sides of the private scaling of a tensor fit's covariate and response entries.

    Hyperparameters only (the server and every site build it from the
    estimator's parameters). A part with public ``bounds`` releases nothing;
    otherwise each site releases :meth:`site_release` once, the server
    forms the ranges by :meth:`combine` and broadcasts them, and the sites map
    their rows by :meth:`transform` after checking them (:meth:`ranges`).

    Parameters
    ----------
    noise_multiplier : float or None
        Noise standard deviation over the L2 sensitivity of the release.
    x_bounds, y_bounds : tuple of float or None
        Public ``(low, high)`` of every covariate (response) entry.
    """

    def __init__(self, noise_multiplier=None, x_bounds=None, y_bounds=None):
        self.noise_multiplier = noise_multiplier
        self.bounds = {"x": x_bounds, "y": y_bounds}
        self.edges = histogram_edges()

    @property
    def released(self):
        """The parts whose histograms the sites release (``"x"``, ``"y"``)."""
        return tuple(name for name, b in self.bounds.items() if b is None)

    @property
    def releases(self):
        """Whether the sites release histograms (a part without public bounds)."""
        return bool(self.released)

    @property
    def sigma(self):
        """Noise standard deviation of each released count (sensitivity ``sqrt(2)`` a part)."""
        return self.noise_multiplier * math.sqrt(2.0 * len(self.released))

    def site_release(self, X, Y, rng, first=None):
        """The site's entry histograms with Gaussian noise; with ``first`` (the broadcast
        of the first pass's ranges, checked), of the entries mapped by them."""
        parts = {"x": X, "y": Y}
        center, half = (np.zeros(len(self.released)), np.ones(len(self.released))) \
            if first is None else self._checked(first)
        edges = self.edges if first is None else REFINED_EDGES
        counts = np.stack([entry_histogram((parts[name] - c) / h, edges)
                           for name, c, h in zip(self.released, center, half)])
        return gaussian_mechanism(counts, self.sigma, rng)

    def combine(self, histograms, first=None):
        """Server: the released parts' ranges from the sites' noisy histograms, of raw
        entries or (``first``: the first pass's ranges) of entries mapped by ``first``
        (post-processing of releases).

        A part whose refined histogram shows nothing keeps its first range; one
        whose raw histogram shows nothing gets ``(-1, 1)`` and a warning.
        """
        total = sum(np.asarray(h, dtype=float) for h in histograms)
        noise_std = self.sigma * math.sqrt(len(histograms))
        edges, merges = (self.edges, MERGES["raw"]) if first is None else (
            REFINED_EDGES, MERGES["refined"])
        rate = FALSE_BIN_RATE / len(self.released)
        read = [read_range(row, edges, noise_std, merges, rate, folded=first is None)
                for row in total]
        if first is None:
            self._warn_unread([name for name, r in zip(self.released, read) if r is None])
        else:
            read = [None if r is not None and KEEP_FIRST[0] <= r[1] <= KEEP_FIRST[1] else r
                    for r in read]
        # unread: (0, 1), in the first pass's coordinates the first range itself
        ranges = np.array([(0.0, 1.0) if r is None else r for r in read]).reshape(-1, 2)
        center, half = ranges[:, 0], ranges[:, 1]
        if first is not None:  # back from the first pass's coordinates, y widened
            c0, h0 = first[CENTER], first[HALF_RANGE]
            margin = np.array([RESPONSE_MARGIN if name == "y" else 1.0
                               for name in self.released])
            center, half = c0 + h0 * center, h0 * half * margin
        return {CENTER: center, HALF_RANGE: half}

    @staticmethod
    def _warn_unread(parts):
        """Warn that no range of ``parts`` stands above the noise: their entries are
        clipped to ``(-1, 1)``, likely unrelated to the data."""
        if not parts:
            return
        names = {"x": "covariate (feature_bounds)", "y": "response (target_bounds)"}
        which = " and ".join(names[p] for p in parts)
        warnings.warn(
            f"the private scaling could not read the range of the {which} entries: no bin of "
            "their noisy histograms stands above the noise (too few rows for the budget), so "
            "they are clipped to (-1, 1), which may be unrelated to the data. Pass their public "
            "range as feature_bounds=(low, high) / target_bounds=(low, high), or a larger "
            "scaling_share or epsilon.", UserWarning, stacklevel=user_stacklevel())

    def _checked(self, broadcast):
        """The released parts' centres and half-ranges from ``broadcast``, checked.

        The site's own check of what the server sent; the later releases'
        levels bound the scaled rows whatever the values (entries are
        clipped), but a malformed broadcast must not pass silently.
        """
        shape = (len(self.released),)
        try:
            center = np.asarray(broadcast[CENTER], dtype=float)
            half = np.asarray(broadcast[HALF_RANGE], dtype=float)
        except (KeyError, TypeError, ValueError):
            center = half = np.full(0, np.nan)
        if (center.shape != shape or half.shape != shape or not np.isfinite(center).all()
                or not np.isfinite(half).all() or (half <= 0).any()):
            raise ValueError(
                "the server's entry ranges are malformed (need finite centres and positive "
                f"half-ranges of shape {shape} under {CENTER!r} and {HALF_RANGE!r}).")
        return center, half

    def ranges(self, broadcast=None):
        """``{"x": (center, half_range), "y": ...}``: public bounds, or checked from
        ``broadcast``."""
        out = {}
        if self.released:
            center, half = self._checked(broadcast)
            out = {name: (float(c), float(h)) for name, c, h in zip(self.released, center, half)}
        for name, b in self.bounds.items():
            if b is not None:
                out[name] = (0.5 * (b[0] + b[1]), 0.5 * (b[1] - b[0]))
        return out

    def transform(self, X, Y, broadcast=None):
        """The rows in the scaled space: ``clip((v - center) / half_range, -1, 1) RANGE_SD``."""
        r = self.ranges(broadcast)
        return tuple(np.clip((np.asarray(M, dtype=float) - r[name][0]) / r[name][1], -1.0, 1.0)
                     * RANGE_SD for name, M in (("x", X), ("y", Y)))


class ScalingRound(FederatedAlgorithm):
    """The scaling's ``N_PASSES`` rounds: every site releases its noisy histograms, of raw
    entries, then of entries mapped by the first ranges; the server keeps the refined
    ranges (broadcast with every later round, see ``PersonalizedTensorPhases``)."""

    def __init__(self, scaling):
        self.scaling = scaling

    def asks_every_client(self, server_state):
        return True

    def client_init(self, data, rng):
        return {"released": 0}

    def client_step(self, data, state, broadcast, rng):
        done = state["released"]
        if done >= N_PASSES:  # the privacy plan counts N_PASSES releases
            raise ValueError(f"the server asked client {data.label!r} for more than "
                             f"{N_PASSES} scaling histograms; the privacy plan allows "
                             f"{N_PASSES}.")
        first = broadcast if done else None
        return {"released": done + 1}, {
            "histogram": self.scaling.site_release(data.X, data.y, rng, first)}

    def server_init(self, rng):
        return {}, {}

    def server_step(self, state, messages, rng):
        histograms = [messages[k]["histogram"] for k in sorted(messages)]
        ranges = self.scaling.combine(histograms, state or None)
        return ranges, dict(ranges)
