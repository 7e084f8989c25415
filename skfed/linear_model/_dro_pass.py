"""The DP-Fed DRO client pass: numpy until numba's kernel pays for its loading.

:func:`dro_cs_pass` computes what :func:`skfed.linear_model._kernels.dro_cs_pass`
computes, in the same floating-point order, so both give the same bits (tested).
Loading the numba kernel costs about a second in every new process (importing numba,
then its on-disk cache; a first compilation much more), while a site's pass on a few
hundred rows takes well under a millisecond in numpy. On Flower every message starts a
new process that makes one pass, so a small site never loads numba. A process that
makes many passes (an in-process fit on large data) switches to the kernel once its
numpy passes have taken :data:`NUMPY_BUDGET_S` seconds, or at once when the kernel is
loaded already or a single pass is large (:data:`LARGE_PASS`).
"""

import sys
import time

import numpy as np

__all__ = ["dro_cs_pass", "dro_cs_pass_numpy"]

#: seconds of numpy passes in a process after which the numba kernel is loaded (about
#: what loading it from numba's cache costs)
NUMPY_BUDGET_S = 0.5
#: a pass over this many ``row x class x feature`` products goes to numba at once
LARGE_PASS = 20_000_000

_spent = [0.0]  # seconds of numpy passes in this process


def _kernel_loaded():
    return "skfed.linear_model._kernels" in sys.modules


def dro_cs_pass(X, y, coef, lam, kappa, grad):
    """Loss sum and subgradient sums of the DRO Crammer-Singer loss (see the kernel).

    Same arguments and results as :func:`skfed.linear_model._kernels.dro_cs_pass`
    (``grad`` is overwritten); numpy or the numba kernel, whichever is cheaper here.
    """
    work = X.shape[0] * coef.shape[0] * X.shape[1]
    if _kernel_loaded() or _spent[0] >= NUMPY_BUDGET_S or work >= LARGE_PASS:
        from ._kernels import dro_cs_pass as kernel

        return kernel(X, y, coef, lam, kappa, grad)
    tic = time.perf_counter()
    try:
        return dro_cs_pass_numpy(X, y, coef, lam, kappa, grad)
    finally:
        _spent[0] += time.perf_counter() - tic


def dro_cs_pass_numpy(X, y, coef, lam, kappa, grad):
    """The kernel's pass in numpy, summing in the kernel's order (hence the same bits).

    The scores are summed feature by feature, the losses and the ``lam`` subgradient
    row by row (``cumsum``), and each row's ``+x_n``/``-x_n`` is added to the gradient
    in row order (``np.add.at``), as the kernel's loops do.
    """
    X = np.asarray(X, dtype=float)
    coef = np.asarray(coef, dtype=float)
    n, k = X.shape[0], coef.shape[0]
    grad[:, :] = 0.0
    if n == 0:
        return 0.0, 0.0
    scores = np.zeros((n, k))
    for p in range(X.shape[1]):  # acc += coef[k, p] * X[n, p], in the kernel's order
        scores += X[:, p, None] * coef[None, :, p]
    rows = np.arange(n)
    labels = np.arange(k)[None, :]
    i1 = np.argmax(scores, axis=1)  # the first maximum, as the kernel's strict ">"
    masked = scores.copy()
    masked[rows, i1] = -np.inf
    i2 = np.argmax(masked, axis=1)  # the first maximum among the others
    top1, top2 = scores[rows, i1], scores[rows, i2]
    # l(j) = max(0, max_{c != j} s_c + 1 - s_j)
    other = np.where(labels == i1[:, None], top2[:, None], top1[:, None])
    per_label = np.maximum(0.0, other + 1.0 - scores)
    y = np.asarray(y)
    loss_true = per_label[rows, y]
    per_label[rows, y] = -np.inf
    j_flip = np.argmax(per_label, axis=1)  # the first best flipped label
    best_flip = per_label[rows, j_flip]
    loss_flip = best_flip - kappa * lam
    use_true = loss_true >= loss_flip
    active = np.where(use_true, y, j_flip)
    active_loss = np.where(use_true, loss_true, best_flip)
    losses = np.where(use_true, loss_true, loss_flip)
    loss_sum = float(np.cumsum(losses)[-1])  # row by row, as the kernel adds them
    flips = np.where(use_true, 0.0, -kappa)
    grad_lam_sum = float(np.cumsum(flips)[-1]) if flips.size else 0.0
    on = active_loss > 0.0
    if on.any():
        act = active[on]
        c = np.where(act == i1[on], i2[on], i1[on])
        Xon = X[on]
        # row n adds x_n to class c_n, then -x_n to its active label (c_n != active_n)
        index = np.stack([c, act], axis=1).ravel()
        values = np.stack([Xon, -Xon], axis=1).reshape(-1, X.shape[1])
        np.add.at(grad, index, values)
    return loss_sum, grad_lam_sum
