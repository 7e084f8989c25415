"""Rank criterion, mode vote and the paper's privacy composition."""

import math

import dp_accounting
import numpy as np
import pytest

from skfed.privacy import pftr_noise_multiplier, pftr_noise_std, pftr_privacy_spent
from skfed.tensor import ratio_rank, vote_ranks
from skfed.tensor._rank import make_feasible, ridge_constant


def test_ratio_rank_picks_the_spectral_gap():
    rng = np.random.default_rng(0)
    U = np.linalg.qr(rng.standard_normal((8, 8)))[0]
    V = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    s = np.array([3.0, 2.5, 2.0, 0.01, 0.005, 0.001])
    M = (U[:, :6] * s) @ V.T
    assert ratio_rank(M, n_samples=10**6) == (3, 3)
    # a huge ridge constant flattens every ratio towards 1: the criterion then
    # follows the remaining relative gaps, still returning a valid rank
    r = ratio_rank(M, n_samples=10**6, scale=1e6)
    assert all(1 <= x <= 5 for x in r)
    # max_rank caps the candidates
    assert ratio_rank(M, n_samples=10**6, max_rank=2) in ((1, 1), (2, 2))
    # numpy integers and a per-mode cap are valid
    assert ratio_rank(M, np.int64(10**6), max_rank=(np.int64(2), 2)) == ratio_rank(
        M, n_samples=10**6, max_rank=2)
    assert ridge_constant((8, 6), 100) == pytest.approx(math.sqrt(math.log(48) / 100))


def test_vote_and_feasibility():
    assert vote_ranks([(2, 3), (2, 1), (1, 1), (1, 3)]) == (1, 1)  # ties -> smallest
    assert vote_ranks([(3, 3, 3), (3, 2, 3), (2, 3, 3)]) == (3, 3, 3)
    # the clients' messages carry int64 arrays
    assert vote_ranks([np.array([2, 3]), np.array([2, 1]), np.array([1, 1])]) == (2, 1)
    assert make_feasible((1, 1, 3)) == (1, 1, 1)
    assert make_feasible((2, 5, 3)) == (2, 5, 3)
    assert make_feasible((4, 1, 1)) == (1, 1, 1)
    assert make_feasible((9, 2, 2), shape=(3, 5, 5)) == (3, 2, 2)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_samples": 0}, "n_samples must be an integer >= 1, got 0"),
    ({"n_samples": -1}, "n_samples must be an integer >= 1, got -1"),
    ({"n_samples": 2.5}, "n_samples must be an integer >= 1, got 2.5"),
    ({"scale": -1}, "scale must be a finite real number > 0, got -1"),
    ({"scale": np.nan}, "scale must be a finite real number > 0, got nan"),
    ({"scale": 0}, "scale must be a finite real number > 0"),
    ({"scale": True}, "scale must be a finite real number > 0"),
    ({"max_rank": (1,)}, r"max_rank must be None, an int or 2 ints .*got \(1,\)"),
    ({"max_rank": 0}, "max_rank must be an integer >= 1, got 0"),
    ({"max_rank": (1, 0)}, r"max_rank\[1\] must be an integer >= 1, got 0"),
    ({"max_rank": 1.5}, "max_rank must be an integer >= 1"),
    ({"T": np.full((4, 3), np.nan)}, "T must be finite, got 12 NaN or infinite entries"),
    ({"T": np.zeros((0, 3))}, r"T must have at least one entry along every mode, got shape"),
    ({"T": [["a", "b"]]}, "T must be an array of real numbers"),
])
def test_ratio_rank_refuses_bad_arguments(kwargs, match):
    args = {"T": np.random.default_rng(0).standard_normal((4, 3)), "n_samples": 100, **kwargs}
    with pytest.raises(ValueError, match=match):
        ratio_rank(**args)


@pytest.mark.parametrize("ranks, match", [
    ([], "ranks must hold at least one rank tuple, got an empty list"),
    ([(-1, 2)], r"ranks\[0\] must hold integers >= 1, got \(-1, 2\)"),
    ([(1.5, 2)], r"ranks\[0\] must hold integers >= 1, got \(1.5, 2\)"),
    ([(True, 2)], r"ranks\[0\] must hold integers >= 1"),
    ([()], r"ranks\[0\] must hold integers >= 1, got \(\)"),
    ([(1, 2), (1,)], r"ranks\[1\] must hold 2 integers >= 1 \(as many as ranks\[0\]\)"),
    ([(1, 2), (1, 0)], r"ranks\[1\] must hold 2 integers >= 1"),
    ([1, 2], r"ranks\[0\] must be a tuple of ints \(one client's rank\), got 1"),
    (None, "ranks must be a list of rank tuples, got None"),
])
def test_vote_ranks_refuses_bad_ranks(ranks, match):
    with pytest.raises(ValueError, match=match):
        vote_ranks(ranks)


def test_paper_noise_formula():
    z = pftr_noise_multiplier(20.0, 0.1, 20)
    assert z == pytest.approx(20 * math.sqrt(2 * math.log(1.25 * 20 / 0.1)) / 20.0)
    assert pftr_noise_std(0.3, 4.0, 50, 20, 20.0, 0.1) == pytest.approx(2 * 0.3 * 4.0 / 50 * z)
    # proportional to 1/epsilon and 1/n_k
    assert pftr_noise_std(1, 1, 50, 20, 10.0, 0.1) == pytest.approx(
        2 * pftr_noise_std(1, 1, 50, 20, 20.0, 0.1))
    assert pftr_noise_std(1, 1, 100, 20, 20.0, 0.1) == pytest.approx(
        0.5 * pftr_noise_std(1, 1, 50, 20, 20.0, 0.1))
    assert pftr_noise_multiplier(None, 0.1, 20) == 0.0
    with pytest.raises(ValueError, match="epsilon"):
        pftr_noise_multiplier(0.0, 0.1, 20)
    with pytest.raises(ValueError, match="delta"):
        pftr_noise_multiplier(1.0, 1.5, 20)


def test_privacy_spent_matches_dp_accounting():
    spent = pftr_privacy_spent(20.0, 0.1, 20)
    z = spent["noise_multiplier"]
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), 20))
    assert spent["epsilon_rdp"] == pytest.approx(acc.get_epsilon(0.1))
    assert spent["epsilon"] == 20.0 and not spent["classical_valid"]
    assert pftr_privacy_spent(10.0, 1e-5, 20)["classical_valid"]
    none = pftr_privacy_spent(None, 0.1, 20)
    assert none["epsilon"] == math.inf and none["noise_multiplier"] == 0.0
