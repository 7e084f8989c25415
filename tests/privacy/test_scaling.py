"""The private feature scaling: its release's sensitivity, its post-processing, the site map."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from skfed.privacy._scaling import (
    PrivateScaling,
    feature_histograms,
    histogram_edges,
    histogram_sensitivity,
    ranges_from_histograms,
    scale_rows,
)

EDGES = histogram_edges()
finite = st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False)


def _histogram_reference(X, edges):
    """One row at a time: the bin of each value by comparisons with every edge."""
    out = np.zeros((X.shape[1], edges.size + 1))
    for row in X:
        for j, v in enumerate(row):
            out[j, int(np.sum(edges <= v))] += 1
    return out


@given(arrays(np.float64, (6, 3), elements=finite))
@settings(max_examples=50, deadline=None)
def test_histograms_equal_the_row_by_row_count(X):
    np.testing.assert_array_equal(feature_histograms(X, EDGES), _histogram_reference(X, EDGES))


@given(arrays(np.float64, (5, 4), elements=finite), arrays(np.float64, (4,), elements=finite),
       st.integers(0, 4))
@settings(max_examples=100, deadline=None)
def test_replacing_one_row_moves_the_histograms_by_at_most_the_sensitivity(X, row, i):
    # neighbouring data sets (replace one row): the L2 distance of the releases is
    # at most sqrt(2 p), whatever the values, so the noise calibrated to it covers them
    other = X.copy()
    other[min(i, X.shape[0] - 1)] = row
    diff = feature_histograms(X, EDGES) - feature_histograms(other, EDGES)
    assert np.linalg.norm(diff) <= histogram_sensitivity(X.shape[1]) + 1e-12


@given(arrays(np.float64, (7, 3), elements=finite), arrays(np.float64, (3,), elements=finite),
       arrays(np.float64, (3,), elements=st.floats(1e-9, 1e9)), st.floats(1e-3, 1e3))
@settings(max_examples=100, deadline=None)
def test_scaled_rows_are_within_the_bound_whatever_the_ranges(X, center, half, bound):
    # the site's guarantee does not rest on what the server sends
    Z = scale_rows(X, center, half, bound)
    assert np.all(np.linalg.norm(Z, axis=1) <= bound * (1 + 1e-12))


def test_ranges_recover_the_bulk_of_each_feature():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(18, 90, 4000), rng.integers(0, 2, 4000),
                         rng.lognormal(10, 1, 4000), rng.normal(-5, 1, 4000)])
    center, half = ranges_from_histograms(feature_histograms(X, EDGES), EDGES, 0.0)
    low, high = center - half, center + half
    q = np.quantile(X, [0.02, 0.98], axis=0)
    # within the grid's resolution (bins 10^(1/4) = 1.78x wide)
    assert np.all(low <= q[0] + 1e-9) and np.all(high >= q[1] - 1e-9)
    assert np.all(high - low <= 4 * (q[1] - q[0]) + 2)
    # the dummy spans 0..1 (not a point)
    assert low[1] <= 0 < 1 <= high[1]


def test_noise_bins_are_dropped():
    # a noisy empty bin far out must not stretch the range
    counts = np.zeros((1, EDGES.size + 1))
    ages = np.searchsorted(EDGES, [20.0, 40.0, 60.0], side="right")
    counts[0, ages] = 500
    counts[0, -1] = 20.0  # noise in the 1e7+ bin, below 3 standard deviations of 10
    center, half = ranges_from_histograms(counts, EDGES, noise_std=10.0)
    assert center + half < 200


def test_site_checks_what_the_server_sends():
    scaling = PrivateScaling(2, 1.0, noise_multiplier=2.0)
    X = np.ones((3, 2))
    good = {"feature_center": np.zeros(2), "feature_half_range": np.ones(2)}
    assert np.allclose(scaling.transform(X, good), 1 / math.sqrt(2))
    for bad in ({"feature_center": np.zeros(3), "feature_half_range": np.ones(3)},
                {"feature_center": np.zeros(2), "feature_half_range": np.array([1.0, 0.0])},
                {"feature_center": np.array([np.nan, 0]), "feature_half_range": np.ones(2)}):
        with pytest.raises(ValueError, match="malformed"):
            scaling.transform(X, bad)


def test_site_release_is_noisy_with_the_planned_sigma():
    scaling = PrivateScaling(3, 1.0, noise_multiplier=2.0)
    assert scaling.sigma == pytest.approx(2.0 * math.sqrt(6))
    X = np.random.default_rng(1).normal(size=(50, 3))
    draws = np.stack([scaling.site_release(X, np.random.default_rng(s)) for s in range(200)])
    noise = draws - feature_histograms(X, scaling.edges)
    assert noise.std() == pytest.approx(scaling.sigma, rel=0.05)
