"""The math of DP-Fed DRO: losses, subgradients, step sizes, local solves, steps.

Notation follows the paper: ``coef`` is the local model ``M_g`` (K x P), ``lam``
the DRO dual variable ``lambda_g``, ``tau`` the multiplier of the norm
constraint ``phi(M_g) <= lambda_g`` (penalty ``gamma``), ``mu`` the scaled ADMM
dual of the consensus constraint ``M_g = M`` and ``rho`` its penalty.
"""

import dataclasses
import math

import numpy as np

from ..federated import FederatedAlgorithm
from ..federated._release import sends_curve
from ..privacy import gaussian_noise
from ._client import LinearClientMixin

DUAL_NORM = {"linf": "l1", "l1": "linf", "l2": "l2"}


# --------------------------------------------------------------------------
# losses and subgradients
# --------------------------------------------------------------------------


def dual_norm(v, dual):
    """``||v||_*`` along the last axis for ``dual`` in {"l1", "linf", "l2"}."""
    if dual == "l1":
        return np.abs(v).sum(axis=-1)
    if dual == "linf":
        return np.abs(v).max(axis=-1)
    return np.sqrt((v * v).sum(axis=-1))


def phi(coef, dual):
    """``phi(M) = max_{i,j} ||M_i - M_j||_*`` (Lipschitz constant of the CS loss in x)."""
    diff = coef[:, None, :] - coef[None, :, :]
    return float(dual_norm(diff, dual).max())


def phi_subgradient(coef, dual):
    """``phi(M)`` and one subgradient ``(e_i - e_j) s^T`` (first maximising pair)."""
    diff = coef[:, None, :] - coef[None, :, :]
    norms = dual_norm(diff, dual)
    i, j = np.unravel_index(np.argmax(norms), norms.shape)
    d = diff[i, j]
    value = float(norms[i, j])
    grad = np.zeros_like(coef)
    if value == 0.0:
        return value, grad
    if dual == "l1":
        s = np.sign(d)
    elif dual == "linf":
        s = np.zeros_like(d)
        p = int(np.argmax(np.abs(d)))
        s[p] = np.sign(d[p])
    else:
        s = d / value
    grad[i] += s
    grad[j] -= s
    return value, grad


def local_terms(X, y, coef, lam, tau, kappa, gamma, dual):
    """Pieces of ``f`` at ``(coef, lam)``: the DRO loss mean, the penalty, and subgradients.

    Returns
    -------
    loss_mean, penalty : float
        ``(1/N) sum_n L_n`` and ``R(M, lambda; tau)``.
    grad_coef : ndarray of shape (K, P)
        ``d_M f``.
    grad_lam : float
        ``d_lambda f``.
    """
    from ._dro_pass import dro_cs_pass  # numpy, or numba's kernel once it pays

    n = X.shape[0]
    grad = np.empty_like(coef)
    loss_sum, grad_lam_sum = dro_cs_pass(X, y, coef, float(lam), float(kappa), grad)
    phi_value, phi_grad = phi_subgradient(coef, dual)
    p = max(0.0, tau + gamma * (phi_value - lam))
    penalty = (p * p - tau * tau) / (2.0 * gamma)
    grad_coef = grad / n + p * phi_grad
    grad_lam = grad_lam_sum / n - p
    return loss_sum / n, penalty, grad_coef, grad_lam


def prox_linear_update(coef_tilde, lam_tilde, grad_coef, grad_lam, center, mu, *, rho,
                       eta, nu, radius, project_lambda=False):
    """Closed-form minimiser of the linearised proximal surrogate (Algorithm 2).

    ``M = (M~/eta + rho (center - mu) - G_M) / (rho + 1/eta)`` and
    ``lambda = lambda~ - nu (r + G_lambda)`` (optionally projected on >= 0).
    """
    coef = (coef_tilde / eta + rho * (center - mu) - grad_coef) / (rho + 1.0 / eta)
    lam = lam_tilde - nu * (radius + grad_lam)
    if project_lambda:
        lam = max(lam, 0.0)
    return coef, float(lam)


# --------------------------------------------------------------------------
# step sizes, sensitivities, noise
# --------------------------------------------------------------------------


def step_sizes(n_samples, *, n_rounds, n_classes, n_features, norm_bound, C, V, radius,
               kappa, epsilon_M, epsilon_lambda, delta, c_M, c_lambda):
    """``eta_g`` and ``nu_g`` of Theorem 3 (held constant across rounds)."""
    S = max(radius, kappa - radius)
    L = norm_bound
    log_term = math.log(1.25 / delta)
    eta = c_M / math.sqrt(
        n_rounds * (2.0 * (L + C) ** 2 + 16.0 * n_classes * n_features * L * L * log_term
                    / (n_samples ** 2 * epsilon_M ** 2))
    )
    nu = c_lambda / math.sqrt(
        n_rounds * ((S + V) ** 2 + 2.0 * kappa * kappa * log_term
                    / (n_samples ** 2 * epsilon_lambda ** 2))
    )
    return eta, nu


def sensitivities(n_samples, *, norm_bound, rho, eta, kappa, nu):
    """L2 sensitivities of ``M_g^t`` (Lemma 1) and ``lambda_g^t`` (Lemma 2), replace-one."""
    delta_M = 2.0 * math.sqrt(2.0) * norm_bound / (n_samples * (rho + 1.0 / eta))
    delta_lam = kappa * nu / n_samples
    return delta_M, delta_lam


# --------------------------------------------------------------------------
# exact local solves (Algorithm 1): one QP each
# --------------------------------------------------------------------------


def _cs_constraints(X, y, n_classes, lam_col, s_start, kappa):
    """Sparse rows ``x.(m_c - m_j) - kappa lam [j != y_n] - s_n <= -1`` for c != j."""
    n, p = X.shape
    k = n_classes
    jj, cc = np.nonzero(~np.eye(k, dtype=bool))  # all ordered pairs j != c
    n_pairs = jj.size
    n_rows = n * n_pairs
    row = np.arange(n_rows)
    nn = np.repeat(np.arange(n), n_pairs)
    j = np.tile(jj, n)
    c = np.tile(cc, n)
    feat = np.arange(p)
    rows = np.concatenate([
        np.repeat(row, p), np.repeat(row, p), row, row,
    ])
    cols = np.concatenate([
        (c[:, None] * p + feat[None, :]).ravel(),
        (j[:, None] * p + feat[None, :]).ravel(),
        np.full(n_rows, lam_col),
        s_start + nn,
    ])
    xv = X[nn].ravel()
    flip = (j != y[nn]).astype(float)
    vals = np.concatenate([xv, -xv, -kappa * flip, -np.ones(n_rows)])
    return rows, cols, vals, np.full(n_rows, -1.0)


def _dual_norm_constraints(blocks, lam_col, aux_start, dual):
    """Rows ``||D_q m||_* <= lambda`` for each block ``q`` (LP: dual in {"l1", "linf"}).

    ``blocks`` is a list of (cols, signs) describing ``d_q[p] = sum sign * m[col]``
    as arrays of shape (P, n_terms).
    """
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    aux = aux_start
    for bcols, bsigns in blocks:
        p = bcols.shape[0]
        if dual == "linf":
            for sgn in (1.0, -1.0):
                for q in range(p):
                    rows += [r] * (bcols.shape[1] + 1)
                    cols += list(bcols[q]) + [lam_col]
                    vals += list(sgn * bsigns[q]) + [-1.0]
                    rhs.append(0.0)
                    r += 1
        else:  # l1: u_q >= +-d_q, sum u_q <= lambda
            for sgn in (1.0, -1.0):
                for q in range(p):
                    rows += [r] * (bcols.shape[1] + 1)
                    cols += list(bcols[q]) + [aux + q]
                    vals += list(sgn * bsigns[q]) + [-1.0]
                    rhs.append(0.0)
                    r += 1
            rows += [r] * (p + 1)
            cols += list(range(aux, aux + p)) + [lam_col]
            vals += [1.0] * p + [-1.0]
            rhs.append(0.0)
            r += 1
            aux += p
    return np.array(rows), np.array(cols), np.array(vals, dtype=float), np.array(rhs), aux


def _noise(shape, sigma, rng):
    """The Gaussian mechanism's noise, drawn through :mod:`skfed.privacy` (0 when sigma is 0)."""
    noise = gaussian_noise(shape, sigma, rng)
    return 0.0 if noise is None else noise


class LocalSolveError(RuntimeError):
    """The QP solver did not report an optimal solution of a local problem."""


def solve_prox_qp(c, A_ub, b_ub, bounds, quad_cols, center, rho):
    """``min c.z + (rho/2) ||z[quad_cols] - center||^2`` s.t. ``A_ub z <= b_ub``, bounds.

    One convex QP (diagonal Hessian ``rho`` on ``quad_cols``; ``rho = 0`` is
    a linear program) solved by PIQP's sparse interior-point solver. PIQP was
    chosen over HiGHS's QP solver, Clarabel, OSQP and the former tangent-cut
    LPs by ``benchmarks/speed/bench_dro_local_qp.py`` (no failures, the smallest
    times; see ``doc/performance.md``).

    Parameters
    ----------
    c : ndarray of shape (n_vars,)
        Linear cost.
    A_ub : sparse matrix of shape (n_rows, n_vars)
    b_ub : ndarray of shape (n_rows,)
    bounds : list of (lower, upper)
        ``None`` means unbounded.
    quad_cols : ndarray of int
        The variables of the quadratic term.
    center : ndarray of shape (len(quad_cols),)
    rho : float
        Weight of the quadratic term (>= 0).

    Returns
    -------
    z : ndarray of shape (n_vars,)

    Raises
    ------
    LocalSolveError
        If PIQP does not report a solved status (the message holds it).
    """
    import piqp

    n = c.size
    quad_cols = np.asarray(quad_cols)
    q = np.array(c, dtype=float)
    q[quad_cols] -= rho * np.asarray(center, dtype=float)  # (rho/2)(m - v)^2 = ... - rho v m
    diag = np.zeros(n)
    diag[quad_cols] = rho
    lower = np.array([-np.inf if lo is None else lo for lo, _ in bounds], dtype=float)
    upper = np.array([np.inf if up is None else up for _, up in bounds], dtype=float)
    b_ub = np.asarray(b_ub, dtype=float)
    from scipy import sparse

    args = (sparse.diags(diag, format="csc"), q, None, None, sparse.csc_matrix(A_ub),
            np.full(b_ub.size, -np.inf), b_ub, lower, upper)
    # PIQP's default (scaled) run, then without its Ruiz scaling: rare local
    # problems of real data took > 250 iterations scaled and ~30 unscaled. Last, with
    # its dual-infeasibility test off: every problem here is bounded below (a
    # nonnegative linear cost on nonnegative variables plus the rho term), yet PIQP
    # declared a 54 x 28 one-vs-all client QP of the UCI Wine benchmark dual
    # infeasible (unbounded) both ways, and solves it with the test off
    for extra in ({}, {"preconditioner_iter": 0}, {"eps_dual_inf": 1e-14}):
        solver = piqp.SparseSolver()
        solver.settings.verbose = False
        solver.settings.max_iter = 1000
        for name, value in extra.items():
            setattr(solver.settings, name, value)
        solver.setup(*args)
        status = solver.solve()
        if status == piqp.PIQP_SOLVED:
            return np.array(solver.result.x)
    raise LocalSolveError(f"local QP solver (PIQP) status {status.name}")


def cs_dro_local_lp(X, y, n_classes, *, radius, kappa, dual):
    """LP data of the local problem of Proposition 1 without the rho term.

    Variables ``z = [vec(M) (K*P), lambda, s (N), aux]``.
    """
    if dual not in ("l1", "linf"):
        raise ValueError(
            "exact local solves are linear programs only for feature_norm in "
            f"('linf', 'l1'); got the dual norm {dual!r} (feature_norm='l2')."
        )
    n, p = X.shape
    k = n_classes
    lam_col = k * p
    s_start = lam_col + 1
    aux_start = s_start + n
    r1, c1, v1, b1 = _cs_constraints(X, y, k, lam_col, s_start, kappa)
    blocks = []
    feat = np.arange(p)
    for i in range(k):
        for j in range(i + 1, k):
            cols = np.stack([i * p + feat, j * p + feat], axis=1)
            signs = np.tile([1.0, -1.0], (p, 1))
            blocks.append((cols, signs))
    r2, c2, v2, b2, n_vars = _dual_norm_constraints(blocks, lam_col, aux_start, dual)
    rows = np.concatenate([r1, r2 + b1.size])
    cols = np.concatenate([c1, c2])
    vals = np.concatenate([v1, v2])
    from scipy import sparse

    A = sparse.csr_matrix((vals, (rows, cols)), shape=(b1.size + b2.size, n_vars))
    b = np.concatenate([b1, b2])
    c = np.zeros(n_vars)
    c[lam_col] = radius
    c[s_start:aux_start] = 1.0 / n
    bounds = [(None, None)] * (k * p) + [(0.0, None)] * (1 + n) + [(0.0, None)] * (
        n_vars - aux_start
    )
    return c, A, b, bounds, np.arange(k * p), lam_col


def solve_cs_dro_local(X, y, n_classes, center, *, radius, kappa, rho, dual,
                       sample_weight=None):
    """Exact solve of Proposition 1: the client problem of Algorithm 1.

    Minimises ``lambda r + (1/N) sum_n L_n(M, lambda) + (rho/2)||M - center||_F^2``
    subject to ``lambda >= phi(M)``, with ``center = M - mu``; ``rho = 0`` is
    the centralized DRO problem. With ``sample_weight`` the mean becomes
    ``sum_n w_n L_n / sum_n w_n``: the Wasserstein ball is centred at the
    reweighted empirical distribution (still a probability measure, so
    ``radius`` keeps its meaning).

    Returns
    -------
    coef : ndarray of shape (K, P)
    lam : float
    """
    c, A, b, bounds, quad_cols, lam_col = cs_dro_local_lp(
        X, y, n_classes, radius=radius, kappa=kappa, dual=dual
    )
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=float)
        c[lam_col + 1:lam_col + 1 + X.shape[0]] = w / w.sum()
    z = solve_prox_qp(c, A, b, bounds, quad_cols, np.ravel(center), rho)
    p = X.shape[1]
    return z[: n_classes * p].reshape(n_classes, p), float(z[lam_col])


def cs_dro_objective(X, y, coef, lam, *, radius, kappa, sample_weight=None):
    """``lambda r + (1/N) sum_n L_n(M, lambda)`` (no constraint check); weighted
    mean ``sum_n w_n L_n / sum_n w_n`` with ``sample_weight``."""
    from ._dro_pass import dro_cs_pass

    coef = np.ascontiguousarray(coef, dtype=float)
    if sample_weight is None:
        grad = np.empty_like(coef)
        loss_sum, _ = dro_cs_pass(X, y, coef, float(lam), float(kappa), grad)
        return lam * radius + loss_sum / X.shape[0]
    # one kernel call per distinct weight (the estimator's weights are per class)
    w = np.asarray(sample_weight, dtype=float)
    total = 0.0
    for value in np.unique(w):
        rows = w == value
        grad = np.empty_like(coef)
        loss_sum, _ = dro_cs_pass(np.ascontiguousarray(X[rows]), np.ascontiguousarray(y[rows]),
                                  coef, float(lam), float(kappa), grad)
        total += value * loss_sum
    return lam * radius + total / w.sum()


def solve_binary_dro_local(X, y_pm, center, *, radius, kappa, rho, dual):
    """Exact solve of the binary (hinge) federated DRO client problem (OvA baseline).

    ``min lambda r + (1/N) sum s_n + (rho/2)||w - center||^2`` s.t.
    ``s_n >= 1 - y_n w.x_n``, ``s_n >= 1 + y_n w.x_n - kappa lambda``,
    ``s_n >= 0``, ``||w||_* <= lambda``.
    """
    if dual not in ("l1", "linf"):
        raise ValueError("exact local solves need feature_norm in ('linf', 'l1').")
    n, p = X.shape
    lam_col = p
    s_start = p + 1
    aux_start = s_start + n
    yx = y_pm[:, None] * X
    row = np.arange(n)
    feat = np.arange(p)
    rows = np.concatenate([np.repeat(row, p), row, np.repeat(row + n, p), row + n, row + n])
    cols = np.concatenate([
        np.tile(feat, n), s_start + row, np.tile(feat, n), s_start + row,
        np.full(n, lam_col),
    ])
    vals = np.concatenate([-yx.ravel(), -np.ones(n), yx.ravel(), -np.ones(n),
                           np.full(n, -kappa)])
    blocks = [(feat[:, None], np.ones((p, 1)))]
    r2, c2, v2, b2, n_vars = _dual_norm_constraints(blocks, lam_col, aux_start, dual)
    from scipy import sparse

    A = sparse.csr_matrix(
        (np.concatenate([vals, v2]), (np.concatenate([rows, r2 + 2 * n]),
                                      np.concatenate([cols, c2]))),
        shape=(2 * n + b2.size, n_vars),
    )
    b = np.concatenate([-np.ones(2 * n), b2])
    c = np.zeros(n_vars)
    c[lam_col] = radius
    c[s_start:aux_start] = 1.0 / n
    bounds = [(None, None)] * p + [(0.0, None)] * (n_vars - p)
    z = solve_prox_qp(c, A, b, bounds, np.arange(p), np.asarray(center, float), rho)
    return z[:p], float(z[lam_col])


def exact_local_step(data, rnd, solve, *args, **kwargs):
    """``solve(*args, **kwargs)`` for client ``data`` in round ``rnd``; name both if it fails."""
    try:
        return solve(*args, **kwargs)
    except LocalSolveError as exc:
        raise LocalSolveError(
            f"client {data.label!r}, round {rnd}: {exc}; try a larger rho, or features "
            "on a common scale (standardize=True, or a scaler before the estimator)."
        ) from exc


# --------------------------------------------------------------------------
# probability calibration (non-private mode)
# --------------------------------------------------------------------------

#: inverse temperatures ``beta`` of ``softmax(beta * scores)`` the clients score
TEMPERATURE_GRID = np.logspace(-3.0, 3.0, 61)


def softmax_log_loss_grid(scores, y, betas=TEMPERATURE_GRID):
    """``sum_n -log softmax(beta * s_n)[y_n]`` for every ``beta`` (one client's aggregate)."""
    z = betas[:, None, None] * scores[None]  # (n_beta, n, K)
    top = z.max(axis=2, keepdims=True)
    lse = np.log(np.exp(z - top).sum(axis=2)) + top[..., 0]
    return (lse - z[:, np.arange(y.size), y]).sum(axis=1)


#: a private fit's temperature grid, as ratios r = beta * D to the largest score gap D
#: the released model can give a row of norm <= the bound (logit gaps up to 30)
PRIVATE_TEMPERATURE_RATIOS = np.logspace(-1.0, np.log10(30.0), 8)
#: standard deviations of noise added to a temperature's summed loss before comparing
TEMPERATURE_UCB = 2.0


def private_temperature_grid(coef, row_bound):
    """``(betas, bounds)``: inverse temperatures ``r / D`` and each row's log-loss bound
    ``log K + r`` there (a row's loss at ``beta`` is at most ``log K + beta D``).

    ``D = phi_l2(M) * row_bound``: no row of norm <= ``row_bound`` has two class
    scores further apart (public: a function of the released model).
    """
    gap = phi(np.asarray(coef, dtype=float), "l2") * float(row_bound)
    r = PRIVATE_TEMPERATURE_RATIOS
    return r / (gap if gap > 0 else 1.0), np.log(np.shape(coef)[0]) + r


def sends_log_loss_grid(n_samples, n_classes, n_features, betas=TEMPERATURE_GRID):
    """Whether a site may send its summed log losses at the temperatures ``betas``.

    A row's log loss at every temperature is a function of its ``K - 1``
    score margins ``s_j - s_y``, linear in its ``d`` features given the
    broadcast model: ``min(K - 1, d)`` unknowns per row. The ``betas.size``
    sums give them back when they are not fewer (two rows of a binary problem
    have two margins for 61 sums); so the site's rows must carry more
    unknowns than there are sums (:func:`skfed.federated._release.sends_curve`).
    """
    return sends_curve(int(n_samples), max(0, min(int(n_classes) - 1, int(n_features))),
                       int(np.size(betas)))


def pick_temperature(total_loss, betas=TEMPERATURE_GRID):
    """Temperature ``1 / beta`` minimising the summed log-loss on the grid.

    A parabola through the best grid point and its neighbours (in
    ``log beta``) refines it between grid points.
    """
    i = int(np.argmin(total_loss))
    log_b = np.log(betas)
    if 0 < i < betas.size - 1:
        f0, f1, f2 = total_loss[i - 1:i + 2]
        curv = f0 - 2.0 * f1 + f2
        if curv > 0:
            step = 0.5 * (f0 - f2) / curv  # in grid steps, within (-1/2, 1/2) at a minimum
            return float(np.exp(-(log_b[i] + step * (log_b[1] - log_b[0]))))
    return float(1.0 / betas[i])


# --------------------------------------------------------------------------
# federated algorithms
# --------------------------------------------------------------------------


class _ConsensusADMM:
    """The consensus ADMM shared by the linear algorithms: the client's dual
    step, Proposition 2 on the server and the server's mirror of the duals.

    ``M^t = sum_g alpha_g (M~_g^t + mu_g^{t-1})`` then
    ``mu_g^t = mu_g^{t-1} + M~_g^t - M^t``; mu is a function of released
    models only, so the server can mirror it without extra messages. The
    mirror updates ``mu_g`` when client ``g`` answers, with the broadcast
    that client received, as the client does: under client sampling or
    ``on_client_error="skip"`` a client not heard from keeps its last model
    and dual in the consensus (with every client answering, the recursion
    above).
    """

    def client_init(self, data, rng):
        zeros = np.zeros(self.coef_shape)
        return {"coef": zeros, "mu": zeros, "round": 0}

    @staticmethod
    def dual_step(state, center):
        """The client's ``mu_g^t = mu_g^{t-1} + M~_g^{t-1} - M^{t-1}`` (none before round 1)."""
        if state["round"] == 0:
            return state["mu"]
        return state["mu"] + state["coef"] - center

    def server_init(self, rng):
        coef = np.zeros(self.coef_shape)
        state = {
            "coef": coef,
            "mu": {},
            "round": 0,
            "sum_coef": np.zeros(self.coef_shape),
            "sum_client": {},
            "consensus": [],
        }
        return state, {"coef": coef}

    def server_step(self, state, messages, rng):
        alpha = np.asarray(self.alpha, dtype=float)
        last = dict(state.get("last", {}))
        mu = dict(state["mu"])
        for k, msg in messages.items():
            if k in last:
                # the dual step the client took at the start of this round
                # (client_step: mu + M~_g - the broadcast it got, this round's)
                mu[k] = mu.get(k, 0.0) + last[k] - state["coef"]
            last[k] = np.array(msg["coef"])
        # a client that did not answer (not sampled, or skipped after an error)
        # keeps its last model and dual, as on its side: it moves neither
        new = np.zeros(self.coef_shape)
        for k in sorted(last):
            new += alpha[k] * (last[k] + mu.get(k, 0.0))
        t = state["round"] + 1
        sum_coef = state["sum_coef"] + new
        sum_client = {k: state["sum_client"].get(k, 0.0) + last[k] for k in last}
        # consensus violation of the running averages (Theorem 3 / Fig. 2)
        violation = sum(
            alpha[k] * np.linalg.norm(sum_client[k] / t - sum_coef / t) for k in sum_client
        )
        state = {
            "coef": new,
            "mu": mu,
            "last": last,
            "round": t,
            "sum_coef": sum_coef,
            "sum_client": sum_client,
            "consensus": state["consensus"] + [float(violation)],
        }
        return state, {"coef": new}


def _once(state, release):
    """The site's guard of a one-off release: the privacy plan counts it once, so a
    server asking twice gets an error, not a second release."""
    done = state.get("released", ())
    if release in done:
        raise ValueError(f"the server asked for the one-off release {release!r} twice; the "
                         "privacy plan allows it once.")
    return dict(state, released=done + (release,))


class DPFedDROAlgorithm(LinearClientMixin, _ConsensusADMM, FederatedAlgorithm):
    """Algorithm 2 (DP-Fed DRO) as client and server steps; Algorithm 1 if not private.

    Hyperparameters only: per-client arrays are indexed by ``data.index``.
    Only the (noisy) local model ``coef`` is sent up; ``M^t`` is broadcast.
    """

    min_samples_per_client = 2

    def __init__(self, *, n_classes, n_features, alpha, radius, kappa, rho, gamma, dual,
                 private, eta=None, nu=None, sigma_M=None, sigma_lambda=None,
                 project_lambda=False, calibrate_round=None, output_model="last",
                 class_weight=None, scaling=None, n_rounds=None, personalize=False,
                 temperature_multiplier=None, row_bound=None):
        self.n_classes = n_classes
        self.n_features = n_features
        self.coef_shape = (n_classes, n_features)
        self.alpha = alpha
        self.radius = radius
        self.kappa = kappa
        self.rho = rho
        self.gamma = gamma
        self.dual = dual
        self.private = private
        self.eta = eta
        self.nu = nu
        self.sigma_M = sigma_M
        self.sigma_lambda = sigma_lambda
        self.project_lambda = project_lambda
        self.calibrate_round = calibrate_round
        self.output_model = output_model
        # per-class weights of the loss (non-private only; None: every row 1)
        self.class_weight = class_weight
        # private feature scaling (a PrivateScaling) or None: the rows as given
        self.scaling = scaling
        # training rounds: the last one broadcasts the released model
        self.n_rounds = n_rounds
        # each site fits its own adaptation on the final broadcast (never sent)
        self.personalize = personalize
        self.finalize_clients = bool(personalize)
        # a private fit's temperature release (None: none) and the rows' norm bound
        self.temperature_multiplier = temperature_multiplier
        self.row_bound = row_bound

    def client_init(self, data, rng):
        # coef: M~_g (noisy) in Algorithm 2, exact M_g in Algorithm 1
        return dict(super().client_init(data, rng), lam=0.0, tau=0.0, objective=[],
                    lam_history=[], tau_history=[])

    def _scaled_rows(self, data, broadcast):
        """The site's rows in the scaled space, each of norm <= the bound (private scaling)."""
        if self.scaling is None:
            return data
        n_cols = self.n_features - (self.intercept_scaling is not None)
        X = self.scaling.transform(data.X[:, :n_cols], broadcast)
        if self.intercept_scaling is not None:
            X = np.hstack([X, data.X[:, n_cols:]])
        return dataclasses.replace(data, X=X)

    def client_step(self, data, state, broadcast, rng):
        if "histogram" in broadcast:
            # the one-off release of the private scaling, before the first round
            state = _once(state, "histogram")
            n_cols = self.n_features - (self.intercept_scaling is not None)
            return state, {"histogram": self.scaling.site_release(data.X[:, :n_cols], rng)}
        data = self._scaled_rows(data, broadcast)
        if "calibrate" in broadcast and self.private:
            # the summed log losses at the public grid, each row's divided by its
            # bound so every entry moves by at most 1 when a row is replaced
            state = _once(state, "calibrate")
            coef = np.asarray(broadcast["coef"], dtype=float)
            betas, bounds = private_temperature_grid(coef, self.row_bound)
            losses = softmax_log_loss_grid(data.X @ coef.T, data.y, betas) / bounds
            sigma = self.temperature_multiplier * np.sqrt(betas.size)
            return state, {"log_loss": losses + _noise(betas.shape, sigma, rng)}
        if "calibrate" in broadcast:
            # the extra last round: score the released model (see server_step)
            if not sends_log_loss_grid(data.n_samples, self.n_classes, self.n_features
                                       - (self.intercept_scaling is not None)):
                return state, {"n_samples": np.int64(data.n_samples)}
            scores = data.X @ np.asarray(broadcast["coef"], dtype=float).T
            return state, {"log_loss": softmax_log_loss_grid(scores, data.y)}
        g = data.index
        center = np.asarray(broadcast["coef"], dtype=float)
        mu = self.dual_step(state, center)
        r_g = float(self.radius[g])
        if not self.private:
            weight = (None if self.class_weight is None
                      else np.asarray(self.class_weight, dtype=float)[data.y])
            coef, lam = exact_local_step(
                data, state["round"] + 1, solve_cs_dro_local, data.X, data.y,
                self.n_classes, center - mu, radius=r_g, kappa=self.kappa, rho=self.rho,
                dual=self.dual, sample_weight=weight)
            objective = cs_dro_objective(data.X, data.y, coef, lam, radius=r_g,
                                         kappa=self.kappa, sample_weight=weight)
            new = dict(state, coef=coef, lam=lam, mu=mu, round=state["round"] + 1,
                       objective=state["objective"] + [objective],
                       lam_history=state["lam_history"] + [lam])
            return new, {"coef": coef}
        tau = state["tau"]
        loss, penalty, grad_coef, grad_lam = local_terms(
            data.X, data.y, state["coef"], state["lam"], tau, self.kappa, self.gamma, self.dual
        )
        objective = state["lam"] * r_g + loss + penalty  # h_g^t at the noisy iterate
        coef, lam = prox_linear_update(
            state["coef"], state["lam"], grad_coef, grad_lam, center, mu, rho=self.rho,
            eta=self.eta[g], nu=self.nu[g], radius=r_g, project_lambda=self.project_lambda,
        )
        # Algorithm 2's two Gaussian releases (sigma_M, sigma_lambda > 0: Lemmas 1-2)
        coef_noisy = coef + _noise(self.coef_shape, self.sigma_M[g], rng)
        lam_noisy = lam + float(_noise((), self.sigma_lambda[g], rng))
        tau = max(0.0, tau + self.gamma * (phi(coef_noisy, self.dual) - lam_noisy))
        new = dict(state, coef=coef_noisy, lam=float(lam_noisy), mu=mu, tau=tau,
                   round=state["round"] + 1, objective=state["objective"] + [objective],
                   lam_history=state["lam_history"] + [float(lam_noisy)],
                   tau_history=state["tau_history"] + [tau])
        return new, {"coef": coef_noisy}

    def client_finalize(self, data, state, broadcast, rng):
        """The site's adaptation of the released model (:mod:`._personalize`), kept here."""
        # imported here, as scipy's sparse matrices below: a Flower site's process imports
        # this module for every message and needs scipy.optimize only for this last one
        from ._personalize import fit_site_adaptation

        data = self._scaled_rows(data, broadcast)
        M = np.asarray(broadcast["coef"], dtype=float)
        n_cols = self.n_features - (self.intercept_scaling is not None)
        scale, coef, intercept, penalty = fit_site_adaptation(
            data.X @ M.T, data.X[:, :n_cols], data.y)
        return dict(state, adapt_scale=scale, adapt_coef=coef, adapt_intercept=intercept,
                    adapt_penalty=penalty)

    def asks_every_client(self, server_state):
        # the temperature is fitted on the summed losses of every client, the
        # scaling on the histograms of every client
        if "ranges" in server_state and server_state["ranges"] is None:
            return True
        return self.calibrate_round is not None and server_state["round"] >= self.calibrate_round

    def server_init(self, rng):
        state, broadcast = super().server_init(rng)
        if self.scaling is not None and self.scaling.releases:
            return dict(state, ranges=None), {**broadcast, "histogram": np.int64(1)}
        return state, broadcast

    def server_step(self, state, messages, rng):
        if "ranges" in state and state["ranges"] is None:
            ranges = self.scaling.combine([m["histogram"] for m in messages.values()])
            return dict(state, ranges=ranges), {"coef": state["coef"], **ranges}
        ranges = state.get("ranges")
        state, broadcast = self._server_step(state, messages, rng)
        if ranges:  # every later broadcast carries them (a site sampled late needs them)
            state, broadcast = dict(state, ranges=ranges), {**broadcast, **ranges}
        return state, broadcast

    def _server_step(self, state, messages, rng):
        if self.calibrate_round is not None and state["round"] >= self.calibrate_round:
            sent = [m["log_loss"] for m in messages.values() if "log_loss" in m]
            released = {"coef": self._released(state)}
            if not sent:  # no site large enough: no temperature (the estimator warns)
                return state, released
            total = sum(np.asarray(loss, dtype=float) for loss in sent)
            if self.private:  # back to log-loss units on the public grid (post-processing)
                betas, bounds = private_temperature_grid(released["coef"], self.row_bound)
                # the noise of a sum grows with its bound (sharp temperatures): judge each
                # by an upper confidence bound, so noise alone does not pick a sharp one
                sd = self.temperature_multiplier * np.sqrt(betas.size * len(sent)) * bounds
                upper = total * bounds + TEMPERATURE_UCB * sd
                return dict(state, temperature=pick_temperature(upper, betas)), released
            return dict(state, temperature=pick_temperature(total)), released
        state, broadcast = super().server_step(state, messages, rng)
        if state["round"] == self.n_rounds:
            # the last training round broadcasts the model that is released: the
            # calibration round scores it, the sites adapt it
            broadcast = {"coef": self._released(state)}
        if state["round"] == self.calibrate_round:
            # the flag, not a client's own step count, starts the calibration
            # round (a client may have been asked in fewer rounds)
            broadcast = {**broadcast, "calibrate": np.int64(1)}
        return state, broadcast

    def _released(self, state):
        if self.output_model == "average":
            return state["sum_coef"] / state["round"]
        return state["coef"]
