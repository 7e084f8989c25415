"""The two optimizers of pFedHGP's training rounds, as strategies the steps call.

The steps (:class:`._steps._PFedHGPSteps`, multi-output
:class:`._ilmm_steps._IlmmSteps`) run the protocol: set-up, broadcast, the
client's inputs, bases and targets, the server's bookkeeping. What a training
round does with them is the optimizer's, one class each:

* :class:`PaperAdam` (``optimizer="paper"``, both models): the client runs
  ``local_steps`` Adam steps on its local ELBO (eq. 20) with the global block
  fixed, then sends the gradient of its ELBO terms with respect to the global
  block (eq. 23) and its ELBO value; the server adds ``-grad KL_g`` and takes
  one Adam step (eqs. 24-27).
* :class:`ClosedForm` (``optimizer="cavi"``, scalar model) and
  :class:`IlmmClosedForm` (multi-output): the client sets its blocks to their
  closed-form optimum (:mod:`._closed_form`, :mod:`._ilmm`), takes Adam steps on
  its local kernel and sends sufficient statistics; the server sets ``q(u_g)``
  (and ``B_g``), ``phi`` and ``sigma^2`` to their joint closed-form optimum and
  takes an Adam step on the global kernel every other round.

A strategy keeps no fit state (that lives in the step values); it reads the
steps' settings and model hooks (``steps.cfg``, ``steps.local_keys()``,
``steps._terms`` ...). Each method returns what the protocol sends on.
"""

import math

import numpy as np

from ._adam import adam_ascent, adam_init
from ._closed_form import (
    ClosedFormClient, fused_local_basis, latent_q, loading_stats, ridge_loadings_gram,
    round_fusable, small_round,
)
from ._elbo import (
    deviation_kl, expected_log_lik, kl_whitened, optimal_phi, server_kl, softplus, softplus_inv,
    stacked_gram,
)
from ._ilmm import IlmmClientGram, _colsq, ilmm_terms, solve_local_ilmm
from ._linalg import cho_solve, cholesky, tril_pack, tril_unpack
from ._random_effects import effects_update

# the parameters a local basis depends on
LOCAL_HYPER = ("Zl", "ls_l", "var_l")


def message_total(msgs, key, packed=None):
    """Sum of the entry ``key`` over the clients' messages ``msgs``.

    A float for scalar entries, else an array; ``packed=m`` unpacks a summed
    packed lower triangle to the symmetric ``m x m`` matrix.
    """
    total = sum(np.asarray(msg[key], dtype=float) for msg in msgs)
    if packed is not None:
        return tril_unpack(total, packed, symmetric=True)
    return float(total) if np.ndim(total) == 0 else total


def wants_kernel_grad(broadcast):
    """Whether a closed-form round's message must carry the global kernel gradient."""
    return bool(int(broadcast["kernel_grad"])) if "kernel_grad" in broadcast else True


def adam_server_update(state, messages, keys, kl, kl_grads, unpack, lr):
    """The paper's server step: one Adam ascent step on the global block.

    Sums the clients' gradient summaries ``g_<key>`` (``unpack(key, total)``
    restores packed triangular blocks), subtracts the global KL's gradient
    and records the federated ELBO. Shared by the scalar and ILMM models.
    """
    grads = {}
    for k in keys:
        total = sum(np.asarray(m["g_" + k], dtype=float) for m in messages.values())
        grads[k] = unpack(k, total) - kl_grads.get(k, 0.0)
    elbo = sum(float(m["value"]) for m in messages.values()) - kl
    g_new, adam = adam_ascent(state["g"], grads, state["adam"], lr, keys,
                              scale={"Zg": state["z_scale"]})
    if "Lg" in g_new:
        g_new["Lg"] = np.tril(g_new["Lg"])
    state.update(g=g_new, adam=adam, elbo=state["elbo"] + [elbo])
    return state


class _Optimizer:
    """An optimizer's training round, for the steps it serves.

    Parameters
    ----------
    steps : _PFedHGPSteps
        The fit's steps (settings and model hooks).
    """

    #: whether the server can set ``m_g`` jointly with the clients' means
    #: (the estimator's ``mean_update="joint"``)
    joint_mean = False

    def __init__(self, steps):
        self.steps = steps


class PaperAdam(_Optimizer):
    """``optimizer="paper"``: Adam on the client's blocks, Adam on the global block."""

    def fuses_round(self, X, loc, g):
        """Whether the client's round is one compiled call (never here)."""
        return False

    def client_round(self, X, y, g, loc, gb, adam, zscale, cache, broadcast, small):
        """The client's round: ``(loc, adam, jitter, message)``; the message holds the
        client's ELBO terms and their gradient with respect to the global block."""
        steps = self.steps
        loc, adam, jit = self.local_steps(X, y, g, loc, gb, adam, zscale, cache)
        lb = steps._local_basis(X, loc, cache) if steps.cfg.use_local else None
        value, _, gg, _ = steps._terms(X, y, g, loc, gb, lb, want_global=True)
        keys = steps.global_keys()
        packed = steps.pack_global({k: gg[k] for k in keys})
        msg = {"value": value}
        for k in keys:
            msg["g_" + k] = packed[k]
        return loc, adam, jit, msg

    def local_steps(self, X, y, g, loc, gb, adam, zscale, cache):
        """``local_steps`` Adam ascent steps on every client block: ``(loc, adam, jitter)``."""
        steps = self.steps
        keys = steps.local_keys()
        if not keys:
            return loc, adam, 0.0
        if adam is None:
            adam = adam_init(loc, keys)
        jit = 0.0
        for _ in range(steps.local_steps):
            lb = steps._local_basis(X, loc, cache) if steps.cfg.use_local else None
            _, gl, _, _ = steps._terms(X, y, g, loc, gb, lb, want_local=True)
            jit = max(jit, steps._jitter(lb))
            loc, adam = adam_ascent(loc, gl, adam, steps.local_lr, keys, scale=zscale)
            for k in ("Ld", "Lu"):
                if k in loc:
                    loc[k] = np.tril(loc[k])
        return loc, adam, jit

    def broadcast(self, state):
        """The optimizer's entries of the broadcast (none)."""
        return {}

    def server_round(self, state, messages):
        """One Adam step on the global block from the clients' gradients (eqs. 24-27)."""
        steps = self.steps
        kl, kl_grads = server_kl(state["g"], steps.cfg)  # the server's term of the ELBO

        def unpack(k, total):
            return steps.unpack_global({k: total})[k]

        return adam_server_update(state, messages, steps.global_keys(), kl, kl_grads, unpack,
                                  steps.server_lr)


class ClosedForm(_Optimizer):
    """``optimizer="cavi"``: closed-form blocks on both sides, Adam on the kernels.

    The client sets ``q(delta_i)``, ``q(u_i)`` to their closed-form optimum
    (derived here), takes ``local_steps`` Adam steps on its local kernel with
    ``q`` re-solved after each, and sends the sufficient statistics ``W W^T``,
    ``W r`` and a few scalars (the same information as the paper's gradient
    message, eq. 23) plus the gradient for the global kernel; the server sets
    ``q(u_g)``, ``phi`` and ``sigma^2`` to their joint closed-form optimum
    (coordinate ascent, derived here) and takes one Adam step on the global
    kernel hyperparameters and ``Z_g``. With ``joint_mean`` (the estimator's
    ``mean_update="joint"``) the clients also send ``(A_i, a_i)``, their means
    objective with their own blocks integrated out
    (:meth:`ClosedFormClient.marginal_global_stats`); the server then updates
    ``S_g``, ``phi`` and ``sigma^2`` at the broadcast ``m_g`` and sets ``m_g``
    to the joint optimum of all the means, except in the last round.
    """

    joint_mean = True

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_round_scalars", None)
        return state

    # --- client ----------------------------------------------------------------
    def fuses_round(self, X, loc, g):
        """Whether this client's round is one compiled call (``round_fusable``)."""
        return ("Zg" in g and "Zl" in loc
                and round_fusable(self.steps.cfg, X.shape[0], g["Zg"].shape[0],
                                  loc["Zl"].shape[0], self.steps.local_steps))

    def client_round(self, X, y, g, loc, gb, adam, zscale, cache, broadcast, small):
        """The closed-form client round: ``(loc, adam, jitter, message)``."""
        if small:
            return self.small_round(X, y, g, loc, gb, adam, zscale, cache, broadcast)
        loc, adam, jit, cf = self.local_steps(X, y, g, loc, gb, adam, zscale, cache)
        msg = self.message(X, loc, cf, kernel_grad=wants_kernel_grad(broadcast))
        if int(broadcast.get("joint_mean", 0)):
            A, a = cf.marginal_global_stats()
            msg["A_joint"], msg["a_joint"] = tril_pack(A), a
        return loc, adam, jit, msg

    def local_steps(self, X, y, g, loc, gb, adam, zscale, cache):
        """The closed-form ``q`` and the Adam steps on the local kernel, ``q`` solved
        again after each: ``(loc, adam, jitter, ClosedFormClient)``."""
        steps = self.steps
        cfg = steps.cfg
        hyper = steps.local_keys(hyper_only=True)
        if adam is None and hyper:
            adam = adam_init(loc, hyper)
        cf = ClosedFormClient(y, g, cfg, gb)
        jit = 0.0
        n_steps = steps.local_steps if hyper else 0
        # small clients: the local steps as one compiled call (the same steps); its
        # bases are kept under their own name (formed by numba, not LAPACK)
        fused = bool(n_steps) and cf.fusable(np.shape(loc.get("Zl", ()))[0])
        if fused:
            lb = cache.get("local_fused", [loc[k] for k in LOCAL_HYPER if k in loc],
                           lambda: fused_local_basis(X, loc, cfg))
            jit = lb.jitter
            cf.set_local_fused(lb)
        elif cfg.use_local:
            lb = steps._local_basis(X, loc, cache)
            jit = lb.jitter
            cf.set_local(lb)
        loc = cf.solve(loc)
        if fused:
            loc, adam, jit_f = cf.fused_local_steps(X, loc, adam, n_steps, steps.local_lr,
                                                    zscale["Zl"])
            cache.put("local_fused", [loc[k] for k in LOCAL_HYPER if k in loc], cf.lb)
            return loc, adam, max(jit, jit_f), cf
        for _ in range(n_steps):
            gl = cf.local_hyper_grad(X, loc)
            loc, adam = adam_ascent(loc, gl, adam, steps.local_lr, hyper, scale=zscale)
            lb = steps._local_basis(X, loc, cache)
            jit = max(jit, lb.jitter)
            cf.set_local(lb)
            loc = cf.solve(loc)
        return loc, adam, jit, cf

    def small_round(self, X, y, g, loc, gb, adam, zscale, cache, broadcast):
        """A small client's closed-form round and message in one call
        (:func:`~._closed_form.small_round`); its last local basis is kept under
        its own name (formed by numba, so a site that dropped it forms the same)."""
        steps = self.steps
        lb = cache.get("local_round", [loc[k] for k in LOCAL_HYPER], lambda: None)
        # s2 and phi: the same for every client of the round (kept with the broadcast)
        last = self.__dict__.get("_round_scalars")
        if last is None or last[0] is not broadcast:
            last = (broadcast, (float(softplus(g["noise"])), float(softplus(g["phi"]))))
            self._round_scalars = last
        loc, adam, jit, body, lb = small_round(
            X, y, g, loc, gb, adam, steps.cfg, steps.local_steps, steps.local_lr, zscale["Zl"],
            lb, wants_kernel_grad(broadcast) and bool(steps.kernel_keys()),
            bool(int(broadcast.get("joint_mean", 0))), last[1])
        cache.put("local_round", [loc[k] for k in LOCAL_HYPER], lb)
        msg = {"n": np.int64(X.shape[0])}
        msg.update(body)
        return loc, adam, jit, msg

    def message(self, X, loc, cf, kernel_grad=True):
        """The client's sufficient statistics (:meth:`ClosedFormClient.message`) and, in
        the rounds whose server step moves the kernel, the global kernel gradient."""
        msg = cf.message(loc)
        if "Phi" in msg:
            msg["Phi"] = tril_pack(msg["Phi"])
        keys = self.steps.kernel_keys()
        if kernel_grad and keys:
            gg = cf.global_kernel_grad(X, loc)
            for k in keys:
                msg["g_" + k] = gg[k]
        return msg

    # --- server ----------------------------------------------------------------
    def broadcast(self, state):
        """The optimizer's entries of the broadcast: whether the clients send the
        kernel gradient (:meth:`moves_kernel`) and, with ``joint_mean``, whether the
        server sets ``m_g`` jointly (:meth:`joint_round`)."""
        b = {"kernel_grad": np.int64(self.moves_kernel(state))}
        if self.steps.joint_mean:
            b["joint_mean"] = np.int64(self.joint_round(state))
        return b

    def joint_round(self, state):
        """Whether the next server step sets ``m_g`` jointly (all but the last)."""
        return self.steps.joint_mean and not self.steps._last_round(state)

    def moves_kernel(self, state):
        """Whether the next server step moves the global kernel.

        By the envelope argument the clients' kernel gradient is the gradient of
        the collapsed bound only if the broadcast q(u_g) was optimal for the
        broadcast kernel, i.e. if the kernel did not move in the previous round
        (and q(u_g) is not the initial one). So the kernel moves every other
        round, and never in the last one (q(u_g) stays optimal for the final
        kernel). The broadcast carries this decision so that clients compute
        and send the kernel gradient only in the rounds that use it.
        """
        return (bool(self.steps.kernel_keys()) and bool(state.get("elbo"))
                and not state.get("moved", False) and not self.steps._last_round(state))

    def kernel_step(self, state, g, msgs, elbo):
        """The server's end of round: one Adam step on the global kernel in the
        rounds :meth:`moves_kernel` allows, then the new ``g`` and ELBO."""
        hyper = self.steps.kernel_keys()
        state["moved"] = self.moves_kernel(state)
        if state["moved"]:
            # each client's latest kernel gradient (a client asked in no kernel
            # round yet has none)
            grads = {k: sum(np.asarray(m["g_" + k], dtype=float) for m in msgs
                            if "g_" + k in m) for k in hyper}
            adam = state["hyper_adam"] or adam_init(g, hyper)
            g, adam = adam_ascent(g, grads, adam, self.steps.server_lr, hyper,
                                  scale={"Zg": state["z_scale"]})
            state["hyper_adam"] = adam
        state.update(g=g, elbo=state["elbo"] + [float(elbo)])
        return state

    def server_round(self, state, messages):
        """The closed-form server step (derived here): alternate ``q(u_g)`` (jointly
        over the latents, :func:`._closed_form.latent_q`), the loadings ``B_g``
        (multi-output model), ``sigma^2`` and ``phi``, ``server_iterations`` times,
        from the totals of the clients' statistics; then the ELBO.

        Written once for both models: the scalar model is one latent with its
        loading fixed at 1 (its blocks are reshaped to a stack of one).
        """
        steps = self.steps
        cfg = steps.cfg
        g = dict(state["g"])
        msgs = list(messages.values())
        T, M, R = len(msgs), steps.M, math.prod(steps.latents("global"))
        n, rr, c, kl_u = (message_total(msgs, k) for k in ("n", "rr", "c", "kl_u"))
        t_g = message_total(msgs, "t_g") if cfg.global_basis else None
        if cfg.use_deviation:
            a = self.deviation_trace(msgs, t_g)
            D, logdet_d = message_total(msgs, "D"), message_total(msgs, "logdet_d")
        s2 = float(softplus(g["noise"]))
        phi = float(softplus(g["phi"])) if cfg.use_deviation else 0.0
        Q = cfg.n_outputs if steps.has_loadings else 1
        mg = Lg = Bg = None
        if cfg.use_global:
            mg, Lg = g["mg"].reshape(R, M), g["Lg"].reshape(R, M, M)
            Bg = g["Bg"] if steps.has_loadings else np.ones((1, 1))
            G, WR = message_total(msgs, "Phi", packed=R * M), self.global_projection(msgs)

        def global_terms(mg, Lg):
            """``H_g^T H_g``, ``H_g^T R`` and ``v_g`` summed over clients."""
            HtH, HtR, tr = loading_stats(G, WR, mg, Lg, [M] * R)
            return HtH, HtR, tr + t_g

        def total_E(terms, Bg, phi):
            """The expected squared error: ``|R - H_g B_g^T|^2`` plus the variance terms."""
            E = c + phi * a if cfg.use_deviation else c
            if cfg.use_global:
                HtH, HtR, v = terms
                err = rr - 2 * np.sum(Bg * HtR.T) + np.sum((Bg.T @ Bg) * HtH)
                E += err + float(np.sum(Bg**2, axis=0) @ v)
            else:
                E += rr
            return E

        joint = self.joint_round(state)
        terms = global_terms(mg, Lg) if cfg.use_global else None
        for _ in range(steps.server_iterations):
            if cfg.use_global:
                means, Ls, _ = latent_q(G, WR, [M] * R, np.ones(R), Bg, s2)
                Lg = np.stack(Ls)
                if not joint:  # the joint round sets m_g after the loop
                    mg = np.array(means)
                terms = global_terms(mg, Lg)
                if steps.has_loadings:
                    Bg = ridge_loadings_gram(*terms)
            E = total_E(terms, Bg, phi)
            s2 = max(E / (n * Q), 1e-10)
            if cfg.use_deviation:
                phi = max(optimal_phi(D, a, T * R, M, s2), 1e-10)
        E = total_E(terms, Bg, phi)
        elbo = expected_log_lik(n * Q, E, s2) - kl_u
        if cfg.use_deviation:
            elbo -= deviation_kl(D, logdet_d, T * R * M, phi)
        if cfg.use_global:
            g["mg"], g["Lg"] = mg.reshape(g["mg"].shape), Lg.reshape(g["Lg"].shape)
            if steps.has_loadings:
                g["Bg"] = Bg
            elbo -= server_kl(g, cfg)[0]
        if steps.random_effects:  # the M step of Sigma (._random_effects)
            sent = [m for m in msgs if "re_moment" in m]
            if sent:
                state["re_cov"], shift = effects_update(
                    [m["re_moment"] for m in sent], [m["re_m"] for m in sent])
                # the fixed effects take the effects' common part (their mean is 0)
                scale = float(state["y_scale"])
                state["y_shift"] = float(state["y_shift"]) + scale * shift[0]
                if shift.shape[0] > 1 and state.get("y_coef") is not None:
                    state["y_coef"] = np.asarray(state["y_coef"], dtype=float) + scale * shift[1:]
        if joint:
            # the ELBO above is that of the clients' blocks with the broadcast m_g
            # and the new S_g, phi, s2; m_g then jumps to the joint optimum of all
            # the means (ClosedFormClient.marginal_global_stats) at the broadcast
            # s2, phi, and the clients' next solve follows it
            A = message_total(msgs, "A_joint", packed=M)
            A[np.diag_indices(M)] += 1.0
            g["mg"] = cho_solve(cholesky(A), message_total(msgs, "a_joint"))
        g["noise"] = np.asarray(softplus_inv(s2))
        if cfg.use_deviation:
            g["phi"] = np.asarray(softplus_inv(phi))
        return self.kernel_step(state, g, msgs, elbo)

    # the server's statistics (the multi-output messages name them apart)
    def global_projection(self, msgs):
        """``W R`` of the stacked global bases (``(R M, Q)``) summed over clients."""
        return message_total(msgs, "b")[:, None]

    def deviation_trace(self, msgs, t_g):
        """``sum_r |b_delta,r|^2 t_g,r`` summed over clients: the deviation's residual
        trace (the loading is 1 here)."""
        return t_g


class IlmmClosedForm(ClosedForm):
    """``optimizer="cavi"`` for the multi-output model: closed-form ``q`` and loadings.

    The client runs coordinate ascent on its blocks' ``q`` and loadings
    (:func:`._ilmm.solve_local_ilmm`) with Adam steps on its local kernel, and
    sends the Gram matrix of its stacked global bases, their product with its
    partial residual, the residual's squared norm and a few scalars; the server
    alternates the closed-form ``q(u_g^(r))`` (jointly over latents), ``B_g``,
    ``sigma^2`` and ``phi`` (:meth:`ClosedForm.server_round`), and takes an Adam
    step on the global lengthscales and ``Z_g``.
    """

    joint_mean = False  # the joint global mean step is the scalar model's only

    #: coordinate-ascent sweeps of the client's closed form (:func:`._ilmm.solve_local_ilmm`)
    #: at the round's start and after each local step
    sweeps = (3, 1)

    def fuses_round(self, X, loc, g):
        return False  # the fused small-client round is the scalar model's only

    def client_round(self, X, Y, g, loc, gbs, adam, zscale, cache, broadcast, small):
        loc, adam, jit, gram = self.local_steps(X, Y, g, loc, gbs, adam, zscale, cache)
        msg = self.message(X, Y, g, loc, gbs, gram, kernel_grad=wants_kernel_grad(broadcast))
        return loc, adam, jit, msg

    def local_steps(self, X, Y, g, loc, gbs, adam, zscale, cache):
        """Closed-form client blocks and Adam steps on the local kernel.

        Returns ``(loc, adam, jitter, gram)`` with ``gram`` the
        :class:`._ilmm.IlmmClientGram` of the final bases (for the message).
        """
        steps = self.steps
        cfg = steps.cfg
        hyper = steps.local_keys(hyper_only=True)
        if adam is None and hyper:
            adam = adam_init(loc, hyper)
        lbs = steps._local_basis(X, loc, cache) if cfg.use_local else None
        jit = steps._jitter(lbs)
        gram = IlmmClientGram(Y, gbs, lbs, cfg)
        loc = solve_local_ilmm(X, Y, g, loc, cfg, gbs, lbs, n_sweeps=self.sweeps[0], gram=gram)
        for _ in range(steps.local_steps if hyper else 0):
            _, gl, _, _ = ilmm_terms(X, Y, g, loc, cfg, gbs=gbs, lbs=lbs, want_local_hyper=True,
                                     want_value=False)
            loc, adam = adam_ascent(loc, gl, adam, steps.local_lr, hyper, scale=zscale)
            lbs = steps._local_basis(X, loc, cache)
            jit = max(jit, steps._jitter(lbs))
            gram = IlmmClientGram(Y, gbs, lbs, cfg)
            loc = solve_local_ilmm(X, Y, g, loc, cfg, gbs, lbs, n_sweeps=self.sweeps[1], gram=gram)
        return loc, adam, jit, gram

    def message(self, X, Y, g, loc, gbs, gram, kernel_grad=True):
        """Sufficient statistics of the global block (the paper message's information).

        With ``W`` the stacked global bases and ``R`` the client's partial
        residual ``Y - H_d B_d^T - H_l B_l^T``: ``W W^T`` (packed), ``W R``,
        ``|R|^2``, the residual traces, the client's variance terms, and the
        deviation statistics for ``phi``, all from the Gram statistics
        ``gram`` (:class:`._ilmm.IlmmClientGram`). The gradient for ``ls_g,
        Z_g`` too, in the rounds whose server step moves the kernel
        (``kernel_grad``).
        """
        cfg = self.steps.cfg
        n = Y.shape[0]
        msg = {"n": np.int64(n)}
        c = 0.0
        if cfg.global_basis:
            t_g = np.array([n * cfg.variance_global - b.sqnorm for b in gbs])
        if cfg.use_deviation:
            # the deviation variance terms without their phi * t_g part
            bd = np.sum(loc["Bd"] ** 2, axis=0)
            c += float(bd @ np.array([b.quad(L) for b, L in zip(gbs, loc["Ld"])]))
            msg["a"] = float(bd @ t_g)
            msg["D"] = float(sum(_colsq(L) + m @ m for m, L in zip(loc["md"], loc["Ld"])))
            msg["logdet_d"] = float(sum(2.0 * np.sum(np.log(np.abs(np.diag(L))))
                                        for L in loc["Ld"]))
        if cfg.use_local:
            v_l = np.array([b.quad(L) + (n * cfg.variance_local - b.sqnorm)
                            for b, L in zip(gram.local, loc["Lu"])])
            c += float(np.sum(loc["Bl"] ** 2, axis=0) @ v_l)
            msg["kl_u"] = float(sum(kl_whitened(m, L) for m, L in zip(loc["mu"], loc["Lu"])))
        else:
            msg["kl_u"] = 0.0
        rr, WR = gram.partial_residual(loc, gbs)
        msg["rr"] = rr
        msg["c"] = c
        if cfg.global_basis:
            msg["t_g"] = t_g
        if cfg.use_global:
            msg["Phi"] = tril_pack(stacked_gram(gbs))
            msg["WR"] = WR
        keys = self.steps.kernel_keys()
        if kernel_grad and keys:
            _, _, gg, _ = ilmm_terms(X, Y, g, loc, cfg, gbs=gbs, lbs=gram.local or None,
                                     want_global=True, want_value=False)
            for k in keys:
                msg["g_" + k] = gg[k]
        return msg

    def global_projection(self, msgs):
        return message_total(msgs, "WR")

    def deviation_trace(self, msgs, t_g):
        return message_total(msgs, "a")
