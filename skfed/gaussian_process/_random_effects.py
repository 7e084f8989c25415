"""PFedHGP's linear random effects: a per-site random intercept (and slopes).

With ``random_effects`` on, client ``i``'s normalized targets get one more
additive block, a linear mixed model's random effects (Laird & Ware 1982)::

    y = f_g(x) + f_delta_i(x) + f_l_i(x) + z(x)^T b_i + eps,   b_i ~ N(0, Sigma)

with ``z(x) = [1]`` (``"intercept"``) or ``[1, x]`` (``"linear"``, model
units: standardized inputs), ``Sigma`` a full covariance learned by the
server. It is one more mean-field block of the variational posterior,
``q(b_i) = N(m_i, S_i)``, so the model nests the linear mixed model: with the
GP blocks switched off it is the EM algorithm for a random-intercept-and-slope
model (Laird, Lange & Stram 1987) around the pooled linear prior mean.

* The client's ``q(b_i)`` is optimal given its GP blocks (derived here, like
  the closed-form GP blocks): in whitened coordinates ``b = L v`` with
  ``Sigma = L L^T``, ``q(v) = N(P^{-1} L^T Z^T r / s2, P^{-1})`` with
  ``P = I + L^T Z^T Z L / s2`` and ``r`` the residual of the GP blocks' means;
  a singular ``Sigma`` (an effect estimated at zero) needs no inverse.
* Its ELBO terms: ``tr(Z^T Z S_i)`` joins the expected squared error (so the
  noise update sees it) and ``KL(q(v) || N(0, I))`` the client's KL.
* The server's closed-form M step: the fixed effects (the prior mean's
  intercept and slopes) take the clients' mean ``delta`` of ``m_i``, and
  ``Sigma`` is the mean over clients of ``E[(b_i - delta)(b_i - delta)^T]``
  (without it the effects' common part drifts against the global GP). A
  client sends ``E[b_i b_i^T] = m_i m_i^T + S_i`` and ``m_i``, functions of
  its GP residuals as its other per-round statistics are (``doc/releases.md``).
* The first training round fits the GP blocks alone (``b_i = 0``): the noise
  is then still at its small start, and ``q(b_i)`` would take each client's
  whole offset before the shared blocks could.
"""

import numpy as np
from scipy.linalg import cho_factor, cho_solve, eigh

__all__ = ["RANDOM_EFFECTS", "effects_design", "effects_moments", "effects_q",
           "effects_update", "n_effects", "sqrt_psd"]

RANDOM_EFFECTS = ("none", "intercept", "linear")

# the initial Sigma, a multiple of the identity on the normalized scale
# (standardized inputs, targets scaled by the pooled residual standard deviation)
INITIAL_VARIANCE = 0.1


def n_effects(kind, n_features):
    """Number ``q`` of random effects per client."""
    return 1 if kind == "intercept" else n_features + 1


def effects_design(X, kind):
    """The random-effects design ``Z``: ``[1]`` or ``[1, X]`` per row (model units)."""
    X = np.asarray(X, dtype=float)
    ones = np.ones((X.shape[0], 1))
    return ones if kind == "intercept" else np.hstack([ones, X])


def sqrt_psd(S):
    """A square root ``L`` with ``L L^T = S`` of a symmetric positive semi-definite
    ``S``, through its eigendecomposition (zero on a null direction: no jitter)."""
    w, U = eigh(0.5 * (S + S.T))
    return U * np.sqrt(np.clip(w, 0.0, None))


def effects_q(Z, r, Sigma, s2):
    """A client's optimal ``q(b) = N(m, S)`` given its GP residual ``r``.

    Returns ``(m, S, trace, kl)``: the mean and covariance of ``b``,
    ``tr(Z^T Z S)`` and ``KL(q(b) || N(0, Sigma))`` (as ``KL(q(v) || N(0, I))``
    of the whitened ``v``, finite for a singular ``Sigma``).
    """
    L = sqrt_psd(Sigma)
    ZL = Z @ L
    q = L.shape[1]
    P = ZL.T @ ZL / s2
    P[np.diag_indices(q)] += 1.0
    c = cho_factor(P, lower=True)
    Sv = cho_solve(c, np.eye(q))
    mv = cho_solve(c, ZL.T @ r / s2)
    m = L @ mv
    S = L @ Sv @ L.T
    S = 0.5 * (S + S.T)
    trace = float(np.sum((ZL @ Sv) * ZL))
    logdet_Sv = -2.0 * float(np.sum(np.log(np.diag(c[0]))))
    kl = 0.5 * (float(np.trace(Sv)) + float(mv @ mv) - q - logdet_Sv)
    return m, S, trace, kl


def effects_update(moments, means):
    """The server's M step: the effects' mean ``delta`` over the clients, which the fixed
    effects take, and ``Sigma`` as the clients' ``E[(b - delta)(b - delta)^T]``.

    Returns ``(Sigma, delta)``.
    """
    delta = sum(np.asarray(m, dtype=float) for m in means) / len(means)
    Sigma = sum(np.asarray(m, dtype=float) for m in moments) / len(moments)
    Sigma = Sigma - np.outer(delta, delta)
    return 0.5 * (Sigma + Sigma.T), delta


def effects_moments(Z, m, S, full):
    """Mean ``Z m`` and the (diagonal or full) covariance ``Z S Z^T`` of ``Z b``."""
    ZS = Z @ S
    return Z @ m, (ZS @ Z.T if full else np.sum(ZS * Z, axis=1))
