"""Tucker-manifold machinery: rank checks, retraction and tangent-space projection.

Conventions (C-order, as tensorly): ``tl.unfold(T, s)`` is the mode-``s``
matricization, ``vec(X) = X.reshape(-1)`` and a coefficient tensor of shape
``output_shape + tensor_shape`` is matricized as ``A.reshape(q, p)``. Ranks,
singular values and the algorithms do not depend on this choice (the paper
uses the column-major Kolda ordering).
"""

import numbers

import numpy as np
import tensorly as tl
from tensorly.tenalg import mode_dot, multi_mode_dot

__all__ = [
    "check_tucker_rank",
    "st_hosvd",
    "t_hosvd",
    "retract",
    "tucker_to_tensor",
    "tangent_project",
    "tangent_project_surrogate",
    "multilinear_rank",
]

RETRACTIONS = ("st_hosvd", "t_hosvd")
TANGENTS = ("exact", "retract_gradient")


def check_tucker_rank(rank, shape, name="rank"):
    """Validate a Tucker rank for a tensor of ``shape``; return it as a tuple.

    An int means the same rank on every mode. Each ``r_s`` must satisfy
    ``1 <= r_s <= shape[s]`` and be feasible, ``r_s <= prod_{j != s} r_j``
    (the mode-``s`` unfolding of an ``r_1 x ... x r_N`` core has at most that
    rank).

    Examples
    --------
    >>> check_tucker_rank(2, (4, 3))
    (2, 2)
    """
    shape = tuple(int(s) for s in shape)
    if isinstance(rank, numbers.Integral) and not isinstance(rank, bool):
        rank = (int(rank),) * len(shape)
    try:
        rank = tuple(rank)
    except TypeError:
        raise ValueError(
            f"{name} must be 'auto', an int or a tuple of ints, got {rank!r}."
        ) from None
    if len(rank) != len(shape) or not all(
        isinstance(r, numbers.Integral) and not isinstance(r, bool) for r in rank
    ):
        raise ValueError(
            f"{name} must hold {len(shape)} integers (one per mode of the coefficient "
            f"tensor of shape {shape}, response modes first), got {rank!r}."
        )
    rank = tuple(int(r) for r in rank)
    for s, (r, n) in enumerate(zip(rank, shape)):
        if not 1 <= r <= n:
            raise ValueError(
                f"{name}[{s}] = {r} is not in [1, {n}]: the rank of a mode cannot exceed "
                f"its size (coefficient shape {shape})."
            )
    for s, r in enumerate(rank):
        others = int(np.prod([rank[j] for j in range(len(rank)) if j != s]))
        if r > others:
            raise ValueError(
                f"{name} = {rank} is infeasible: {name}[{s}] = {r} exceeds the product "
                f"of the other ranks ({others}), so no tensor has this Tucker rank."
            )
    return rank


# tensorly's C-order unfolding and mode products (numpy backend)
_unfold = tl.unfold
_mode_dot = mode_dot
_multi_mode_dot = multi_mode_dot


def _leading_left_singular_vectors(M, r):
    U, _, _ = np.linalg.svd(M, full_matrices=False)
    return U[:, :r]


def st_hosvd(T, rank):
    """Sequentially truncated HOSVD: ``(core, factors)`` of Tucker rank ``<= rank``.

    Mode by mode, the factor is taken from the current (already truncated)
    core, which is then compressed along that mode.
    """
    core = np.asarray(T, dtype=float)
    factors = []
    for s, r in enumerate(rank):
        U = _leading_left_singular_vectors(_unfold(core, s), r)
        factors.append(U)
        core = _mode_dot(core, U.T, s)
    return core, factors


def t_hosvd(T, rank):
    """Truncated HOSVD: every factor from the original tensor's unfoldings."""
    T = np.asarray(T, dtype=float)
    factors = [_leading_left_singular_vectors(_unfold(T, s), r) for s, r in enumerate(rank)]
    core = _multi_mode_dot(T, factors, transpose=True)
    return core, factors


def tucker_to_tensor(core, factors):
    """``core x_1 U_1 ... x_N U_N``."""
    return _multi_mode_dot(core, factors)


def retract(T, rank, method="st_hosvd"):
    """Retraction onto Tucker rank ``<= rank``: ``(tensor, core, factors)``."""
    if method == "st_hosvd":
        core, factors = st_hosvd(T, rank)
    elif method == "t_hosvd":
        core, factors = t_hosvd(T, rank)
    else:
        raise ValueError(f"retraction must be one of {RETRACTIONS}, got {method!r}.")
    return tucker_to_tensor(core, factors), core, factors


def tangent_project(G, core, factors):
    """Orthogonal projection of ``G`` onto the tangent space at ``core x U``.

    With ``A = S x_1 U_1 ... x_N U_N`` (orthonormal ``U_j``):

    ``P(G) = (G x_j U_j^T for all j) x_j U_j + sum_j S x_j W_j x_{k!=j} U_k``,
    ``W_j = (I - U_j U_j^T) [G x_{k!=j} U_k^T]_(j) pinv(S_(j))``.

    The pseudo-inverse keeps ``P`` an orthogonal projection (idempotent and
    self-adjoint) even when a core unfolding is rank deficient.
    """
    G = np.asarray(G, dtype=float)
    N = G.ndim
    out = tucker_to_tensor(_multi_mode_dot(G, factors, transpose=True), factors)
    for j in range(N):
        others = [k for k in range(N) if k != j]
        # G contracted with U_k^T on every mode but j: shape p_j x r_{-j}
        Gj = _multi_mode_dot(G, [factors[k] for k in others], modes=others, transpose=True)
        Uj = factors[j]
        M = _unfold(Gj, j)
        M = M - Uj @ (Uj.T @ M)
        Wj = M @ np.linalg.pinv(_unfold(core, j))
        out = out + _multi_mode_dot(
            core, [Wj if k == j else factors[k] for k in range(N)]
        )
    return out


def tangent_project_surrogate(G, rank, method="st_hosvd"):
    """The authors' cheaper surrogate: the rank-``rank`` retraction of ``G``.

    It ignores the base point, is not a linear projection, and converges
    worse than :func:`tangent_project` (spec section 2.0); offered to
    reproduce the authors' numbers (``tangent="retract_gradient"``).
    """
    return retract(G, rank, method)[0]


def multilinear_rank(T, tol=1e-10):
    """Numerical rank of every mode unfolding (relative tolerance ``tol``)."""
    T = np.asarray(T, dtype=float)
    ranks = []
    for s in range(T.ndim):
        sv = np.linalg.svd(_unfold(T, s), compute_uv=False)
        ranks.append(int(np.sum(sv > tol * max(sv[0], np.finfo(float).tiny))) if sv.size else 0)
    return tuple(ranks)
