"""Tucker-manifold machinery: rank checks, retraction and tangent-space projection.

Conventions (C-order, as tensorly): ``tl.unfold(T, s)`` is the mode-``s``
matricization, ``vec(X) = X.reshape(-1)`` and a coefficient tensor of shape
``output_shape + tensor_shape`` is matricized as ``A.reshape(q, p)``. Ranks,
singular values and the algorithms do not depend on this choice (the paper
uses the column-major Kolda ordering).
"""

import math
import numbers

import numpy as np
from ._kernels import (
    hosvd_flat,
    leading_left_vectors,
    noisy_tangent_gradient,
    tangent_apply,
    tangent_setup,
)

__all__ = [
    "check_tucker_rank",
    "st_hosvd",
    "t_hosvd",
    "retract",
    "tucker_to_tensor",
    "tangent_project",
    "TangentProjector",
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
    return _check_rank(rank, shape, name)


def _check_rank(rank, shape, name="rank", tensor=None):
    """:func:`check_tucker_rank`, its messages about the tensor named ``tensor``.

    ``tensor=None``: the estimators' coefficient tensor (whose rank may also be
    ``'auto'``); else the argument holding the tensor of the public helpers
    (``"T"``).
    """
    shape = tuple(int(s) for s in shape)
    given = rank
    if isinstance(rank, numbers.Integral) and not isinstance(rank, bool):
        rank = (int(rank),) * len(shape)
    try:
        rank = tuple(rank)
    except TypeError:
        kinds = "an int or a tuple of ints" if tensor else "'auto', an int or a tuple of ints"
        raise ValueError(f"{name} must be {kinds}, got {given!r}.") from None
    if len(rank) != len(shape) or not all(
        isinstance(r, numbers.Integral) and not isinstance(r, bool) for r in rank
    ):
        of = (f"{tensor}, of shape {shape}" if tensor else
              f"the coefficient tensor of shape {shape}, response modes first")
        raise ValueError(
            f"{name} must hold {len(shape)} integers (one per mode of {of}), got {given!r}."
        )
    rank = tuple(int(r) for r in rank)
    for s, (r, n) in enumerate(zip(rank, shape)):
        if not 1 <= r <= n:
            why = "cannot exceed its size" if r > n else "is at least 1"
            where = f"{tensor} has shape {shape}" if tensor else f"coefficient shape {shape}"
            raise ValueError(
                f"{name}[{s}] = {r} is not in [1, {n}]: the rank of a mode {why} ({where})."
            )
    for s, r in enumerate(rank):
        others = math.prod(rank[:s] + rank[s + 1:])  # exact ints: as np.prod, faster
        if r > others:
            raise ValueError(
                f"{name} = {rank} is infeasible: {name}[{s}] = {r} exceeds the product "
                f"of the other ranks ({others}), so no tensor has this Tucker rank."
            )
    return rank


def _as_tensor(T, name="T", copy=True):
    """``T`` as a float64 array, or a ValueError naming it.

    ``copy=True``: a new C-order array (the kernels' one array type), else
    ``np.asarray``.
    """
    try:
        if copy:
            return np.array(T, dtype=float, order="C")
        return np.asarray(T, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of real numbers: {exc}") from None


def _not_finite(T, name="T", error=ValueError):
    """The error for a tensor ``T`` with NaN or infinite entries."""
    bad = int(T.size - np.count_nonzero(np.isfinite(T)))
    return error(f"{name} must be finite, got {bad} NaN or infinite entries "
                 f"(of {T.size}, shape {T.shape}).")


def _unfold(T, mode):
    """Mode-``mode`` unfolding, C order: the same array as ``tensorly.unfold(T, mode)``.

    tensorly's numpy backend computes ``moveaxis(T, mode, 0).reshape(T.shape[mode],
    -1)``; the same transpose spelled out skips its backend dispatch and
    ``moveaxis``'s axis normalization. (The retraction's numba kernel uses
    cyclically rotated unfoldings, a permutation of these columns.)
    """
    order = (mode,) + tuple(range(mode)) + tuple(range(mode + 1, T.ndim))
    return T.transpose(order).reshape(T.shape[mode], -1)


def _mode_product(T, M, mode):
    """``T x_mode M`` for ``M`` of shape ``(a, T.shape[mode])``: one matmul, C order.

    Same value as ``tensorly.tenalg.mode_dot(T, M, mode)`` without the
    unfold/fold copies: the modes before ``mode`` are a batch dimension of a
    stacked matmul, the ones after it the columns.
    """
    shape = T.shape
    n = shape[mode]
    new_shape = shape[:mode] + (M.shape[0],) + shape[mode + 1:]
    if mode == len(shape) - 1:
        out = T.reshape(-1, n) @ M.T
    elif mode == 0:
        out = M @ T.reshape(n, -1)
    else:
        out = M @ T.reshape(math.prod(shape[:mode]), n, -1)
    return out.reshape(new_shape)


# Gram eigen-decomposition is used when lambda_r - lambda_{r+1} > _GAP_TOL lambda_1;
# its subspace error is then at most about eps / _GAP_TOL (2e-12), else the SVD decides
_GAP_TOL = 1e-4


def _leading_left_singular_vectors(M, r):
    """Top-``r`` left singular vectors of a matrix ``M``, signs normalized.

    See :func:`~skfed.tensor._kernels.leading_left_vectors` (eigenvectors of
    ``M M^T``, the SVD of ``M`` when the Gram is not conclusive; the
    largest-magnitude entry of each column is positive).
    """
    return leading_left_vectors(np.array(M, dtype=float, order="C", ndmin=2), int(r), _GAP_TOL)


def _hosvd(T, rank, sequential):
    """``(tensor, core, factors)``, unchecked: ``T`` a C-order float64 array, ``rank`` valid."""
    out, core, factors = hosvd_flat(T.reshape(-1), np.array(T.shape, dtype=np.int64),
                                    np.array(rank, dtype=np.int64), sequential, _GAP_TOL)
    return out.reshape(T.shape), core.reshape(tuple(rank)), list(factors)


def _checked_hosvd(T, rank, sequential, check_finite=True):
    """:func:`_hosvd` of the public helpers: ``T`` converted (own copy), the rank checked.

    A rank above a mode's size would make the kernel read out of bounds.
    ``check_finite=False`` (:func:`retract`, called on every Stage-I step)
    leaves the finiteness to the kernel, whose linear algebra refuses NaN and
    inf with a ``LinAlgError``; that error is then re-raised naming ``T``,
    still a ``LinAlgError`` (a ``ValueError``), which the estimators report as
    a numerical client failure.
    """
    T = _as_tensor(T)
    rank = _check_rank(rank, T.shape, tensor="T")
    if check_finite and not np.isfinite(T).all():
        raise _not_finite(T)
    try:
        return _hosvd(T, rank, sequential)
    except np.linalg.LinAlgError:
        if np.isfinite(T).all():
            raise
        raise _not_finite(T, error=np.linalg.LinAlgError) from None


def st_hosvd(T, rank):
    """Sequentially truncated HOSVD: ``(core, factors)`` of Tucker rank ``<= rank``.

    Mode by mode, the factor is taken from the current (already truncated)
    core, which is then compressed along that mode. Factors are the leading
    left singular vectors of the unfoldings, computed from their Gram
    matrices when that is accurate (see
    :func:`~skfed.tensor._kernels.leading_left_vectors`), the
    largest-magnitude entry of each column positive.

    ``T`` must be finite and ``rank`` a valid Tucker rank for its shape
    (:func:`check_tucker_rank`), else a ``ValueError``.
    """
    return _checked_hosvd(T, rank, True)[1:]


def t_hosvd(T, rank):
    """Truncated HOSVD: every factor from the original tensor's unfoldings.

    ``T`` must be finite and ``rank`` a valid Tucker rank for its shape
    (:func:`check_tucker_rank`), else a ``ValueError``.
    """
    return _checked_hosvd(T, rank, False)[1:]


def _retract(T, rank, method):
    """:func:`retract` unchecked, for the fits' steps: their rank and retraction were
    checked once at set-up, and they check the tensors' finiteness themselves."""
    return _hosvd(np.array(T, dtype=float, order="C"), rank, method == "st_hosvd")


def tucker_to_tensor(core, factors):
    """``core x_1 U_1 ... x_N U_N``."""
    out = np.asarray(core, dtype=float)
    for s, U in enumerate(factors):
        out = _mode_product(out, U, s)
    return out


def retract(T, rank, method="st_hosvd"):
    """Retraction onto Tucker rank ``<= rank``: ``(tensor, core, factors)``.

    ``rank`` must be a valid Tucker rank for ``T.shape``
    (:func:`check_tucker_rank`), else a ``ValueError``; a ``T`` with NaN or
    inf raises ``numpy.linalg.LinAlgError`` (a ``ValueError``) naming ``T``.
    """
    if method not in RETRACTIONS:
        raise ValueError(f"retraction must be one of {RETRACTIONS}, got {method!r}.")
    # decomposition and reconstruction in one compiled call
    return _checked_hosvd(T, rank, method == "st_hosvd", check_finite=False)


class TangentProjector:
    """The projection :func:`tangent_project` at one base point, set up once.

    Everything that depends only on the base point ``A = S x_1 U_1 ... x_N
    U_N`` is computed once (per Stage-I round) by the numba kernel
    :func:`~skfed.tensor._kernels.tangent_setup` and packed in one buffer:
    the pseudo-inverses of the core unfoldings, those pseudo-inverses
    multiplied by the factors of the later modes, and the partial
    reconstructions ``S x_{k<j} U_k``. A call then costs ``N`` mode products
    for ``C = G x_k U_k^T`` (prefix by prefix), one contraction per mode for
    ``W_j`` and ``2 N`` mode products for the result (Horner's scheme over
    the modes, see :func:`~skfed.tensor._kernels.tangent_apply`), all in one
    compiled call.

    Parameters
    ----------
    core : ndarray of shape (r_1, ..., r_N)
    factors : list of ndarray of shape (p_j, r_j), orthonormal columns
    """

    def __init__(self, core, factors):
        core = np.asarray(core, dtype=float)
        self.shape = tuple(U.shape[0] for U in factors)
        self._dims = np.array(self.shape, dtype=np.int64)
        self._ranks = np.array(core.shape, dtype=np.int64)
        # new writable C-order arrays: the kernel always sees one array type
        # (a broadcast's arrays are read-only), so it compiles once
        flat = np.concatenate([np.asarray(U, dtype=float).reshape(-1) for U in factors])
        self._buffer, self._offsets = tangent_setup(
            np.array(core, order="C").reshape(-1), self._dims, self._ranks, flat
        )

    def __call__(self, G):
        G = np.asarray(G, dtype=float)
        if G.shape != self.shape:
            raise ValueError(f"G has shape {G.shape}, expected {self.shape}.")
        g = np.ascontiguousarray(G).reshape(-1)
        if not g.flags.writeable:
            g = g.copy()
        return self.apply_flat(g)

    def apply_flat(self, g):
        """``P(G)`` for ``G`` given flat (C order) as a writeable float64 array.

        The call without its checks. Returns the tensor, of shape ``shape``.
        """
        out = tangent_apply(g, self._dims, self._ranks, self._buffer, self._offsets)
        return out.reshape(self.shape)

    def apply_noisy(self, m, n, sigma, z):
        """``P(-m / n + sigma z)`` (:func:`~skfed.tensor._kernels.noisy_gradient`), flat.

        The Stage-I client step's gradient, noise and projection in one
        compiled call; ``m`` and ``z`` flat, writeable float64 (``z`` may be
        empty when ``sigma == 0``). Returns the tensor, of shape ``shape``.
        """
        out = noisy_tangent_gradient(m, float(n), float(sigma), z, self._dims, self._ranks,
                                     self._buffer, self._offsets)
        return out.reshape(self.shape)


def tangent_project(G, core, factors):
    """Orthogonal projection of ``G`` onto the tangent space at ``core x U``.

    With ``A = S x_1 U_1 ... x_N U_N`` (orthonormal ``U_j``):

    ``P(G) = (G x_j U_j^T for all j) x_j U_j + sum_j S x_j W_j x_{k!=j} U_k``,
    ``W_j = (I - U_j U_j^T) [G x_{k!=j} U_k^T]_(j) pinv(S_(j))``.

    The pseudo-inverse keeps ``P`` an orthogonal projection (idempotent and
    self-adjoint) even when a core unfolding is rank deficient. To project
    many tensors at the same base point, build one :class:`TangentProjector`.
    """
    return TangentProjector(core, factors)(G)


def tangent_project_surrogate(G, rank, method="st_hosvd"):
    """The authors' cheaper surrogate: the rank-``rank`` retraction of ``G``.

    It ignores the base point, is not a linear projection, and converges
    worse than :func:`tangent_project` (measured on the authors' simulation
    design, ``doc/results/tensor_regression.md``); offered to
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
