"""Adam (ascent): the state each party keeps across rounds and its numba step.

:func:`adam_update` is the arithmetic of one step on flat arrays (numba; the
fused local steps of :mod:`._closed_form_kernels` inline it); :func:`adam_ascent`
applies it to named parameters, the way every client and the server step.
"""

import numpy as np
from numba import njit

from ..utils._compile_notice import install as _install_compile_notice

_install_compile_notice()  # a notice while these kernels compile on first use


@njit(cache=True, nogil=True, no_cfunc_wrapper=True, inline="always")
def adam_update(p, g, m, v, lr, b1, b2, eps, c1, c2, scale):
    """One Adam ascent step on flat arrays; returns new ``(p, m, v)``.

    ``c1``, ``c2`` are the bias corrections ``1 - b1^t``, ``1 - b2^t``;
    element ``i`` is scaled by ``scale[i % scale.size]`` (a per-feature step
    unit along the last axis). The same operations, in the same order, as
    the numpy expression it replaces (no fastmath): results are identical.
    """
    n = p.shape[0]
    s = scale.shape[0]
    p_new = np.empty(n)
    m_new = np.empty(n)
    v_new = np.empty(n)
    for i in range(n):
        gi = g[i]
        mi = b1 * m[i] + (1 - b1) * gi
        vi = b2 * v[i] + (1 - b2) * gi * gi
        m_new[i] = mi
        v_new[i] = vi
        step = lr * (mi / c1) / (np.sqrt(vi / c2) + eps)
        p_new[i] = p[i] + step * scale[i % s]
    return p_new, m_new, v_new



_UNIT_STEP = np.ones(1)  # no step scaling (read only by adam_update)


def adam_init(params, keys):
    return {"t": 0, "m": {k: np.zeros_like(params[k], dtype=float) for k in keys},
            "v": {k: np.zeros_like(params[k], dtype=float) for k in keys}}


def adam_ascent(params, grads, state, lr, keys, b1=0.9, b2=0.999, eps=1e-8, scale=None):
    """One Adam ascent step on ``params[keys]``; returns new params and state.

    ``scale`` maps keys to a multiplier of their step, a scalar or one value
    per entry of the parameter's last axis: inducing inputs move in units of
    the feature range. The arithmetic is :func:`adam_update`.
    """
    t = state["t"] + 1
    c1, c2 = 1 - b1**t, 1 - b2**t
    out = dict(params)
    m_new, v_new = dict(state["m"]), dict(state["v"])
    for k in keys:
        p = np.asarray(params[k], dtype=float)
        unit = _UNIT_STEP
        if scale is not None and k in scale:
            unit = np.array(scale[k], dtype=float).ravel()  # writable, as _UNIT_STEP
            if unit.size > 1 and p.shape[-1:] != unit.shape:
                raise ValueError(f"step scale of {k!r} must match its last axis, "
                                 f"got {unit.shape} for {p.shape}")
        flat = adam_update(p.ravel(), np.asarray(grads[k], dtype=float).ravel(),
                           np.asarray(state["m"][k], dtype=float).ravel(),
                           np.asarray(state["v"][k], dtype=float).ravel(),
                           float(lr), b1, b2, eps, c1, c2, unit)
        out[k], m_new[k], v_new[k] = (a.reshape(p.shape) for a in flat)
    return out, {"t": t, "m": m_new, "v": v_new}
