"""The two stages of personalized federated tensor regression, and the initializer.

Inside these steps a client's covariates are the matrix ``Xm`` of shape
``(n_k, p)`` (rows ``vec(X_i)``), its responses ``Ym`` of shape ``(n_k, q)``
and a coefficient tensor ``A`` of shape ``output_shape + tensor_shape`` is
used as the ``(q, p)`` matrix ``A.reshape(q, p)``, so that
``<A, X_i> = A.reshape(q, p) @ vec(X_i)``. Losses use the paper's scaling
``(1 / (2 n_k)) sum_i ||Y_i - <A, X_i>||_F^2``.
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..federated import ClientData, FederatedAlgorithm, PhasedAlgorithm
from ..federated._release import sends_sums
from ..privacy import gaussian_mechanism, gaussian_noise, pftr_noise_multiplier
from ._kernels import clip_residuals, fista_lasso_gram, noisy_gradient, weighted_step
from ._rank import make_feasible, ratio_rank, vote_ranks
from ._scaling import N_PASSES, ScalingRound
from ._tucker import TangentProjector, _retract, check_tucker_rank, tangent_project

__all__ = [
    "SiteData",
    "check_client_range",
    "prepare_site",
    "site_intercept",
    "client_failure",
    "admm_init",
    "fit_deviation",
    "local_stage_one",
    "clip_rows",
    "InitAlgorithm",
    "MomentInit",
    "PrivateCentring",
    "clipped_moment",
    "pair_moment",
    "pair_weights",
    "StageOne",
    "StageTwo",
    "PersonalizedTensorPhases",
]


# ----------------------------------------------------------------------------
# a site's rows: range check, local centring, intercepts


@dataclass(frozen=True, eq=False)
class SiteData(ClientData):
    """A client's rows centred on their own means (``fit_intercept=True``).

    ``x_mean`` and ``y_mean`` stay on the site; they give its intercept.
    ``sums_releasable``: whether the raw rows' per-column sums may be sent
    (:func:`skfed.federated._release.sends_sums`, checked before centring).
    ``gram_releasable``: whether a model fitted to the rows may be sent
    (:func:`skfed.federated._release.sends_gram`, on the raw rows; set only by
    the steps that send one).
    """

    x_mean: np.ndarray | None = None
    y_mean: np.ndarray | None = None
    sums_releasable: bool = False
    gram_releasable: bool = False


def check_client_range(X, Y, label):
    """Reject a client's rows whose squares or products overflow float64.

    Every step forms sums of squares (``X^T X``, row norms, residual norms)
    and cross products (``Y^T X``); once the sum of squares of ``X`` or of
    ``y`` overflows they become ``inf`` or ``nan`` deep inside a step.
    Values that pass (e.g. scales of ``1e10``) are left as they are. Raises
    a ``ValueError`` naming the argument and the client.
    """
    # then ||X||_F ||Y||_F, which bounds the cross products, is finite too
    for name, arr in (("X", X), ("y", Y)):
        with np.errstate(over="ignore", invalid="ignore"):
            total = float(np.einsum("ij,ij->", arr, arr))
        if not math.isfinite(total):
            raise ValueError(
                f"{name} of client {label!r} is out of range: its largest absolute value "
                f"is {np.max(np.abs(arr)):.3g} and the sum of its squares overflows float64; "
                f"rescale {name} (e.g. divide it by its scale or use StandardScaler) ({name})."
            )


def prepare_site(data, fit_intercept):
    """The rows a client's steps see: range-checked and, with an intercept, centred.

    Centring is local (each client on its own means), so the shared and
    personalized tensors are fitted to within-client variation and every
    client keeps its own intercept (:func:`site_intercept`).
    """
    check_client_range(data.X, data.y, data.label)
    if not fit_intercept:
        return data
    x_mean = data.X.mean(axis=0)
    y_mean = data.y.mean(axis=0)
    return SiteData(X=data.X - x_mean, y=data.y - y_mean, sample_weight=data.sample_weight,
                    label=data.label, index=data.index, x_mean=x_mean, y_mean=y_mean,
                    sums_releasable=sends_sums(data.X, data.y))


def site_intercept(data, coef):
    """``mean(Y) - <coef, mean(X)>`` of a client (zeros without centring), shape ``(q,)``."""
    q = data.y.shape[1]
    if getattr(data, "x_mean", None) is None:
        return np.zeros(q)
    return data.y_mean - np.asarray(coef).reshape(q, -1) @ data.x_mean


_ADVICE = {
    "init": "standardize X and y (e.g. StandardScaler), or raise init_rho or lower "
            "init_lambda",
    "stage_one": "lower step_size (the step is not scale-free: it should stay below about "
                 "1 / ||X^T X / n||_op) or standardize X and y",
    "stage_two": "standardize X and y, or raise alpha",
    "local": "standardize X and y, or lower step_size",
}
_PHASE_NAMES = {"init": "the initializer", "stage_one": "Stage I", "stage_two": "Stage II",
                "local": "the local two-stage fit"}


def client_failure(exc, label, phase, rnd):
    """A ``FloatingPointError`` naming the client, the phase and round, and what to change."""
    where = _PHASE_NAMES[phase] + ("" if rnd is None else f" (round {rnd} of the phase)")
    return FloatingPointError(
        f"client {label!r} failed in {where}: {type(exc).__name__}: {exc}. "
        f"To fix: {_ADVICE[phase]}."
    )


def check_finite_step(name, *arrays):
    """Raise ``FloatingPointError`` when a step produced a non-finite value."""
    for a in arrays:
        if not np.all(np.isfinite(a)):
            raise FloatingPointError(f"{name} is not finite")


# the numerical failures of a client step that are reported as client failures
NUMERICAL_ERRORS = (np.linalg.LinAlgError, ArithmeticError)


# ----------------------------------------------------------------------------
# local computations


def clip_rows(M, tau):
    """Scale every row of ``M`` to Frobenius norm ``<= tau`` (``T_tau`` row-wise)."""
    norms = np.sqrt(np.einsum("ij,ij->i", M, M))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(norms > tau, tau / norms, 1.0)
    return M * scale[:, None]


def _svt(M, threshold):
    U, s, Vt = np.linalg.svd(M, full_matrices=False)
    return (U * np.maximum(s - threshold, 0.0)) @ Vt


def _clip_singular_values(M, bound):
    U, s, Vt = np.linalg.svd(M, full_matrices=False)
    return (U * np.minimum(s, bound)) @ Vt


def _soft(M, threshold):
    return np.sign(M) * np.maximum(np.abs(M) - threshold, 0.0)


def admm_init(Xm, Ym, lam=0.02, omega=0.005, zeta=0.5, rho=1.0, max_iter=150, tol=1e-4,
              rows=None):
    """Preliminary low-rank + sparse estimate of one client (paper Sec. 4.1).

    The paper's objective (11) is not in our copy; this ADMM is reconstructed
    from the authors' code.

    Solves ``min_{A, D} (1/(2n)) sum ||y_i - (A + D) x_i||^2 + lam ||A||_*
    + omega ||D||_1`` subject to ``||D||_op <= zeta`` by ADMM. The nuclear and
    operator norms are those of the ``(q, p)`` matricization (the paper's
    ``[S_X]``), or, with ``rows``, of the C-order reshape of the ``(q, p)``
    matrix to ``rows`` rows (for a scalar response, ``rows = p_1`` gives the
    first covariate mode's unfolding, where the ``1 x p`` matricization would
    reduce the nuclear norm to a ridge penalty).

    Returns
    -------
    A, D : ndarray of shape (q, p)
    n_iter : int
    """
    n, p = Xm.shape
    q = Ym.shape[1]
    mat = (q, p) if rows is None else (int(rows), q * p // int(rows))

    def svt(M, t):
        return _svt(M.reshape(mat), t).reshape(q, p)

    def clip_op(M, b):
        return _clip_singular_values(M.reshape(mat), b).reshape(q, p)

    # Ghat = X^T X / n + rho I is well conditioned (rho > 0); its inverse is reused
    Ghat_inv = np.linalg.inv(Xm.T @ Xm / n + rho * np.eye(p))
    C = Ym.T @ Xm / n
    A = np.zeros((q, p))
    D = np.zeros((q, p))
    Z = np.zeros((q, p))
    V = np.zeros((q, p))
    U = np.zeros((q, p))
    UZ = np.zeros((q, p))
    UV = np.zeros((q, p))
    it = 0
    for it in range(1, max_iter + 1):
        A_old, D_old, Z_old, V_old = A, D, Z, V
        B = (C + rho * (A + D - U)) @ Ghat_inv
        Z = svt(A + UZ, lam / rho)
        V = clip_op(D + UV, zeta)
        A = 0.5 * ((B - D + U) + (Z - UZ))
        D = _soft(0.5 * ((B - A + U) + (V - UV)), omega / (2.0 * rho))
        U = U + B - A - D
        UZ = UZ + A - Z
        UV = UV + D - V
        primal = max(np.linalg.norm(B - A - D), np.linalg.norm(A - Z), np.linalg.norm(D - V))
        dual = max(
            rho * np.linalg.norm((A - A_old) + (D - D_old)),
            rho * np.linalg.norm(Z - Z_old),
            rho * np.linalg.norm(V - V_old),
        )
        if primal <= tol and dual <= tol:
            break
    return A, D, it


def lipschitz(Xm):
    """``||X^T X / n||_op``: the Lipschitz constant of the Stage-II gradient."""
    n = Xm.shape[0]
    if not Xm.size:
        return 0.0
    return float(np.linalg.svd(Xm, compute_uv=False)[0] ** 2 / n)


def stage_two_penalty(alpha, n_samples, n_coef, lip, scaling="adaptive"):
    """``omega_k``: ``alpha`` itself, or ``alpha sqrt(log(max(qp, 2)) / n_k) sqrt(L_k)``."""
    if scaling == "none":
        return float(alpha)
    return float(alpha) * math.sqrt(math.log(max(n_coef, 2)) / n_samples) * math.sqrt(lip)


def fit_deviation(Xm, R0, alpha, n_iter, scaling="adaptive"):
    """Stage II of one client: the lasso (7) for ``B_k`` by FISTA, shared part fixed.

    Parameters
    ----------
    Xm : ndarray of shape (n, p)
    R0 : ndarray of shape (n, q)
        Residuals ``Y - <A_0, X>`` of the fixed shared part.
    alpha : float
        Penalty scale (see :func:`stage_two_penalty`).
    n_iter : int
        FISTA iterations.

    Returns
    -------
    B : ndarray of shape (q, p)
    omega : float
        The l1 weight used.
    """
    n, p = Xm.shape
    q = R0.shape[1]
    gram = np.ascontiguousarray(Xm.T @ Xm / n)
    lip = lipschitz(Xm)
    omega = stage_two_penalty(alpha, n, q * p, lip, scaling)
    if lip <= 0:
        return np.zeros((q, p)), omega
    c = np.ascontiguousarray(R0.T @ Xm / n)
    B = fista_lasso_gram(gram, c, np.zeros((q, p)), 1.0 / lip, omega, int(n_iter))
    return B, omega


def _gradient(Xm, Ym, Am):
    """``-(1/n) R^T X`` with ``R = Y - X A^T``: the gradient of the paper's loss."""
    R = Ym - Xm @ Am.T
    return -(R.T @ Xm) / Xm.shape[0]


def local_stage_one(Xm, Ym, A_init, rank, step_size, n_iter, tangent="exact",
                    retraction="st_hosvd"):
    """Single-client Stage I (S1): Riemannian gradient descent, no clipping or noise.

    Returns ``(A, core, factors)`` with ``A`` of the coefficient shape.
    """
    shape = A_init.shape
    q, p = Ym.shape[1], Xm.shape[1]
    if step_size == "auto":
        lip = lipschitz(Xm)
        step_size = 1.0 / lip if lip > 0 else 1.0
    A, core, factors = _retract(A_init, rank, retraction)
    for it in range(int(n_iter)):
        _check_finite(A, it)
        G = _gradient(Xm, Ym, A.reshape(q, p)).reshape(shape)
        if tangent == "exact":
            G = tangent_project(G, core, factors)
        else:
            G = _retract(G, rank, retraction)[0]  # the authors' surrogate
        A, core, factors = _retract(A - step_size * G, rank, retraction)
    return A, core, factors


def _check_finite(A, it):
    if not np.all(np.isfinite(A)):
        raise FloatingPointError(
            f"Stage I diverged (non-finite shared tensor after {it} steps); lower "
            "step_size or standardize X."
        )


# ----------------------------------------------------------------------------
# federated algorithms


_NO_NOISE = np.zeros(0)


def _readonly_copy(a):
    # astype: numpy's own float64 dtype object even for arrays numba made (np.array
    # keeps theirs, and np.asarray(., dtype=float) of such an array is a view)
    out = np.asarray(a).astype(float)
    out.setflags(write=False)
    return out


def _factor_broadcast(A, core, factors):
    """The server's broadcast: ``A_0``, its core and factors, as read-only copies.

    Immutable arrays (as the engine delivers them anyway) let the clients of a
    round recognise the broadcast by identity (:meth:`StageOne._projector`),
    and leave the server's state writable.
    """
    msg = {"coef": _readonly_copy(A), "core": _readonly_copy(core)}
    for j, U in enumerate(factors):
        msg[f"factor_{j}"] = _readonly_copy(U)
    return msg


class InitAlgorithm(FederatedAlgorithm):
    """Initialization (paper Sec. 4.1) and optional rank vote (Sec. 4.2); two rounds.

    Round 0: every client computes its preliminary (ADMM) estimate locally and
    sends its row count and, for ``rank="auto"``, its locally selected ranks.
    Round 1: the largest client (first on ties) sends its preliminary
    estimate of the shared part, unperturbed (outside the DP guarantee).
    """

    def __init__(self, coef_shape, rank, admm_params, rank_scale=1.0, max_rank=None):
        self.coef_shape = tuple(coef_shape)
        self.rank = rank
        self.admm_params = dict(admm_params)
        self.rank_scale = rank_scale
        self.max_rank = max_rank

    def asks_every_client(self, server_state):
        # the rank vote and the largest client's estimate need every client
        return True

    def client_step(self, data, state, broadcast, rng):
        if state is None:
            A, D, _ = admm_init(data.X, data.y, **self.admm_params)
            check_finite_step("the ADMM estimate", A, D)
            A = A.reshape(self.coef_shape)
            message = {"n_samples": np.int64(data.n_samples)}
            if isinstance(self.rank, str):
                message["rank"] = np.array(
                    ratio_rank(A, data.n_samples, self.rank_scale, self.max_rank)
                )
            return {"A": A, "D": D.reshape(self.coef_shape)}, message
        if int(broadcast["k_star"]) == data.index:
            return state, {"coef": state["A"]}
        return state, {}

    def server_step(self, state, messages, rng):
        if state is None:
            keys = sorted(messages)
            sizes = np.array([int(messages[k]["n_samples"]) for k in keys])
            k_star = keys[int(np.argmax(sizes))]
            if isinstance(self.rank, str):
                rank = make_feasible(
                    vote_ranks([messages[k]["rank"] for k in keys]), self.coef_shape
                )
                local = {k: tuple(int(r) for r in messages[k]["rank"]) for k in keys}
            else:
                rank, local = tuple(self.rank), {}
            state = {"k_star": k_star, "rank": rank, "local_ranks": local}
            return state, {"k_star": np.int64(k_star), "rank": np.array(rank)}
        coef = [m["coef"] for m in messages.values() if "coef" in m]
        if not coef:
            raise RuntimeError("the largest client did not send its initial estimate.")
        return {**state, "init": np.array(coef[0])}, {}


def clipped_moment(X, Y, tau_x, tau_e, clip_quantile=0.9):
    """``(1/n) sum_i T_tau_e(Y_i) o T_tau_x(X_i)`` as a flat ``(q p,)`` array, and the levels.

    Minus the Stage-I gradient at ``A_0 = 0`` (the residuals are then the
    responses), with the same row-wise truncations: replacing one row changes
    it by at most ``2 tau_e tau_x / n`` in Frobenius norm. ``None`` levels
    are the ``clip_quantile`` quantile of the client's norms (outside the
    strict guarantee, as in Stage I).
    """
    norms = np.linalg.norm(X, axis=1)
    tau_x = float(np.quantile(norms, clip_quantile)) if tau_x is None else float(tau_x)
    Yc = np.array(Y, dtype=float, order="C")
    tau_e = clip_residuals(Yc, float(clip_quantile), np.nan if tau_e is None else float(tau_e))
    m = (Yc.T @ clip_rows(X, tau_x)).reshape(-1) / X.shape[0]
    return m, tau_x, float(tau_e)


def _pair_distances(M):
    """``||m_i - m_j||`` for every pair of rows of ``M`` (n x n)."""
    sq = np.einsum("ij,ij->i", M, M)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (M @ M.T)
    return np.sqrt(np.maximum(d2, 0.0))


def pair_weights(R, X, tau_e, tau_x):
    """Truncation weights of the pair terms ``(r_i - r_j) o (x_i - x_j)``, zero diagonal.

    ``min(1, tau_e / ||r_i - r_j||) min(1, tau_x / ||x_i - x_j||)``: every pair's
    difference truncated to the levels, like ``T_tau`` of a row.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        dr, dx = _pair_distances(R), _pair_distances(X)
        W = np.where(dr > tau_e, tau_e / dr, 1.0) * np.where(dx > tau_x, tau_x / dx, 1.0)
    np.fill_diagonal(W, 0.0)
    return W


def pair_moment(R, X, W):
    """``(1/n) sum_{i<j} W_ij (r_i - r_j) o (x_i - x_j)`` as ``(q p,)``: ``n`` times the
    pair form of the centred moment ``(1/n) sum_i (r_i - rbar) o (x_i - xbar)``.

    Without truncation (``W`` = 1 off the diagonal) it is exactly ``sum_i (r_i -
    rbar) o (x_i - xbar)``, so the intercept cancels without any mean being
    formed. Replacing one row changes its ``n - 1`` pair terms, each of norm at
    most ``tau_e tau_x``: the change of the moment over ``n`` is at most ``2 (n -
    1) tau_e tau_x / n^2 < 2 tau_e tau_x / n``, the sensitivity of the row form.
    """
    d = W.sum(axis=1)
    n = R.shape[0]
    return ((R * d[:, None]).T @ X - R.T @ (W @ X)).reshape(-1) / n


class MomentInit(FederatedAlgorithm):
    """Private initialization: one noisy clipped moment per client (one round).

    Each client sends ``M_k = (1/n_k) sum_i T_tau_e(Y_i) o T_tau_x(X_i)``
    (minus its truncated Stage-I gradient at ``A_0 = 0``, L2 sensitivity
    ``2 tau_e tau_x / n_k``) plus Gaussian noise of the Stage-I noise
    multiplier, i.e. one more release of the same Gaussian mechanism. The
    server takes the ``n_k``-weighted mean ``M`` and starts ``A_0`` at ``M``
    (before the retraction): ``E[Y o X] = <A, Cov(X)>``, so for standardized,
    roughly uncorrelated covariates ``M`` estimates ``A`` (the moment or
    spectral initializer of tensor regression); with ``rank="auto"`` it picks
    the Tucker rank of that tensor by the ratio criterion, which is
    post-processing of the noisy releases (no vote).
    """

    def __init__(self, coef_shape, rank, *, n_releases, epsilon, delta,
                 tau_x=None, tau_e=None, clip_quantile=0.9, rank_scale=1.0, max_rank=None,
                 accountant="paper", noise_multiplier=None, pairs=False):
        # noise_multiplier: the start's own multiplier when the budget is split among
        # kinds of releases (skfed.privacy.pftr_release_plan); None: n_releases equal ones
        self.noise_multiplier = noise_multiplier
        # pairs: the moment of pair differences of raw rows (a private intercept)
        self.pairs = bool(pairs)
        self.coef_shape = tuple(coef_shape)
        self.rank = rank
        self.n_releases = n_releases
        self.epsilon = epsilon
        self.delta = delta
        self.tau_x = tau_x
        self.tau_e = tau_e
        self.clip_quantile = clip_quantile
        self.rank_scale = rank_scale
        self.max_rank = max_rank
        self.accountant = accountant

    def asks_every_client(self, server_state):
        return True

    def client_step(self, data, state, broadcast, rng):
        if self.pairs:  # strict only: given levels
            tau_x, tau_e = float(self.tau_x), float(self.tau_e)
            Y = np.asarray(data.y, dtype=float)
            m = pair_moment(Y, data.X, pair_weights(Y, data.X, tau_e, tau_x)) / data.n_samples
        else:
            m, tau_x, tau_e = clipped_moment(data.X, data.y, self.tau_x, self.tau_e,
                                             self.clip_quantile)
        n = data.n_samples
        z = self.noise_multiplier
        if z is None:
            z = pftr_noise_multiplier(self.epsilon, self.delta, self.n_releases, self.accountant)
        sigma = 2.0 * tau_e * tau_x / n * z
        m = gaussian_mechanism(m, sigma, rng)  # checks sigma; the same draw as before
        check_finite_step("the clipped moment", m)
        state = {"tau_x": tau_x, "tau_e": tau_e, "sigma": sigma}
        return state, {"moment": m, "n_samples": np.int64(n)}

    def server_step(self, state, messages, rng):
        keys = sorted(messages)
        sizes = np.array([float(messages[k]["n_samples"]) for k in keys])
        moment = sum(w * np.reshape(messages[k]["moment"], -1)
                     for w, k in zip(sizes / sizes.sum(), keys))
        A = np.asarray(moment, dtype=float).reshape(self.coef_shape)
        if isinstance(self.rank, str):
            rank = make_feasible(
                ratio_rank(A, int(sizes.sum()), self.rank_scale, self.max_rank),
                self.coef_shape)
        else:
            rank = tuple(self.rank)
        return {"k_star": -1, "rank": rank, "local_ranks": {}, "init": A}, {}


class PrivateCentring(FederatedAlgorithm):
    """Private means for ``fit_intercept=True``: one round of noisy clipped sums.

    The paper has no intercept (it centres the data beforehand); centring each
    client on its exact means would make every centred row depend on all of
    the client's rows, so the per-row sensitivity of the later releases would
    not hold. Instead each client releases the sums of its rows clipped to
    Euclidean norms ``tau_x`` (covariates) and ``tau_y`` (responses), each
    plus Gaussian noise (replacing one row changes a sum by at most
    ``2 tau``, so ``sigma = 2 tau z``), and centres the rows of its later
    releases on these noisy means: given them (released values), replacing
    one row changes one centred row only, and the moment and Stage-I
    sensitivities hold again. The server pools the noisy sums into the
    population means of the shared intercept. Stage II and the personal
    intercept (nothing sent) use the exact local means.

    ``None`` levels are the ``clip_quantile`` quantile of the client's row
    norms (data-dependent: ``privacy_mode="paper"`` only).
    """

    def __init__(self, *, tau_x, tau_y, noise_multiplier, clip_quantile=0.9):
        self.tau_x = tau_x
        self.tau_y = tau_y
        self.noise_multiplier = noise_multiplier
        self.clip_quantile = clip_quantile

    def asks_every_client(self, server_state):
        return True

    def _level(self, M, tau):
        if tau is not None:
            return float(tau)
        return float(np.quantile(np.sqrt(np.einsum("ij,ij->i", M, M)), self.clip_quantile))

    def client_step(self, data, state, broadcast, rng):
        n = data.n_samples
        message, means, sigma = {"n_samples": np.int64(n)}, {}, {}
        for name, M, tau in (("x", data.X, self.tau_x), ("y", data.y, self.tau_y)):
            level = self._level(M, tau)
            sigma[name] = 2.0 * level * self.noise_multiplier
            total = gaussian_mechanism(clip_rows(M, level).sum(axis=0), sigma[name], rng)
            check_finite_step(f"the private sum of {name}", total)
            message[f"{name}_sum"] = total
            means[name] = total / n
        # the rows of every later release: centred on the released (noisy) means
        train = SiteData(X=data.X - means["x"], y=data.y - means["y"],
                         sample_weight=data.sample_weight, label=data.label, index=data.index)
        state = {"train": train, "local": prepare_site(data, True), "sigma": sigma}
        return state, message

    def server_step(self, state, messages, rng):
        keys = sorted(messages)
        n = float(sum(float(messages[k]["n_samples"]) for k in keys))
        x_mean = sum(np.asarray(messages[k]["x_sum"], dtype=float) for k in keys) / n
        y_mean = sum(np.asarray(messages[k]["y_sum"], dtype=float) for k in keys) / n
        return {"x_mean": x_mean, "y_mean": y_mean}, {}


class StageOne(FederatedAlgorithm):
    """Stage I (paper Sec. 3.1): DP Riemannian gradient rounds for the shared part ``A_0``.

    Each round a client clips its covariates and residuals row-wise, forms
    its gradient, adds Gaussian noise of the paper's standard deviation,
    projects it on the tangent space at the broadcast ``A_0`` and sends it
    with its row count. The server averages with weights ``n_k / n`` and
    retracts to the Tucker rank.
    """

    def __init__(self, coef_shape, rank, init, *, step_size, n_rounds, epsilon, delta,
                 tau_x=None, tau_e=None, clip_quantile=0.9, tangent="exact",
                 retraction="st_hosvd", n_releases=None, accountant="paper",
                 noise_multiplier=None, tau_grad=None, pairs=False):
        self.coef_shape = tuple(coef_shape)
        # pairs: gradients of pair differences of raw rows (a private intercept; given levels)
        self.pairs = bool(pairs)
        # the level of each row's projected gradient term (None: only tau_e and tau_x)
        self.tau_grad = tau_grad
        self.rank = tuple(rank)
        self.init = init
        self.step_size = step_size
        self.n_rounds = n_rounds
        # T of the noise formula: every Gaussian release of the fit (the rounds, plus
        # the private initializer's moment), so that they compose to (epsilon, delta)
        self.n_releases = n_rounds if n_releases is None else n_releases
        self.epsilon = epsilon
        self.delta = delta
        # how the multiplier is calibrated: "paper" (basic composition), "rdp", "pld"
        self.accountant = accountant
        self.tau_x = tau_x
        self.tau_e = tau_e
        self.clip_quantile = clip_quantile
        self.tangent = tangent
        self.retraction = retraction
        self._projector_cache = None
        # given when the budget is split among kinds of releases (pftr_release_plan)
        self._noise_multiplier = noise_multiplier
        self._coef_size = math.prod(self.coef_shape)
        self._broadcast_names = ("core",) + tuple(f"factor_{j}" for j in range(len(self.rank)))

    def client_init(self, data, rng):
        if self.pairs:  # the pair differences are truncated each round
            return {"X": data.X, "tau_x": float(self.tau_x), "tau_e": [], "sigma": []}
        norms = np.linalg.norm(data.X, axis=1)
        if self.tau_x is None:
            tau_x = float(np.quantile(norms, self.clip_quantile))
        else:
            tau_x = float(self.tau_x)
        return {"X": clip_rows(data.X, tau_x), "tau_x": tau_x, "tau_e": [], "sigma": []}

    def server_init(self, rng):
        A, core, factors = _retract(self.init, self.rank, self.retraction)
        state = {"coef": A, "core": core, "factors": factors, "grad_norm": []}
        return state, _factor_broadcast(A, core, factors)

    def _projector(self, broadcast):
        """The tangent projector at the broadcast ``A_0``, set up once per round.

        It depends only on the broadcast core and factors, so the clients of a
        round (one broadcast) share the projector set up by the first of them.
        The cache hits when the arrays are the very objects of the cached
        broadcast and immutable (read-only and owning their data, as the
        engine delivers them; the cache holds them, so their ids are not
        reused), or else when their values are equal.
        """
        cached = self._projector_cache
        if cached is not None:
            for name, b in zip(self._broadcast_names, cached[0]):  # a plain loop: per client
                if broadcast.get(name) is not b or b.base is not None or b.flags.writeable:
                    break
            else:
                return cached[2]
        # the broadcast's own objects for the identity check (np.asarray(., dtype=float)
        # may return a view, e.g. of an array whose dtype object numba made)
        objs = [broadcast[name] for name in self._broadcast_names]
        arrays = [np.asarray(a, dtype=float) for a in objs]
        key = tuple((a.shape, a.tobytes()) for a in arrays)
        if cached is not None and cached[1] == key:
            projector = cached[2]
        else:
            projector = TangentProjector(arrays[0], arrays[1:])
        self._projector_cache = (objs, key, projector)  # one atomic store: thread safe
        return projector

    def _noise_std(self, tau_e, tau_x, n_samples):
        """:func:`~skfed.privacy.pftr_noise_std`, the budget validated once per object.

        The same checks and the same expression, so the same float; the noise
        multiplier (a function of ``epsilon``, ``delta``, ``n_releases`` and
        ``accountant`` only) is computed on the first call.
        """
        multiplier = self._noise_multiplier
        if multiplier is None:
            multiplier = pftr_noise_multiplier(self.epsilon, self.delta, self.n_releases,
                                               self.accountant)
            self._noise_multiplier = multiplier
        if tau_e < 0 or tau_x < 0 or not (math.isfinite(tau_e) and math.isfinite(tau_x)):
            raise ValueError(
                f"truncation levels must be finite and >= 0, got {tau_e!r}, {tau_x!r}."
            )
        return 2.0 * tau_e * tau_x / n_samples * multiplier

    def _projected_weights(self, R, Xc, broadcast):
        """Row weights that truncate each row's projected term to ``tau_grad``.

        Each row adds ``P_T(r_i o x_i)`` (clipped ``r_i``, ``x_i``) to the sent
        projection, and ``P_T`` is linear, so scaling row ``i`` by ``min(1,
        tau_grad / ||P_T(r_i o x_i)||)`` bounds its term by ``tau_grad``: the
        sensitivity is ``2 min(tau_grad, tau_e tau_x) / n_k``. The orthogonal
        projection on the tangent space (dimension ``prod_s r_s + sum_s r_s
        (p_s - r_s)``) keeps only part of a row's term, so a level below
        ``tau_e tau_x`` cuts the noise of the rounds while clipping few rows
        (a derived choice; the paper bounds the sensitivity by ``tau_e tau_x``).
        """
        projector = self._projector(broadcast)
        norms = np.empty(R.shape[0])
        for i in range(R.shape[0]):
            norms[i] = np.linalg.norm(projector.apply_flat(np.outer(R[i], Xc[i]).reshape(-1)))
        level = float(self.tau_grad)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(norms > level, level / norms, 1.0)

    def _pair_step(self, R, X, broadcast):
        """``m`` of the pair form (:func:`pair_moment`) and the truncation level used.

        With ``tau_grad`` each pair's projected term is truncated too (one
        projection per pair: ``n (n - 1) / 2`` of them).
        """
        tau_e = float(self.tau_e)
        W = pair_weights(R, X, tau_e, float(self.tau_x))
        if self.tau_grad is not None and self.tangent == "exact":
            projector, level = self._projector(broadcast), float(self.tau_grad)
            for i in range(R.shape[0] - 1):
                for j in range(i + 1, R.shape[0]):
                    term = W[i, j] * np.outer(R[i] - R[j], X[i] - X[j]).reshape(-1)
                    norm = np.linalg.norm(projector.apply_flat(term))
                    if norm > level:
                        W[i, j] = W[j, i] = W[i, j] * level / norm
        return pair_moment(R, X, W), tau_e

    def client_step(self, data, state, broadcast, rng):
        A = np.asarray(broadcast["coef"])
        q, p = data.y.shape[1], data.X.shape[1]
        R = data.X @ A.reshape(q, p).T
        R = np.subtract(data.y, R, out=R)  # Y - X A^T, without a second (n, q) array
        if self.pairs:
            return self._client_pair_step(data, state, broadcast, rng, R)
        # T_tau_e row-wise, in place (R is this step's own array); NaN: the quantile level
        check_finite_step("the residual Y - <A_0, X> (the broadcast A_0 is too large for "
                          "this client's X)", R)
        tau_e = clip_residuals(R, float(self.clip_quantile),
                               np.nan if self.tau_e is None else float(self.tau_e))
        if not math.isfinite(tau_e):
            raise FloatingPointError(
                "the residual norms ||Y_i - <A_0, X_i>|| overflow (the broadcast A_0 is too "
                "large for this client's X)")
        n = data.n_samples
        sigma = self._noise_std(tau_e, state["tau_x"], n)
        if self.tau_grad is not None and self.tangent == "exact":
            R *= self._projected_weights(R, state["X"], broadcast)[:, None]
            sigma = self._capped(sigma, tau_e, state["tau_x"])
        return self._release((R.T @ state["X"]).reshape(-1), n, sigma, tau_e, state,
                             broadcast, rng)

    def _capped(self, sigma, tau_e, tau_x):
        """``sigma`` for the sensitivity ``2 min(tau_grad, tau_e tau_x) / n_k``."""
        bound = tau_e * tau_x
        return sigma * min(1.0, float(self.tau_grad) / bound) if bound > 0 else sigma

    def _client_pair_step(self, data, state, broadcast, rng, R):
        """The client step on pair differences of raw rows (a private intercept)."""
        check_finite_step("the residual Y - <A_0, X>", R)
        m, tau_e = self._pair_step(R, data.X, broadcast)
        n = data.n_samples
        sigma = self._noise_std(tau_e, state["tau_x"], n)
        if self.tau_grad is not None and self.tangent == "exact":
            sigma = self._capped(sigma, tau_e, state["tau_x"])
        return self._release(m, n, sigma, tau_e, state, broadcast, rng)

    def _release(self, m, n, sigma, tau_e, state, broadcast, rng):
        """The sent message: the gradient ``-m / n`` plus noise of ``sigma``, projected."""
        # the noise is drawn by skfed.privacy (flat: the same draws, in the same C order,
        # as of shape coef_shape; none when sigma == 0) and added inside the compiled
        # call, in one pass with the projection (scale 1: it is already sigma * z)
        noise = gaussian_noise(self._coef_size, sigma, rng)
        scale, noise = (0.0, _NO_NOISE) if noise is None else (1.0, noise)
        if self.tangent == "exact":  # gradient, noise and projection in one compiled call
            sent = self._projector(broadcast).apply_noisy(m, n, scale, noise)
        else:
            sent = _retract(  # the authors' surrogate (tangent_project_surrogate)
                noisy_gradient(m, float(n), scale, noise).reshape(self.coef_shape),
                self.rank, self.retraction)[0]
        check_finite_step("the projected gradient", sent)
        new_state = {**state, "tau_e": state["tau_e"] + [tau_e],
                     "sigma": state["sigma"] + [sigma]}
        return new_state, {"grad": sent, "n_samples": np.int64(n)}

    def server_step(self, state, messages, rng):
        msgs = list(messages.values())
        sizes = np.array([float(m["n_samples"]) for m in msgs])
        weights = sizes / sizes.sum()
        # weighted mean, step and its checks in one compiled call (one array type)
        grads = np.empty((len(msgs), self._coef_size))
        for k, m in enumerate(msgs):
            grads[k] = np.reshape(m["grad"], -1)
        step, grad_norm, finite = weighted_step(
            np.ascontiguousarray(state["coef"], dtype=float).reshape(-1), grads, weights,
            float(self.step_size))
        if not finite:
            _check_finite(step, len(state["grad_norm"]) + 1)
        A, core, factors = _retract(step.reshape(self.coef_shape), self.rank, self.retraction)
        state = {"coef": A, "core": core, "factors": factors,
                 "grad_norm": state["grad_norm"] + [float(grad_norm)]}
        return state, _factor_broadcast(A, core, factors)


class StageTwo(FederatedAlgorithm):
    """Stage II (paper Sec. 3.1, eq. 7), local: each client fits ``B_k`` given ``A_0``.

    It runs in ``client_finalize`` on the final broadcast; nothing is sent
    back. The server side needs ``shared_coef``; a client's side may be built
    without it.
    """

    finalize_clients = True

    def __init__(self, shared_coef, alpha, n_iter, scaling="adaptive"):
        self.shared_coef = shared_coef
        self.alpha = alpha
        self.n_iter = n_iter
        self.scaling = scaling

    def server_init(self, rng):
        return None, {"coef": self.shared_coef}

    def client_finalize(self, data, state, broadcast, rng):
        A = np.asarray(broadcast["coef"])
        q, p = data.y.shape[1], data.X.shape[1]
        R0 = data.y - data.X @ A.reshape(q, p).T
        B, omega = fit_deviation(data.X, R0, self.alpha, self.n_iter, self.scaling)
        check_finite_step("the deviation B_k", B)
        B = B.reshape(A.shape)
        return {"deviation": B, "omega": omega, "intercept": site_intercept(data, A + B)}


class PersonalizedTensorPhases(PhasedAlgorithm):
    """The whole fit as one run: initializer (if needed), Stage I, Stage II.

    Phases, by name (``phases``): ``"init"`` (only when no starting tensor is
    given: :class:`InitAlgorithm`, 2 rounds, with the rank vote for
    ``rank="auto"``, or with ``moment_init`` :class:`MomentInit`, 1 private
    round), ``"stage_one"`` (``stage_one["n_rounds"]`` rounds,
    :class:`StageOne`) and ``"stage_two"`` (local, :class:`StageTwo`). Stage I
    starts from the initializer's estimate and rank; its spec is the Tucker
    rank (a few integers in every broadcast). Stage II starts from Stage I's
    final ``A_0``, sent in the final broadcast.

    Parameters
    ----------
    coef_shape : tuple of int
        Shape of a coefficient tensor.
    rank : "auto" or tuple of int
        Tucker rank; ``"auto"`` only with the initializer.
    init : ndarray or None
        A public starting tensor, or ``None`` for the initializer.
    init_params : dict
        ``admm_params``, ``rank_scale``, ``max_rank`` of :class:`InitAlgorithm`.
    stage_one : dict
        Keyword arguments of :class:`StageOne` (without shape, rank, init).
    stage_two : dict
        ``alpha``, ``n_iter``, ``scaling`` of :class:`StageTwo`.
    fit_intercept : bool, default=False
        Every client centres its rows on its own means (:func:`prepare_site`)
        and Stage II keeps its intercept in its state.
    moment_init : bool, default=False
        Start from the noisy clipped moment (:class:`MomentInit`) instead of
        the largest client's unperturbed ADMM estimate.
    init_noise_multiplier : float or None, default=None
        The moment start's noise multiplier when the budget is split among
        kinds of releases; ``None``: Stage I's calibration.
    centring : dict or None, default=None
        Keyword arguments of :class:`PrivateCentring` (``tau_x``, ``tau_y``,
        ``noise_multiplier``, ``clip_quantile``): a first phase ``"centre"``
        (1 round) releases the noisy sums, the initializer and Stage I see
        the rows centred on the noisy means, Stage II and the personal
        intercepts the exactly centred ones (``fit_intercept`` is then
        implied).
    scaling : TensorScaling or None, default=None
        The private scaling of the entries (:mod:`._scaling`): with a release,
        a first phase ``"scale"`` (``N_PASSES`` rounds) releases the noisy histograms and
        every later broadcast carries the ranges; every later phase sees the
        rows mapped by them (checked by the site each round).

    Every one-off release (``"scale"``, ``"centre"``, the moment start) is
    made at most once per site: a server asking again gets a ``ValueError``.

    A numerical failure of a client step (non-convergence, a non-finite
    value) is raised as a ``FloatingPointError`` naming the client, the phase
    and its round, and what to change.
    """

    def __init__(self, coef_shape, rank, init, init_params, stage_one, stage_two,
                 fit_intercept=False, moment_init=False, init_noise_multiplier=None,
                 centring=None, pairs=False, scaling=None):
        self.phases = ("stage_one", "stage_two") if init is not None else (
            "init", "stage_one", "stage_two")
        self.centring = None if centring is None else dict(centring)
        # a private intercept by pair differences: the steps see raw rows, Stage II centred
        self.pairs = bool(pairs)
        if self.centring is not None:
            self.phases = ("centre",) + self.phases
        self.scaling = scaling
        if scaling is not None and scaling.releases:
            self.phases = ("scale",) + self.phases
        self.moment_init = bool(moment_init) and init is None
        self.init_noise_multiplier = init_noise_multiplier
        rounds = {"scale": N_PASSES, "centre": 1, "init": 1 if self.moment_init else 2,
                  "stage_one": int(stage_one["n_rounds"]), "stage_two": 0}
        super().__init__([rounds[name] for name in self.phases])
        self.coef_shape = tuple(coef_shape)
        self.rank = rank
        self.init = init
        self.init_params = dict(init_params)
        self.stage_one = dict(stage_one)
        self.stage_two = dict(stage_two)
        self.fit_intercept = bool(fit_intercept)

    def prepare_client(self, data):
        if self.centring is not None or self.pairs:  # centred by a phase, or never
            check_client_range(data.X, data.y, data.label)
            return data
        return prepare_site(data, self.fit_intercept)

    def _scaled_rows(self, data, phase, broadcast):
        """The rows in the scaled space after the scaling's release (raw before it)."""
        if self.scaling is None or self.phases[phase] == "scale":
            return data
        X, Y = self.scaling.transform(data.X, data.y, broadcast)  # checks the ranges
        return dataclasses.replace(data, X=X, y=Y)

    def _check_once(self, data, state, phase):
        """Refuse a one-off phase's release beyond its rounds (the privacy plan counts
        each once), also when the server returns to the phase later."""
        name = self.phases[phase]
        once = name in ("scale", "centre") or (name == "init" and self.moment_init)
        if once and state.states[phase] is not None and (
                state.phase != phase or state.rounds >= self.phase_rounds[phase]):
            raise ValueError(
                f"the server asked client {data.label!r} for the one-off release of phase "
                f"{name!r} again; the privacy plan allows it once.")

    def _phase_rows(self, data, state, phase, kind):
        """The rows phase ``phase`` sees: after a private centring, its centred rows."""
        if self.pairs:  # the releases take raw rows, Stage II (nothing sent) centred ones
            return prepare_site(data, True) if kind == "local" else data
        if self.centring is None:
            return data
        at = self.phases.index("centre")
        if phase <= at:
            return data
        centre = state.states[at]
        if centre is None:
            raise RuntimeError(
                f"client {data.label!r} has no private means: it did not answer the centring "
                "round, so it cannot take part in the later releases.")
        return centre[kind]

    def client_step(self, data, state, broadcast, rng):
        self._check_once(data, state, int(broadcast["phase"]))
        data = self._scaled_rows(data, int(broadcast["phase"]), broadcast)
        data = self._phase_rows(data, state, int(broadcast["phase"]), "train")
        try:
            return super().client_step(data, state, broadcast, rng)
        except NUMERICAL_ERRORS as exc:
            phase = int(broadcast["phase"])
            rnd = state.rounds if state.phase == phase else 0
            raise client_failure(exc, data.label, self.phases[phase], rnd) from exc

    def client_finalize(self, data, state, broadcast, rng):
        # Stage II sends nothing: the exactly centred rows
        data = self._scaled_rows(data, int(broadcast["phase"]), broadcast)
        data = self._phase_rows(data, state, int(broadcast["phase"]), "local")
        try:
            return super().client_finalize(data, state, broadcast, rng)
        except NUMERICAL_ERRORS as exc:
            raise client_failure(exc, data.label, self.phases[int(broadcast["phase"])],
                                 None) from exc

    def server_step(self, state, messages, rng):
        state, broadcast = super().server_step(state, messages, rng)
        if self.phases[0] == "scale" and state.phase > 0:
            # every later broadcast carries the ranges (a site sampled late needs them)
            broadcast = {**broadcast, **state.states[0]}
        return state, broadcast

    def phase_spec(self, phase, previous):
        if self.phases[phase] != "stage_one":
            return {}
        # the initializer's rank (none after the centring phase alone: a given init)
        rank = self.rank if previous is None or "rank" not in previous else previous["rank"]
        return {"rank": np.array(check_tucker_rank(rank, self.coef_shape), dtype=np.int64)}

    def build_phase(self, phase, spec, previous=None):
        name = self.phases[phase]
        if name == "scale":
            return ScalingRound(self.scaling)
        if name == "centre":
            return PrivateCentring(**self.centring)
        if name == "init" and self.moment_init:
            one = self.stage_one
            return MomentInit(
                self.coef_shape, self.rank,
                n_releases=one.get("n_releases", one["n_rounds"]), epsilon=one["epsilon"],
                delta=one["delta"], tau_x=one.get("tau_x"), tau_e=one.get("tau_e"),
                clip_quantile=one.get("clip_quantile", 0.9),
                accountant=one.get("accountant", "paper"),
                noise_multiplier=self.init_noise_multiplier, pairs=self.pairs,
                rank_scale=self.init_params.get("rank_scale", 1.0),
                max_rank=self.init_params.get("max_rank"))
        if name == "init":
            return InitAlgorithm(self.coef_shape, self.rank, **self.init_params)
        if name == "stage_one":
            # only the server retracts the starting tensor
            # (a client builds it without previous; a given init follows the centring)
            init = self.init if previous is None or self.init is not None else previous["init"]
            return StageOne(self.coef_shape, tuple(int(r) for r in spec["rank"]), init,
                            pairs=self.pairs, **self.stage_one)
        return StageTwo(None if previous is None else previous["coef"], **self.stage_two)
