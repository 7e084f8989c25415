"""The set-up round of PFedHGP's fits: summaries, scaling, the first inducing inputs.

What a site computes from its rows before training (:func:`input_summary`,
:func:`target_summary`, :func:`cross_summary`; each sent only under the release
rules of :mod:`skfed.federated._release`) and what the server makes of them (the
input scaling, the initial global inducing inputs and the linear prior mean). Shared
by the variational fit (:mod:`._steps`) and the collapsed one (:mod:`._collapsed`).
Imports neither numba nor scipy.stats: a Flower site's process (a new one for every
message) that steps a collapsed fit loads no compiled kernel.
"""

import numpy as np

from ..federated._release import (
    MIN_ROWS_MOMENTS, sends_gram, sends_moments, sends_products, too_few_rows_warning,
)

__all__ = ["check_setup_scale", "check_pooled_scale", "farthest_point_rows", "grid_in_box",
           "LINEAR_MEAN_ALPHA", "input_summary", "target_summary", "cross_summary",
           "linear_mean", "row_shift", "weighted_median", "input_setup"]


def _tril_pack(A):
    # imported here: ._linalg loads numba (its kernels), which the collapsed site never runs
    from ._linalg import tril_pack

    return tril_pack(A)


def _tril_unpack(v, m, symmetric=False):
    from ._linalg import tril_unpack

    return tril_unpack(v, m, symmetric=symmetric)


def _scaled_sum_of_squares(v):
    """``(max |v|, sum v^2)`` of a 1-d array, the sum computed as
    ``a^2 ||v / a||^2`` (``a = max |v|``) so that an overflow shows as an inf
    of this product (no warning, no silent NaN downstream)."""
    v = np.asarray(v, dtype=float)
    a = float(np.max(np.abs(v))) if v.size else 0.0
    if a == 0.0 or not np.isfinite(a):
        return a, (0.0 if a == 0.0 else np.inf)
    with np.errstate(over="ignore", under="ignore"):  # tiny entries underflow harmlessly
        w = v / a
        return a, float(np.float64(a) * a * float(w @ w))


def check_setup_scale(X, y, label):
    """Refuse, before the set-up exchange, inputs whose sums of squares overflow.

    The set-up message (and the normalization it feeds) carries each client's
    sum of squares of ``y`` (of each ``y`` column) and of each ``X`` column; a
    value near ``1e155`` or larger makes it ``inf`` and every prediction NaN
    (or raises deep in the library). Raises ``ValueError`` naming the input,
    the client and the largest absolute value.
    """
    for name, A in (("y", y), ("X", X)):
        A = np.asarray(A, dtype=float)
        cols = A.reshape(A.shape[0], -1).T
        for j, col in enumerate(cols):
            a, ss = _scaled_sum_of_squares(col)
            if not np.isfinite(ss):
                where = f" (column {j})" if cols.shape[0] > 1 else ""
                raise ValueError(
                    f"{name}{where} of client {label!r} is out of range: its largest absolute "
                    f"value {a:.3g} makes the sum of squares overflow float64 (values must "
                    f"stay well below 1e154 in absolute value). Rescale {name} "
                    f"(e.g. divide it by a constant or use StandardScaler)."
                )


def check_pooled_scale(total, name):
    """Refuse a pooled set-up sum of squares that overflowed (the server's end)."""
    if not np.all(np.isfinite(np.asarray(total, dtype=float))):
        raise ValueError(
            f"{name} is out of range: the clients' pooled sum of squares overflows float64. "
            f"Rescale {name} (e.g. divide it by a constant or use StandardScaler)."
        )


def farthest_point_rows(X, m):
    """``m`` distinct rows of ``X`` spread out (greedy farthest-point traversal).

    Starts at the row nearest the mean, so the choice is deterministic.
    """
    U = np.unique(X, axis=0)
    if U.shape[0] < m:
        raise ValueError(f"need {m} distinct rows, got {U.shape[0]}")
    scale = U.std(axis=0)
    scale[scale == 0] = 1.0
    S = U / scale
    first = int(np.argmin(((S - S.mean(0)) ** 2).sum(1)))
    chosen = [first]
    dist = ((S - S[first]) ** 2).sum(1)
    for _ in range(m - 1):
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, ((S - S[nxt]) ** 2).sum(1))
    Z = U[np.sort(chosen)] if U.shape[1] > 1 else np.sort(U[chosen], axis=0)
    return np.array(Z, dtype=float)


def grid_in_box(lo, hi, m, rng):
    """``m`` inducing inputs in the box: an even grid for d=1, scrambled Halton otherwise."""
    d = lo.shape[0]
    if d == 1:
        return np.linspace(lo[0], hi[0], m)[:, None]
    # imported here: scipy.stats takes about 1 s to import, and a Flower site's process
    # (a new one for every message) never places inducing inputs
    from scipy.stats import qmc

    seed = int(rng.integers(2**31 - 1))
    u = qmc.Halton(d=d, scramble=True, seed=seed).random(m)
    return lo + u * (hi - lo)


SQRT3 = float(np.sqrt(3.0))
# ridge penalty of the linear mean on the standardized inputs: scikit-learn Ridge's
# default alpha, negligible against the pooled rows of these data sets
LINEAR_MEAN_ALPHA = 1.0


def input_summary(X, wanted=True):
    """A client's set-up summary of its inputs: per-feature sum and sum of squares.

    Sent only if ``wanted`` (the server needs the input moments) and the
    client has enough rows and enough nonzero entries in each column that is
    not all zero (:func:`skfed.federated._release.sends_moments`: the sums of
    one or two nonzero values give the values); otherwise nothing. Never a
    minimum, maximum or other single row's value.
    """
    if not wanted or not sends_moments(X):
        return {}
    return {"sum_x": X.sum(axis=0), "sum_x2": np.einsum("ij,ij->j", X, X)}


def target_summary(y):
    """A client's set-up sums of its targets: none unless each output has no or at least
    ``MIN_ROWS_MOMENTS`` nonzero values (and, for several outputs, each cross product
    ``sum_i y_iq y_ir`` is a sum of no or of at least that many nonzero products)."""
    y = np.asarray(y, dtype=float)
    if not sends_moments(y) or (y.ndim == 2 and not sends_products(y)):
        return {}
    if y.ndim == 1:
        return {"sum_y": y.sum(), "sum_y2": y @ y}
    return {"sum_y": y.sum(axis=0), "yty": _tril_pack(y.T @ y)}


def cross_summary(X, y):
    """A client's set-up cross products for the linear mean: ``X^T X`` (packed lower
    triangle) and ``X^T y``, only with ``MIN_ROWS_MOMENTS`` rows or more
    (:func:`skfed.federated._release.sends_gram`).

    With the sums and sums of squares they are the first and second moments
    of the rows ``(x, y)``: these fix the centred rows only up to a rotation
    of the ``n - 1`` dimensional space orthogonal to the ones vector: for
    ``n >= 3`` a continuum of row sets gives the same message (unless all the
    client's rows are equal, when the sums alone already give them, as before).
    A client where some entry is a sum over one or two nonzero products (an
    indicator column set on one row makes ``sum_i x_ij y_i`` that row's ``y``)
    sends nothing and is left out of the linear mean; so does one that sends
    no sums of ``X`` or ``y`` (:func:`input_summary`, :func:`target_summary`),
    which the linear mean needs with the products.
    """
    y = np.asarray(y, dtype=float)
    if not sends_gram(X, y):
        return {}
    return {"xtx": _tril_pack(X.T @ X), "xty": X.T @ y}


def linear_mean(messages, x_shift, x_scale, fallback_shift, alpha=LINEAR_MEAN_ALPHA):
    """The linear prior mean ``shift + x~ @ coef`` of ``y`` from the pooled moments.

    ``x~ = (x - x_shift) / x_scale`` are the model's inputs. A ridge fit (penalty
    ``alpha`` on ``coef`` in the model's input units, intercept free) on the
    pooled rows of the clients that sent their cross products
    (:func:`cross_summary`), in closed form from their sums. Returns ``(shift,
    coef, var)``: ``var`` is the pooled residual variance (for 2-D ``y`` the
    ``Q x Q`` residual covariance), for ``normalize_y``. Without any client's
    sums: ``fallback_shift``, a zero ``coef`` and ``var=None``.
    """
    msgs = [m for m in messages if "xty" in m]
    x_shift = np.asarray(x_shift, dtype=float)
    x_scale = np.asarray(x_scale, dtype=float)
    d = x_shift.shape[0]
    if not msgs:
        first = np.asarray(fallback_shift, dtype=float)
        return fallback_shift, np.zeros((d,) + first.shape), None
    n = sum(float(m["n"]) for m in msgs)
    mx = sum(np.asarray(m["sum_x"], dtype=float) for m in msgs) / n
    my = sum(np.asarray(m["sum_y"], dtype=float) for m in msgs) / n
    Sxx = _tril_unpack(sum(np.asarray(m["xtx"], dtype=float) for m in msgs), d,
                      symmetric=True) / n
    Sxy = sum(np.asarray(m["xty"], dtype=float) for m in msgs) / n
    # centred moments in the model's input units
    Cxx = (Sxx - np.outer(mx, mx)) / np.outer(x_scale, x_scale)
    Cxy = (Sxy - np.multiply.outer(mx, my)) / (x_scale if my.ndim == 0 else x_scale[:, None])
    coef = np.linalg.solve(Cxx + (alpha / n) * np.eye(d), Cxy)
    shift = my - ((mx - x_shift) / x_scale) @ coef
    if my.ndim == 0:
        vy = sum(float(m["sum_y2"]) for m in msgs) / n - my**2
        var = max(float(vy - 2 * coef @ Cxy + coef @ Cxx @ coef), 0.0)
    else:
        Q = my.shape[0]
        vy = _tril_unpack(sum(np.asarray(m["yty"], dtype=float) for m in msgs), Q,
                         symmetric=True) / n - np.outer(my, my)
        var = vy - Cxy.T @ coef - coef.T @ Cxy + coef.T @ Cxx @ coef
    return (float(shift) if np.ndim(shift) == 0 else shift), coef, var


def row_shift(X, broadcast):
    """The prior mean of a client's rows: ``y_shift``, plus ``X @ y_coef`` (model
    units) with the linear mean."""
    shift = np.asarray(broadcast["y_shift"], dtype=float)
    coef = broadcast.get("y_coef")
    if coef is None:
        return shift
    return shift + X @ np.asarray(coef, dtype=float)


def weighted_median(values, weights):
    """Per-column weighted median of ``values`` (clients x features), weights per client."""
    order = np.argsort(values, axis=0, kind="stable")
    w = np.asarray(weights, dtype=float)[order]
    cum = np.cumsum(w, axis=0) / w.sum(axis=0)  # per column: w repeats the weights
    lo = np.argmax(cum >= 0.5 - 1e-12, axis=0)  # first reaching half the weight
    hi = np.argmax(cum > 0.5 + 1e-12, axis=0)   # first passing it (ties: the mean of the two)
    v = np.take_along_axis(values, order, axis=0)
    cols = np.arange(values.shape[1])
    return 0.5 * (v[lo, cols] + v[hi, cols])


def input_setup(messages, normalize_X, M, init_inducing_global, rng, n_features,
                input_bounds=None):
    """The server's input scaling and initial ``Z_g`` from the set-up summaries.

    Returns ``(Zg, z_scale, x_shift, x_scale)``; the model works on
    ``(X - x_shift) / x_scale``. The pooled centre and scale come from the
    clients' per-feature sums and sums of squares (clients with fewer than
    ``MIN_ROWS_MOMENTS`` rows, or a column with fewer nonzero values but some,
    send none and are left out; if none sent any,
    centre 0 and scale 1, with a warning): the row-weighted median of the
    client means, and the square root of the weighted medians of the
    within-client variance plus the squared deviation of the client means.
    With ``normalize_X`` the model works on the standardized inputs;
    otherwise on the raw ones (paper Sec. 4.2). ``Z_g`` starts in a box:
    ``input_bounds`` (raw units) if given, else centre +- sqrt(3) scale per
    feature (the range of uniform inputs, so the paper's grid on ``[0, 10]``
    is reproduced on its uniform inputs); never the clients' minima and
    maxima, which are raw values. ``z_scale`` (box width / 10) scales the
    Adam steps of the inducing inputs: the paper's ``lr=0.1`` is for a range
    of 10.
    """
    msgs = [m for m in messages if "sum_x" in m]
    if msgs:
        n = np.array([float(m["n"]) for m in msgs])
        mean = np.array([np.asarray(m["sum_x"], dtype=float) for m in msgs]) / n[:, None]
        check_pooled_scale(sum(np.asarray(m["sum_x2"], dtype=float) for m in msgs), "X")
        var = np.maximum(np.array([np.asarray(m["sum_x2"], dtype=float) for m in msgs])
                         / n[:, None] - mean**2, 0.0)
        # the pooled variance is within + between clients; their row-weighted
        # medians over the clients instead of means, so that one client's
        # outlying rows do not set every client's scale
        shift = weighted_median(mean, n)
        var = weighted_median(var, n) + weighted_median((mean - shift) ** 2, n)
        scale = np.where(var > 0, np.sqrt(var), 1.0)
    else:
        shift, scale = np.zeros(int(n_features)), np.ones(int(n_features))
        if normalize_X or input_bounds is None:
            too_few_rows_warning(
                "the pooled input centre and scale", MIN_ROWS_MOMENTS,
                "the inputs are taken as centred with unit scale"
                + ("" if input_bounds is not None else "; pass input_bounds"))
    if input_bounds is not None:
        lo, hi = (np.asarray(b, dtype=float) for b in input_bounds)
        if normalize_X:
            lo, hi = (lo - shift) / scale, (hi - shift) / scale
    elif normalize_X:
        lo, hi = np.full(shift.shape, -SQRT3), np.full(shift.shape, SQRT3)
    else:
        lo, hi = shift - SQRT3 * scale, shift + SQRT3 * scale
    if not normalize_X:
        shift, scale = np.zeros(lo.shape), np.ones(lo.shape)
    if init_inducing_global is not None:
        Zg = (np.array(init_inducing_global, dtype=float) - shift) / scale
    else:
        Zg = grid_in_box(lo, hi, M, rng)
    width = np.where(hi > lo, hi - lo, 1.0)
    return Zg, width / 10.0, shift, scale
