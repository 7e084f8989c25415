"""Tucker-rank selection: the ridge-type ratio criterion and the federated mode vote."""

import math

import numpy as np
import tensorly as tl

__all__ = ["ratio_rank", "vote_ranks", "make_feasible", "ridge_constant"]


def ridge_constant(shape, n_samples, scale=1.0):
    """The ridge constant ``c = scale * sqrt(log(D) / n_k)``, ``D = max(prod(shape), 2)``.

    The paper's ``c_s(p, q, n_k)`` was lost from our copy; this is the
    authors' code default (the criterion is the paper's eq. 12, Sec. 4.2).
    """
    D = max(int(np.prod(shape)), 2)
    return scale * math.sqrt(math.log(D) / n_samples)


def ratio_rank(T, n_samples, scale=1.0, max_rank=None):
    """Per-mode rank of ``T`` by the ridge-type ratio criterion (paper eq. 12).

    ``r_s = argmin_{1 <= r <= rbar_s - 1} (sigma_{r+1} + c) / (sigma_r + c)``,
    with ``sigma`` the singular values of the mode-``s`` unfolding, ``rbar_s``
    their number (capped by ``max_rank``) and ``c`` from
    :func:`ridge_constant`. A mode with ``rbar_s <= 1`` gets rank 1; ties go to
    the smallest rank.

    Examples
    --------
    >>> import numpy as np
    >>> T = np.einsum("i,j,k->ijk", np.ones(4), np.arange(1.0, 4), np.ones(5))
    >>> ratio_rank(T, n_samples=100)
    (1, 1, 1)
    """
    T = np.asarray(T, dtype=float)
    c = ridge_constant(T.shape, n_samples, scale)
    ranks = []
    for s in range(T.ndim):
        sv = np.linalg.svd(tl.unfold(T, s), compute_uv=False)
        rbar = sv.size
        if max_rank is not None:
            cap = max_rank[s] if np.ndim(max_rank) else max_rank
            rbar = min(rbar, int(cap) + 1)  # candidates go up to rbar - 1
        if rbar <= 1:
            ranks.append(1)
            continue
        ratios = (sv[1:rbar] + c) / (sv[: rbar - 1] + c)
        ranks.append(int(np.argmin(ratios)) + 1)
    return tuple(ranks)


def vote_ranks(ranks):
    """Mode across clients, per tensor mode (ties to the smallest rank)."""
    ranks = np.asarray(ranks, dtype=np.int64)
    out = []
    for column in ranks.T:
        values, counts = np.unique(column, return_counts=True)
        out.append(int(values[np.argmax(counts)]))  # unique sorts: smallest tie wins
    return tuple(out)


def make_feasible(rank, shape=None):
    """Lower ranks until ``r_s <= prod_{j != s} r_j`` (and ``r_s <= shape[s]``)."""
    rank = [int(r) for r in rank]
    if shape is not None:
        rank = [min(r, int(n)) for r, n in zip(rank, shape)]
    changed = True
    while changed:
        changed = False
        for s in range(len(rank)):
            others = int(np.prod([rank[j] for j in range(len(rank)) if j != s]))
            if rank[s] > others:
                rank[s] = others
                changed = True
    return tuple(rank)
