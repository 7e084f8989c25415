"""numba kernels of the DP-Fed DRO client pass.

One pass over a client's rows computes the Crammer-Singer scores, the DRO
maximum over labels (true label vs. any flipped label at cost ``kappa *
lambda``) and the subgradient, in ``O(N K P)`` time and ``O(K)`` extra memory
per row: no ``N x K x K`` temporaries.
"""

import numpy as np
from numba import njit

from ..utils._compile_notice import install as _install_compile_notice

_install_compile_notice()  # a notice while these kernels compile on first use


@njit(cache=True, nogil=True)
def dro_cs_pass(X, y, coef, lam, kappa, grad):
    """Loss sum and subgradient sums of the DRO Crammer-Singer loss.

    For row ``n`` with scores ``s = coef @ x_n`` and per-label losses
    ``l(j) = max(0, max_{k != j} s_k + 1 - s_j)``, the loss is
    ``L_n = max(l(y_n), max_{j != y_n} l(j) - kappa * lam)``. Ties prefer the
    true label, then the lowest index. The subgradient in ``coef`` is
    ``(e_c - e_j*) x_n^T`` with ``j*`` the active label and ``c`` its most
    violating class (zero when the loss is 0); in ``lam`` it is ``-kappa``
    when a flipped label is active, else 0.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64
    y : ndarray of shape (n_samples,), int64
        Labels in ``0..n_classes-1``.
    coef : ndarray of shape (n_classes, n_features), float64
    lam : float
        DRO dual variable.
    kappa : float
        Label transport cost.
    grad : ndarray of shape (n_classes, n_features), float64
        Output: overwritten with the sum over rows of the subgradients in
        ``coef``.

    Returns
    -------
    loss_sum : float
        Sum of ``L_n`` over rows.
    grad_lam_sum : float
        Sum over rows of the subgradients in ``lam``.
    """
    n_samples, n_features = X.shape
    n_classes = coef.shape[0]
    scores = np.empty(n_classes)
    grad[:, :] = 0.0
    loss_sum = 0.0
    grad_lam_sum = 0.0
    for n in range(n_samples):
        for k in range(n_classes):
            acc = 0.0
            for p in range(n_features):
                acc += coef[k, p] * X[n, p]
            scores[k] = acc
        # top-2 scores give max_{k != j} s_k for every j in O(1)
        i1 = 0
        for k in range(1, n_classes):
            if scores[k] > scores[i1]:
                i1 = k
        i2 = 1 if i1 == 0 else 0
        for k in range(n_classes):
            if k != i1 and scores[k] > scores[i2]:
                i2 = k
        yn = y[n]
        other = scores[i2] if yn == i1 else scores[i1]
        loss_true = max(0.0, other + 1.0 - scores[yn])
        best_flip = -np.inf
        j_flip = -1
        for j in range(n_classes):
            if j == yn:
                continue
            other = scores[i2] if j == i1 else scores[i1]
            lj = max(0.0, other + 1.0 - scores[j])
            if lj > best_flip:
                best_flip = lj
                j_flip = j
        loss_flip = best_flip - kappa * lam
        if loss_true >= loss_flip:
            active = yn
            active_loss = loss_true
            loss_sum += loss_true
        else:
            active = j_flip
            active_loss = best_flip
            loss_sum += loss_flip
            grad_lam_sum -= kappa
        if active_loss > 0.0:
            c = i2 if active == i1 else i1
            for p in range(n_features):
                grad[c, p] += X[n, p]
                grad[active, p] -= X[n, p]
    return loss_sum, grad_lam_sum

