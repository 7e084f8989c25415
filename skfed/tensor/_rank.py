"""Tucker-rank selection: the ridge-type ratio criterion and the federated mode vote."""

import math
import numbers

import numpy as np
import tensorly as tl

from ..utils._validation import check_positive_int

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
    T, n_samples, scale, max_rank = _check_ratio_rank(T, n_samples, scale, max_rank)
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


def _check_ratio_rank(T, n_samples, scale, max_rank):
    """:func:`ratio_rank`'s arguments checked, as it uses them (O(modes), one finiteness pass).

    ``scale`` and ``max_rank`` as the estimators' ``rank_scale`` and
    ``max_rank`` (a real ``> 0``; ``None`` or an int ``>= 1``, here also one
    per mode).
    """
    from ._tucker import _as_tensor, _not_finite  # on first use: _tucker loads numba

    T = _as_tensor(T, copy=False)
    if T.size == 0:
        raise ValueError(f"T must have at least one entry along every mode, got shape {T.shape}.")
    if not np.isfinite(T).all():
        raise _not_finite(T)
    n_samples = check_positive_int(n_samples, "n_samples")
    if (isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real)
            or not 0 < scale < math.inf):
        raise ValueError(f"scale must be a finite real number > 0, got {scale!r}.")
    if max_rank is not None and not np.ndim(max_rank):
        check_positive_int(max_rank, "max_rank")
    elif max_rank is not None:
        if len(max_rank) != T.ndim:
            raise ValueError(f"max_rank must be None, an int or {T.ndim} ints (one per mode "
                             f"of T, of shape {T.shape}), got {max_rank!r}.")
        for s, cap in enumerate(max_rank):
            check_positive_int(cap, f"max_rank[{s}]")
    return T, n_samples, scale, max_rank


def vote_ranks(ranks):
    """Mode across clients, per tensor mode (ties to the smallest rank).

    ``ranks`` holds one Tucker rank per client: a non-empty list of equally
    long tuples of ints ``>= 1``.
    """
    _check_rank_list(ranks)
    ranks = np.asarray(ranks, dtype=np.int64)
    out = []
    for column in ranks.T:
        values, counts = np.unique(column, return_counts=True)
        out.append(int(values[np.argmax(counts)]))  # unique sorts: smallest tie wins
    return tuple(out)


def _check_rank_list(ranks):
    """Refuse what :func:`vote_ranks` cannot vote on (O(clients x modes))."""
    try:
        ranks = list(ranks)
    except TypeError:
        raise ValueError(f"ranks must be a list of rank tuples, got {ranks!r}.") from None
    if not ranks:
        raise ValueError("ranks must hold at least one rank tuple, got an empty list.")
    n_modes = None
    for k, rank in enumerate(ranks):
        try:
            rank = tuple(rank)
        except TypeError:
            raise ValueError(
                f"ranks[{k}] must be a tuple of ints (one client's rank), got {rank!r}."
            ) from None
        n_modes = len(rank) if n_modes is None else n_modes
        if not rank or len(rank) != n_modes or not all(
            isinstance(r, numbers.Integral) and not isinstance(r, (bool, np.bool_)) and r >= 1
            for r in rank
        ):
            what = f"{n_modes} integers >= 1 (as many as ranks[0])" if k else "integers >= 1"
            raise ValueError(f"ranks[{k}] must hold {what}, got {rank!r}.")


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
