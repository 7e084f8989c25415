"""One client's closed-form (``optimizer="cavi"``) round from Gram statistics.

The round (derived here, not the paper's Alg. 1; see ``_steps``) sets
``q(delta_i)`` and ``q(u_i)`` to
their optimum, takes Adam steps on the local kernel and sends sufficient
statistics. With the bases ``W = L_g^{-1} K_g(Z_g, X)`` and ``V = L_l^{-1}
K_l(Z_l, X)`` every quantity of the round is an ``M x M`` expression in

    W W^T,  W V^T,  V V^T,  W y,  V y,  y^T y

except the residual ``e`` that the kernel adjoints need, formed once per
kernel gradient. So the round touches the ``n`` rows only to form the bases
and these products and for the adjoints, instead of once per term (the
general :func:`~skfed.gaussian_process._elbo.client_terms` forms the
predictive mean and residual on every call). The numbers are those of
``client_terms`` up to rounding; ``tests/gaussian_process/test_elbo.py``
checks them against it.
"""

import numpy as np
from scipy.linalg import LinAlgError
from scipy.linalg.lapack import dpotrf, dpotri

from ._elbo import (
    SMALL_INDUCING,
    Basis,
    basis_adjoint,
    kernel_grads,
    sigmoid,
    softplus,
    unpack_global,
)
from ._closed_form_kernels import (
    basis_rows,
    cavi_local_steps,
    cavi_round_small,
    closed_form_q,
    latent_sweeps,
    local_basis_rows,
    local_products_rows,
    marginal_dev_stats,
)
from ._linalg import CholeskyError, cho_solve, cholesky, factor_stats, solve_triangular


#: up to this many rows a client runs its local steps as one numba call
#: (:meth:`ClosedFormClient.fused_local_steps`); with more, the per-call overhead
#: it saves is small against the row work, which BLAS does faster than its
#: loops, and the step-by-step loop keeps its last basis for the next round
#: (measured: ``benchmarks/speed/bench_pfedhgp.py``, doc/performance.md)
FUSED_MAX_ROWS = 256

#: up to this many joint coefficients (M + M_i) the marginal statistics (and the
#: fused local steps) are numba's; beyond, LAPACK's blocked factorizations are
#: faster (from about 160 on, measured before the right-looking Cholesky)
SMALL_JOINT = 160


def _check_fused(info, jitter):
    """Raise for the failure code of a fused numba round or loop: 1, a kernel
    matrix not positive definite at the last ``jitter``; else a precision."""
    if info == 1:
        raise CholeskyError(
            f"a kernel matrix is not positive definite even with jitter {jitter:.1e}; "
            "check for NaN hyperparameters or raise jitter.")
    if info != 0:
        raise LinAlgError("a closed-form precision is not positive definite.")


def _factor_terms(basis, L, s2=None, inv_prior=None):
    """``|L|^2``, ``log det(L L^T)`` and ``|L^T W|^2`` of a covariance factor ``L``.

    If ``L L^T`` is the optimal covariance ``(W W^T / s2 + inv_prior I)^{-1}``
    (pass ``s2`` and ``inv_prior``), ``|L^T W|^2 = tr(W W^T S) = s2 (M -
    inv_prior |L|^2)`` without an ``M^3`` product; the subtraction loses at
    most ``M s2`` times the machine epsilon, absolute.
    """
    sq, logdet = factor_stats(L)  # L is lower triangular
    if s2 is None:
        return sq, logdet, basis.quad(L)
    return sq, logdet, s2 * (L.shape[0] - inv_prior * sq)


def fused_local_basis(X, loc, cfg):
    """The local basis as the fused loop forms it (:func:`._closed_form_kernels.local_basis_rows`).

    The same basis as ``_elbo.local_basis`` up to rounding: numba loops
    instead of LAPACK's triangular solve.
    """
    info, L, K, Vt, jit, ls, var = local_basis_rows(
        np.ascontiguousarray(X, dtype=float), np.array(loc["Zl"], dtype=float, order="C"),
        np.ascontiguousarray(np.ravel(loc["ls_l"]), dtype=float), float(loc["var_l"]),
        cfg.kind, float(cfg.jitter))
    if info != 0:
        raise CholeskyError(
            f"a kernel matrix is not positive definite even with jitter {jit:.1e}; "
            "check for NaN hyperparameters or raise jitter.")
    return Basis(L=L, W=Vt.T, jitter=jit, K=K, ls=ls, var=float(var))


def global_basis_small(X, g, cfg):
    """The global basis of a small client's round (:func:`round_fusable`) by numba.

    ``_elbo.global_basis`` with the factor and ``V = L^{-1} K(Z_g, X)`` of
    :func:`._closed_form_kernels.basis_rows` (the same jitter escalation) instead of
    LAPACK: equal up to rounding, in one call (a small client forms it every
    other round, when the global kernel moves).
    """
    c = unpack_global(g, cfg)
    info, L, K, Vt, jit = basis_rows(
        # Z writable, as the fused local steps pass theirs: one specialization of the
        # shared kernel (a copy of a few rows)
        np.ascontiguousarray(X, dtype=float), np.array(g["Zg"], dtype=float, order="C"),
        np.ascontiguousarray(c["ls"], dtype=float), c["var"], cfg.kind, float(cfg.jitter))
    if info != 0:
        raise CholeskyError(
            f"a kernel matrix is not positive definite even with jitter {jit / 10:.1e}; "
            "check for NaN hyperparameters or raise jitter.")
    return Basis(L=L, W=Vt.T, jitter=jit, K=K, ls=c["ls"], var=c["var"])


def round_fusable(cfg, n, M, m, n_steps):
    """Whether a client's whole closed-form round is one call (:func:`small_round`).

    The default model (global, deviation and local components) on a client
    whose local steps fuse (:meth:`ClosedFormClient.fusable`: at most
    ``FUSED_MAX_ROWS`` rows, numba's sizes), with at least one local step.
    """
    return (cfg.use_global and cfg.use_deviation and cfg.use_local and n_steps > 0
            and n <= FUSED_MAX_ROWS and m <= SMALL_INDUCING and M + m <= SMALL_JOINT)


def _flat_moments(adam, loc, hyper):
    """Adam's step count and flat moments (raw lengthscales, raw variance, ``Z``)."""
    if adam is None:
        size = sum(int(np.size(loc[k])) for k in hyper)
        return 0, np.zeros(size), np.zeros(size)
    if "flat" in adam:
        return adam["t"], adam["flat"][0], adam["flat"][1]
    return adam["t"], *(np.concatenate([np.ravel(adam[w][k]) for k in hyper]).astype(float)
                        for w in ("m", "v"))


def small_round(X, y, g, loc, gb, adam, cfg, n_steps, lr, z_scale, lb, want_grad,
                want_joint, scalars=None, b1=0.9, b2=0.999, eps=1e-8):
    """A small client's closed-form round in one numba call
    (:func:`._closed_form_kernels.cavi_round_small`).

    The same operations as ``_optimizers.ClosedForm.local_steps`` on the fused path (first
    solve, :meth:`ClosedFormClient.fused_local_steps`), then
    :meth:`ClosedFormClient.message` with the packed ``Phi``,
    :meth:`ClosedFormClient.global_kernel_grad` (if ``want_grad``) and
    :meth:`ClosedFormClient.marginal_global_stats` (if ``want_joint``), for
    the default model (see :func:`round_fusable`); tested against the
    step-by-step numpy/LAPACK round in ``tests/gaussian_process/test_small_round.py``.
    Without their per-call overhead, which was most of a small client's round
    once the local steps were fused.

    Parameters
    ----------
    X, y : ndarray
        The client's scaled inputs and normalized targets.
    g : dict
        Raw global parameters (the broadcast).
    loc : dict
        The client's local parameters.
    gb : Basis
        The client's global basis at ``g``.
    adam : dict or None
        Adam's state of the local kernel: ``{"t", "flat": (m, v)}`` as this
        function returns it, the dict of :func:`._adam.adam_init`, or None.
    cfg : ModelConfig
    n_steps, lr, z_scale
        Local steps, their learning rate and the inducing inputs' step unit.
    lb : tuple or None
        ``(L, K, V^T, jitter)`` of the local basis at ``loc`` (as this
        function returns it), or None to form it (:func:`fused_local_basis`'s numba code).
    want_grad, want_joint : bool
        Whether the message carries the global kernel gradient and the joint-mean
        statistics.
    scalars : tuple or None
        ``(softplus(noise), softplus(phi))`` of ``g`` if the caller has them (the
        same for every client of a round).

    Returns
    -------
    loc : dict
    adam : dict
    jitter : float
        The largest local jitter of the round.
    msg : dict
        The message, without ``"n"`` and ``"jitter"``; gradients under
        ``"g_ls_g"``, ``"g_var_g"`` and (with ``learn_inducing``) ``"g_Zg"``.
    lb : tuple
        The last local basis, for the next round.
    """
    hyper = ("ls_l", "var_l", "Zl") if cfg.learn_inducing else ("ls_l", "var_l")
    t0, adam_m, adam_v = _flat_moments(adam, loc, hyper)
    c = np.ascontiguousarray
    have = lb is not None
    empty = np.empty((0, 0))
    L0, K0, Vt0, jit0 = lb if have else (empty, empty, empty, 0.0)
    if scalars is None:
        scalars = (float(softplus(g["noise"])), float(softplus(g["phi"])))
    sc = np.array([float(loc["var_l"]), float(gb.var), float(g["var_g"]), scalars[0],
                   scalars[1], float(lr), b1, b2, eps, float(cfg.jitter), float(jit0)])
    ints = np.array([cfg.kind, cfg.ard, cfg.learn_inducing, n_steps, t0, have, want_grad,
                     want_joint], dtype=np.int64)
    # the basis's arrays as the kernel reads them, kept with it (for these targets)
    kept = gb._small
    if kept is None or kept[0] is not y:
        kept = gb._small = (y, c(y, dtype=float), c(gb.W.T), c(gb.K), c(gb.L), c(gb.gram),
                            c(gb.project(y)))
    (info, Z, ls_raw, var_raw, m_new, v_new, md, mu, Lu, Ld, L, K, Vt, ls, var, jit_last,
     jit, stats, b, Phi, A, a, g_ls, g_var, g_Z) = cavi_round_small(
        # mg, Zg and ls_g writable (copies of a few numbers), as the arrays the kernel
        # forms itself: its helpers compile once (see _covariance.kernel_args)
        c(X, dtype=float), *kept[1:], np.array(g["mg"], dtype=float),
        c(g["Lg"], dtype=float), np.array(g["Zg"], dtype=float, order="C"),
        c(gb.ls, dtype=float), np.array(np.ravel(g["ls_g"]), dtype=float),
        c(loc["Zl"], dtype=float), c(np.ravel(loc["ls_l"]), dtype=float), c(adam_m),
        c(adam_v), c(np.ravel(z_scale), dtype=float), L0, K0, Vt0, sc, ints)
    _check_fused(info, jit)
    out = dict(loc)
    out["ls_l"] = ls_raw.reshape(np.shape(loc["ls_l"]))
    out["var_l"] = np.asarray(var_raw)
    out["Zl"] = Z
    out["md"], out["Ld"], out["mu"], out["Lu"] = md, Ld, mu, Lu
    msg = {"rr": float(stats[0]), "c": float(stats[1]), "t_g": float(stats[2]), "Phi": Phi,
           "b": b, "D": float(stats[3]), "logdet_d": float(stats[4]),
           "kl_u": float(stats[5])}
    if want_grad:
        msg["g_ls_g"], msg["g_var_g"] = g_ls, np.asarray(g_var)
        if cfg.learn_inducing:
            msg["g_Zg"] = g_Z
    if want_joint:
        msg["A_joint"], msg["a_joint"] = A, a
    adam = {"t": t0 + n_steps, "flat": (m_new, v_new)}
    return out, adam, jit, msg, (L, K, Vt, jit_last)


class ClosedFormClient:
    """A client's statistics for one closed-form round at fixed global parameters.

    Parameters
    ----------
    y : ndarray of shape (n,)
        The client's (normalized) targets; never leave the client.
    g : dict
        Raw global parameters (the broadcast).
    cfg : ModelConfig
    gb : Basis or None
        The client's global basis at ``g`` (None without a shared basis).
    """

    def __init__(self, y, g, cfg, gb):
        self.cfg = cfg
        self.y = y
        self.n = y.shape[0]
        self.yy = float(y @ y)
        self.g = g
        self.s2 = float(softplus(g["noise"]))
        self.phi = float(softplus(g["phi"])) if cfg.use_deviation else 0.0
        # the global kernel's variance, as the basis was formed with
        self.var_g = gb.var if gb is not None else None
        self.gb = gb
        self.wy = gb.project(y) if gb is not None else None
        self.mg = g["mg"] if cfg.use_global else None
        self.lb = self.vy = self.C = self._u_terms = None

    def set_local(self, lb):
        """Use the local basis ``lb`` (after a step on the local kernel)."""
        self.lb = lb
        self.vy = lb.project(self.y)
        self.C = self.gb.cross(lb) if self.gb is not None else None  # W V^T

    # --- q(delta_i), q(u_i) ---------------------------------------------------
    def solve(self, loc):
        """Optimal ``q(delta_i)`` and ``q(u_i)`` given the global block (derived here).

        Covariances in closed form, the two means by one joint linear solve
        of ``(B B^T / s2 + prior^{-1}) m = B r / s2`` with ``B = [W; V]`` and
        ``r = y - W^T m_g``. Returns a new local parameter dict.
        """
        cfg, s2, gb = self.cfg, self.s2, self.gb
        if not (cfg.use_deviation or cfg.use_local):
            return dict(loc)
        empty = np.empty((0, 0))
        Gw, Gv, rw, rv = empty, empty, np.empty(0), np.empty(0)
        if cfg.use_deviation:
            Gw = gb.gram
            rw = self.wy - Gw @ self.mg if cfg.use_global else self.wy
        if cfg.use_local:
            Gv = self.lb.gram
            rv = self.vy - self.C.T @ self.mg if cfg.use_global else self.vy
        if cfg.use_deviation and cfg.use_local:
            C = self.C
        else:
            C = np.empty((Gw.shape[0], Gv.shape[0]))
        # the q(delta) covariance depends on the global basis, s2 and phi only: the
        # same for every solve of a round, so it is kept on the basis
        new_ld = cfg.use_deviation and (gb._dev_cov is None or gb._dev_cov[:2] != (s2, self.phi))
        inv_prior = 1.0 / self.phi if cfg.use_deviation else 1.0
        k, nu = Gw.shape[0], Gv.shape[0]
        if k + nu <= LATENT_Q_SMALL:
            info, means, Lu, Ld = closed_form_q(Gw, C, Gv, rw, rv, s2, inv_prior, new_ld)
            if info != 0:
                raise LinAlgError(
                    f"a closed-form precision is not positive definite (info={info}).")
        else:  # the same solve, latent_q's LAPACK path
            present = [b for b in ((k, inv_prior, new_ld), (nu, 1.0, True)) if b[0]]
            G = np.block([[Gw, C], [C.T, Gv]]) if k and nu else (Gw if k else Gv)
            ms, Ls, _ = latent_q(G, np.concatenate([rw, rv])[:, None], [b[0] for b in present],
                                 [b[1] for b in present], np.ones((1, len(present))), s2,
                                 want_cov=[b[2] for b in present])
            means = np.concatenate(ms)
            Ld = Ls[0] if k else np.zeros((0, 0))
            Lu = Ls[-1] if nu else np.zeros((0, 0))
        out = dict(loc)
        if cfg.use_deviation:
            out["md"] = means[:k]
            if new_ld:
                Ld.flags.writeable = False
                # with the terms of the message that depend on S_delta alone
                gb._dev_cov = (s2, self.phi, Ld) + _factor_terms(gb, Ld, s2, inv_prior)
            out["Ld"] = gb._dev_cov[2]
        if cfg.use_local:
            out["mu"] = means[k:]
            out["Lu"] = Lu
            self._u_terms = (Lu,) + _factor_terms(self.lb, Lu, s2, 1.0)
        return out

    # --- the local steps as one compiled call -----------------------------------
    def fusable(self, m):
        """Whether :meth:`fused_local_steps` applies: a local component of ``m``
        inducing inputs whose Cholesky and joint solve are numba's, on at most
        ``FUSED_MAX_ROWS`` rows (small clients)."""
        cfg = self.cfg
        if not cfg.use_local or self.n > FUSED_MAX_ROWS:
            return False
        k = self.gb.W.shape[0] if cfg.use_deviation else 0
        return m <= SMALL_INDUCING and k + m <= SMALL_JOINT

    def set_local_fused(self, lb):
        """:meth:`set_local` for a basis of :func:`fused_local_basis`: its products
        from the same numba code as the fused loop's (so that a kept basis and
        one formed again, as on a Flower site, give the same bits)."""
        gb = self.gb
        Wt = np.ascontiguousarray(gb.W.T) if gb is not None else np.empty((self.n, 0))
        Gv, C, vy = local_products_rows(Wt, np.ascontiguousarray(lb.W.T),
                                        np.ascontiguousarray(self.y, dtype=float))
        lb._gram = Gv
        self.lb, self.vy, self.C = lb, vy, (C if gb is not None else None)

    def fused_local_steps(self, X, loc, adam, n_steps, lr, z_scale, b1=0.9, b2=0.999,
                          eps=1e-8):
        """``n_steps`` local steps (gradient, Adam step on the local kernel, new
        basis, closed-form solve) in one call of :func:`._closed_form_kernels.cavi_local_steps`.

        The same steps as ``_optimizers.ClosedForm.local_steps``'s loop of :meth:`local_hyper_grad`,
        ``adam_ascent``, a new local basis, :meth:`set_local` and :meth:`solve`
        (tested against it), without their per-call overhead. Call after the
        round's first :meth:`solve` with a basis of :func:`fused_local_basis` set
        by :meth:`set_local_fused`. Returns ``(loc, adam, jitter)``; the last
        basis is ``self.lb``.
        """
        cfg, lb, gb = self.cfg, self.lb, self.gb
        m = lb.L.shape[0]
        hyper = ("ls_l", "var_l", "Zl") if cfg.learn_inducing else ("ls_l", "var_l")
        t0 = adam["t"]
        c1s = np.array([1 - b1**t for t in range(t0 + 1, t0 + n_steps + 1)])
        c2s = np.array([1 - b2**t for t in range(t0 + 1, t0 + n_steps + 1)])
        shapes = [np.shape(loc[k]) for k in hyper]
        moments = [np.concatenate([np.ravel(adam[w][k]) for k in hyper]).astype(float)
                   for w in ("m", "v")]
        M = gb.W.shape[0] if gb is not None else 0
        Wt = gb.W.T if gb is not None else np.empty((X.shape[0], 0))
        mbase = self.mg if cfg.use_global else np.zeros(M)
        if cfg.use_deviation:
            Gw = gb.gram
            rw = self.wy - Gw @ self.mg if cfg.use_global else self.wy
            md = loc["md"]
        else:
            Gw, rw, md = np.empty((0, 0)), np.empty(0), np.empty(0)
        C = self.C if self.C is not None else np.empty((0, m))
        c = np.ascontiguousarray
        (info, Z, ls_raw, var_raw, m_new, v_new, ls, var, md, mu, Lu, L, K, Vt, Gv, C,
         vy, jit_last, jit) = cavi_local_steps(
            c(X, dtype=float), c(self.y, dtype=float), c(Wt), c(mbase, dtype=float), c(Gw),
            c(rw), c(md, dtype=float), c(loc["mu"], dtype=float), c(loc["Lu"], dtype=float),
            c(loc["Zl"], dtype=float), c(np.ravel(loc["ls_l"]), dtype=float),
            float(loc["var_l"]), moments[0], moments[1], c1s, c2s, float(lr), b1, b2, eps,
            c(np.ravel(z_scale), dtype=float), self.s2,
            1.0 / self.phi if cfg.use_deviation else 1.0, cfg.kind, float(cfg.jitter),
            bool(cfg.ard), bool(cfg.learn_inducing), c(lb.L), c(lb.K), c(lb.W.T), c(lb.gram),
            c(C), c(self.vy))
        _check_fused(info, jit)
        out = dict(loc)
        out["ls_l"] = ls_raw.reshape(shapes[0])
        out["var_l"] = np.asarray(var_raw)
        out["Zl"] = Z
        if cfg.use_deviation:
            out["md"] = md
        out["mu"], out["Lu"] = mu, Lu
        # Adam's state as adam_ascent leaves it
        new_m, new_v, start = dict(adam["m"]), dict(adam["v"]), 0
        for key, shape in zip(hyper, shapes):
            stop = start + (int(np.prod(shape)) if shape else 1)
            new_m[key] = m_new[start:stop].reshape(shape)
            new_v[key] = v_new[start:stop].reshape(shape)
            start = stop
        adam = {"t": t0 + n_steps, "m": new_m, "v": new_v}
        # the last basis, as basis_forward and set_local would leave it
        new = Basis(L=L, W=Vt.T, jitter=jit_last, K=K, ls=ls, var=float(var), _gram=Gv)
        self.lb, self.vy, self.C = new, vy, (C if gb is not None else None)
        self._u_terms = (Lu,) + _factor_terms(new, Lu, self.s2, 1.0)
        return out, adam, jit

    # --- the global mean with the client's own blocks integrated out -----------
    def marginal_global_stats(self):
        """The client's ``(A_i, a_i)``: its means objective reduced to ``m_g``.

        In the mean-field ELBO the means enter only through the quadratic

            |y - W^T (m_g + m_delta) - V^T m_u|^2 / (2 s2) + |m_g|^2 / 2
            + |m_delta|^2 / (2 phi) + |m_u|^2 / 2

        (the covariances only through trace and log-determinant terms), so
        at fixed covariances and hyperparameters the joint maximizer of all
        the means is that of ``-m_g^T (I + sum_i A_i) m_g / 2 + m_g^T sum_i
        a_i`` in ``m_g`` alone, with the client's blocks at their conditional
        optimum (:meth:`solve`). ``A_i`` is the Schur complement of the
        client's joint precision ``P`` of ``(m_delta, m_u)``. With a deviation
        it is formed on the sum ``s = m_g + m_delta``, whose prior couples it
        to ``m_g`` by ``|s - m_g|^2 / (2 phi)``: ``A_i = (I - [P^{-1}]_{ss} /
        phi) / phi`` and ``a_i = s_0 / phi`` with ``s_0`` the deviation mean
        at ``m_g = 0``, which loses at most ``M`` machine epsilons over
        ``phi`` (the direct ``W W^T / s2 - ...`` would lose them relative to
        ``|W|^2 / s2``). Call after :meth:`solve` (the local basis is set).
        """
        cfg, s2, gb = self.cfg, self.s2, self.gb
        Gw, M = gb.gram, gb.gram.shape[0]
        if cfg.use_deviation and M + (self.lb.L.shape[0] if cfg.use_local else 0) <= SMALL_JOINT:
            # the same quantities in one numba pass (the LAPACK path below for large sizes)
            Gv = self.lb.gram if cfg.use_local else np.empty((0, 0))
            C = self.C if cfg.use_local else np.empty((M, 0))
            vy = self.vy if cfg.use_local else np.empty(0)
            info, A, a = marginal_dev_stats(Gw, C, Gv, self.wy, vy, s2, self.phi)
            if info != 0:
                raise LinAlgError(f"matrix not positive definite (info={info}).")
            return A, a
        if cfg.use_deviation:
            phi = self.phi
            Gv = self.lb.gram if cfg.use_local else np.empty((0, 0))
            k, N = M, M + Gv.shape[0]
            P = np.empty((N, N))
            P[:k, :k] = Gw
            if cfg.use_local:
                P[:k, k:], P[k:, :k], P[k:, k:] = self.C, self.C.T, Gv
            P /= s2
            P.flat[: k * (N + 1): N + 1] += 1.0 / phi
            P.flat[k * (N + 1):: N + 1] += 1.0
            L = cholesky(P)
            r0 = self.wy if not cfg.use_local else np.concatenate([self.wy, self.vy])
            s0 = cho_solve(L, r0 / s2)[:k]
            E = np.zeros((N, k))
            E[np.arange(k), np.arange(k)] = 1.0
            Xs = solve_triangular(L, E)  # L^{-1} E: [P^{-1}]_ss = Xs^T Xs
            A = np.eye(M)
            A -= (Xs.T @ Xs) / phi
            A /= phi
            a = s0 / phi
        elif cfg.use_local:
            Pu = self.lb.gram / s2
            Pu.flat[:: Pu.shape[0] + 1] += 1.0
            Lu = cholesky(Pu)
            G = solve_triangular(Lu, self.C.T / s2)
            h = solve_triangular(Lu, self.vy / s2)
            A = Gw / s2 - G.T @ G
            a = self.wy / s2 - G.T @ h
        else:
            A, a = Gw / s2, self.wy / s2
        A = 0.5 * (A + A.T)
        return A, a

    # --- gradients of the client's ELBO terms ---------------------------------
    def _mbar(self, loc):
        """Mean of the whitened shared-basis coefficients, ``m_g + m_delta``."""
        cfg = self.cfg
        if not cfg.global_basis:
            return None
        mbar = np.zeros(self.gb.W.shape[0])
        if cfg.use_global:
            mbar += self.mg
        if cfg.use_deviation:
            mbar += loc["md"]
        return mbar

    def _residual(self, mbar, loc):
        """``e = y - W^T mbar - V^T m_u``: the one pass over the rows a gradient needs."""
        e = self.y.copy()
        if mbar is not None:
            e -= self.gb.W.T @ mbar
        if self.cfg.use_local:
            e -= self.lb.W.T @ loc["mu"]
        return e

    def local_hyper_grad(self, X, loc):
        """Gradient of the client's ELBO terms with respect to ``Zl, ls_l, var_l``.

        As ``client_terms(..., want_local_hyper=True)``: the adjoint of ``V`` is
        ``(m_u e^T - S_u V + V) / s2``.
        """
        cfg, s2, lb = self.cfg, self.s2, self.lb
        mbar = self._mbar(loc)
        mu = loc["mu"]
        e = self._residual(mbar, loc)
        Ve = self.vy - lb.gram @ mu
        if mbar is not None:
            Ve -= self.C.T @ mbar
        A = basis_adjoint(1.0, [(1.0, loc["Lu"])], s2, mu.shape[0])
        gv, g_ls, gZ = kernel_grads(X, loc["Zl"], loc["ls_l"], cfg, lb, A,
                                    mu[:, None] / s2, e[:, None],
                                    var_direct=-self.n / (2 * s2), WE=Ve[:, None])
        return {"var_l": np.asarray(gv * sigmoid(loc["var_l"])), "ls_l": g_ls, "Zl": gZ}

    def global_kernel_grad(self, X, loc):
        """Gradient of the client's ELBO terms with respect to ``Zg, ls_g, var_g``.

        As ``client_terms(..., want_global=True)``: the adjoint of ``W`` is
        ``(mbar e^T - (S_g + S_delta) W + kappa W) / s2``.
        """
        cfg, s2, gb, g = self.cfg, self.s2, self.gb, self.g
        M = gb.W.shape[0]
        kappa = cfg.kappa_fixed + (self.phi if cfg.use_deviation else 0.0)
        mbar = self._mbar(loc)
        e = self._residual(mbar, loc)
        We = self.wy - gb.gram @ mbar
        blocks = [(1.0, src[k]) for on, src, k in ((cfg.use_global, g, "Lg"),
                                                   (cfg.use_deviation, loc, "Ld")) if on]
        A = basis_adjoint(kappa, blocks, s2, M)
        if cfg.use_local:
            We -= self.C @ loc["mu"]
        gv, g_ls, gZ = kernel_grads(X, g["Zg"], g["ls_g"], cfg, gb, A,
                                    mbar[:, None] / s2, e[:, None],
                                    var_direct=-kappa * self.n / (2 * s2), WE=We[:, None])
        return {"var_g": np.asarray(gv * sigmoid(g["var_g"])), "ls_g": g_ls, "Zg": gZ}

    # --- the message ------------------------------------------------------------
    def message(self, loc):
        """The sufficient statistics of the closed-form server (derived here).

        With ``r = y - W^T m_delta - V^T m_u``: ``rr = |r|^2``, ``b = W r``,
        ``Phi = W W^T`` (the server packs it), ``c`` the trace terms of
        ``q(delta_i)``, ``q(u_i)`` and the local residual trace, ``t_g`` the
        global residual trace, ``D = |m_delta|^2 + tr S_delta`` and the
        log-determinant of ``S_delta``, ``kl_u = KL(q(u_i) || p(u_i))``.
        """
        cfg, gb, lb = self.cfg, self.gb, self.lb
        rr, c, t_g = self.yy, 0.0, 0.0
        if cfg.global_basis:
            t_g = self.n * self.var_g - gb.sqnorm
        msg = {"n": np.int64(self.n)}
        if cfg.use_global:
            b = self.wy.copy()
        if cfg.use_deviation:
            md, Ld = loc["md"], loc["Ld"]
            # |Ld|^2, log det S_delta and |Ld^T W|^2, kept with the round's S_delta
            cov = gb._dev_cov
            sq, logdet, quad = (cov[3:] if cov is not None and cov[2] is Ld
                                else _factor_terms(gb, Ld))
            Gmd = gb.gram @ md
            rr += md @ Gmd - 2.0 * (md @ self.wy)
            c += quad
            if cfg.use_global:
                b -= Gmd
        if cfg.use_local:
            mu, Lu = loc["mu"], loc["Lu"]
            # |Lu|^2, log det S_u and |Lu^T V|^2, from the solve that set Lu
            terms = self._u_terms
            sq_u, logdet_u, quad_u = (terms[1:] if terms is not None and terms[0] is Lu
                                      else _factor_terms(lb, Lu))
            rr += mu @ (lb.gram @ mu) - 2.0 * (mu @ self.vy)
            t_l = self.n * lb.var - lb.sqnorm
            c += quad_u + t_l
            if cfg.use_deviation:
                rr += 2.0 * (md @ (self.C @ mu))
            if cfg.use_global:
                b -= self.C @ mu
        msg.update(rr=rr, c=c, t_g=t_g)
        if cfg.use_global:
            msg["Phi"] = gb.gram
            msg["b"] = b
        if cfg.use_deviation:
            msg["D"] = sq + float(md @ md)
            msg["logdet_d"] = logdet
        # KL(q(u_i) || p(u_i)) of the whitened block, from the same terms
        msg["kl_u"] = (0.5 * (sq_u + float(mu @ mu) - mu.shape[0] - logdet_u)
                       if cfg.use_local else 0.0)
        return msg


# ----------------------------------------------------------------------------
# the q of independent latents sharing a residual: the multi-output client (its
# deviation and local latents, with loadings), the multi-output server (q(u_g))
# and the scalar client (two latents with unit loadings) all solve it
# ----------------------------------------------------------------------------
def joint_means_gram(G, C, Bs, prior_prec, sizes, s2):
    """Jointly optimal whitened means of independent latents that share a residual.

    Maximizes ``-|R - sum_k (W_k^T m_k) b_k^T|^2 / (2 s2) - sum_k p_k |m_k|^2 / 2``
    over all ``m_k`` by one linear solve of size ``sum_k M_k``, from the Gram
    matrix ``G = W W^T`` of the stacked bases ``W = [W_1; W_2; ...]`` and ``C
    = W R`` (what a client sends the server in the closed-form mode). ``Bs``
    are the loading columns ``b_k`` and ``prior_prec`` the prior precisions
    ``p_k``.
    """
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    Bm = np.column_stack(Bs)
    coup = np.repeat(np.repeat(Bm.T @ Bm, sizes, axis=0), sizes, axis=1)
    P = coup * G / s2
    P.flat[::P.shape[0] + 1] += np.repeat(prior_prec, sizes)
    rhs = np.concatenate([C[off[k]:off[k + 1]] @ Bs[k] for k in range(len(sizes))]) / s2
    Lp = cholesky(0.5 * (P + P.T))
    m = cho_solve(Lp, rhs)
    return [m[off[k]:off[k + 1]] for k in range(len(sizes))]


def block_cov_gram(Phi, beta, s2, prior_prec=1.0):
    """Cholesky factor of the optimal whitened covariance ``(p I + beta Phi / s2)^{-1}``.

    ``Phi = W W^T`` is the Gram matrix of the latent's basis (summed over
    clients for the server's block) and ``beta = |b|^2`` its loading's norm.
    """
    P = beta * Phi / s2
    P.flat[::P.shape[0] + 1] += prior_prec
    # LAPACK directly: these small factorizations are many, the scipy wrappers dominate
    Lp, info = dpotrf(0.5 * (P + P.T), lower=1, clean=1)
    if info == 0:
        Sl, info = dpotri(Lp, lower=1)
    if info == 0:
        Ls, info = dpotrf(np.tril(Sl) + np.tril(Sl, -1).T, lower=1, clean=1)
    if info != 0:
        raise LinAlgError(f"optimal covariance factorization failed (info={info}).")
    return Ls


#: up to this many stacked coefficients (the sizes of the latents solved together)
#: the sweeps are one numba call; LAPACK's blocked factorizations catch up from
#: about 600 (measured 2026-12-02 with one BLAS thread, three sweeps: numba 1.1
#: against 2.6 ms at 140, 10 against 13 ms at 256, 36 against 52 ms at 500,
#: 79-88 against 75-78 ms at 750)
LATENT_Q_SMALL = 512


def loading_stats(G, C, means, Ls, sizes):
    """``H^T H``, ``H^T R`` and ``tr(G_kk S_k)`` of latents with means ``m_k`` and
    covariance factors ``L_k`` (``H = [W_k^T m_k]``), from ``G = W W^T`` and ``C = W R``
    of the stacked bases: the statistics of the loadings' ridge
    (:func:`ridge_loadings_gram`) and of the expected squared error."""
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    P = np.zeros((off[-1], len(sizes)))  # the means as the columns of a block diagonal
    for k in range(len(sizes)):
        P[off[k]:off[k + 1], k] = means[k]
    tr = np.array([np.sum(G[off[k]:off[k + 1], off[k]:off[k + 1]] * (L @ L.T))
                   for k, L in enumerate(Ls)])
    return P.T @ (G @ P), P.T @ C, tr


def ridge_loadings_gram(HtH, HtR, v):
    """Optimal loadings ``R^T H (H^T H + diag(v))^{-1}`` from ``H^T H`` and ``H^T R``
    (derived here, not in the paper)."""
    A = HtH + np.diag(v)
    return np.linalg.solve(A, HtR).T


def _local_sweeps_lapack(G, C, sizes, prior, kt, B, s2, n_sweeps, want_cov=None):
    """:func:`._closed_form_kernels.latent_sweeps` with LAPACK (for large stacks).

    Returns the means and covariance factors as lists (one per latent) and
    the loadings.
    """
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    blk = [slice(off[k], off[k + 1]) for k in range(len(sizes))]
    for sweep in range(n_sweeps + 1):
        beta = np.sum(B * B, axis=0)
        Ls = [block_cov_gram(G[b, b], beta[k], s2, prior[k])
              if sweep < n_sweeps or want_cov is None or want_cov[k]
              else np.zeros((sizes[k], sizes[k])) for k, b in enumerate(blk)]
        means = joint_means_gram(G, C, list(B.T), prior, sizes, s2)
        if sweep == n_sweeps:  # end with q optimal for the final loadings
            break
        HtH, HtR, tr = loading_stats(G, C, means, Ls, sizes)
        B = ridge_loadings_gram(HtH, HtR, tr + kt)
    return means, Ls, B


def latent_q(G, C, sizes, prior, B, s2, kt=None, n_sweeps=0, want_cov=None):
    """Optimal ``q`` of independent latents sharing a residual, and their loadings.

    :func:`._closed_form_kernels.latent_sweeps` up to ``LATENT_Q_SMALL`` stacked
    coefficients, :func:`_local_sweeps_lapack` beyond. With ``n_sweeps=0``
    the loadings ``B`` stay and only the covariances and the joint means are
    set (the server's ``q(u_g)`` step); ``kt`` (the residual-trace terms of
    the loadings' ridge) is needed only for ``n_sweeps > 0``; ``want_cov``
    (default all) marks the latents whose covariance the last step sets
    (the others' factors are zeros).

    Returns
    -------
    means, Ls : list of ndarray
        Each latent's mean and covariance factor.
    B : ndarray of shape (Q, len(sizes))
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    prior = np.asarray(prior, dtype=float)
    kt = np.zeros(len(sizes)) if kt is None else np.asarray(kt, dtype=float)
    B = np.ascontiguousarray(B, dtype=float)
    want = (np.ones(len(sizes), dtype=bool) if want_cov is None
            else np.asarray(want_cov, dtype=bool))
    if sizes.sum() > LATENT_Q_SMALL:
        return _local_sweeps_lapack(G, C, sizes, prior, kt, B, s2, n_sweeps, want)
    info, m, Lpad, B = latent_sweeps(np.ascontiguousarray(G), np.ascontiguousarray(C),
                                         sizes, prior, kt, B, s2, n_sweeps, want)
    if info != 0:
        raise LinAlgError(f"a latent precision is not positive definite (info={info}).")
    off = np.concatenate([[0], np.cumsum(sizes)])
    return ([m[off[k]:off[k + 1]] for k in range(len(sizes))],
            [Lpad[k, :q, :q] for k, q in enumerate(sizes)], B)
