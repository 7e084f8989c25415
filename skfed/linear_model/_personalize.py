"""A site's own adaptation of the shared linear model, fitted and kept on the site.

After the federated rounds each site fits, on its own rows only, the
multinomial logistic model

    scores_g(x) = t_g * s(x) + W_g z_g(x) + c_g,

where ``s(x)`` are the shared model's class scores, ``z_g`` the site's
features standardized by its own mean and standard deviation, ``t_g`` a
scale of the shared scores, ``c_g`` per-class site intercepts and ``W_g`` a
deviation shrunk toward zero by a ridge penalty whose strength the site
chooses by cross-validation on its rows (log loss). A strong penalty leaves
the shared model with a site intercept and temperature; a weak one a local
logistic regression that starts from the shared scores. Nothing of it is
sent: the site's releases, and any privacy guarantee on them, are those of
the federated rounds.
"""

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_softmax

#: ridge strengths of the deviation W_g tried by the site's cross-validation
#: (per-row mean log loss + lam / 2 ||W||^2)
PENALTIES = np.logspace(-3, 1, 5)
#: a tiny ridge on the intercepts keeps a class the site never saw finite
INTERCEPT_PENALTY = 1e-4
N_FOLDS = 3
#: L-BFGS iterations per fit: the site's problems are small and smooth; on separable
#: rows at a weak penalty the weights grow without end, and the CV then prefers a
#: stronger one anyway
MAX_ITER = 100
#: fewest rows of a site for the cross-validation (fewer: the strongest penalty)
MIN_ROWS_CV = 3 * N_FOLDS


def _unpack(theta, n_classes, n_features):
    t = theta[0]
    W = theta[1:1 + n_classes * n_features].reshape(n_classes, n_features)
    c = theta[1 + n_classes * n_features:]
    return t, W, c


def _loss_grad(theta, F, Z, y, lam):
    n, n_classes = F.shape
    t, W, c = _unpack(theta, n_classes, Z.shape[1])
    S = t * F + Z @ W.T + c
    logp = log_softmax(S, axis=1)
    rows = np.arange(n)
    loss = -logp[rows, y].mean() + 0.5 * lam * (W * W).sum() + 0.5 * INTERCEPT_PENALTY * c @ c
    G = np.exp(logp)
    G[rows, y] -= 1.0
    G /= n
    grad = np.concatenate([[np.sum(G * F)], (G.T @ Z + lam * W).ravel(),
                           G.sum(axis=0) + INTERCEPT_PENALTY * c])
    return loss, grad


def _start(n_classes, n_features):
    theta = np.zeros(1 + n_classes * (n_features + 1))
    theta[0] = 1.0  # the shared scores as they are
    return theta


def _fit(F, Z, y, lam, theta0):
    res = minimize(_loss_grad, theta0, args=(F, Z, y, lam), jac=True, method="L-BFGS-B",
                   options={"maxiter": MAX_ITER})
    return res.x


def _log_loss(theta, F, Z, y):
    t, W, c = _unpack(theta, F.shape[1], Z.shape[1])
    logp = log_softmax(t * F + Z @ W.T + c, axis=1)
    return -logp[np.arange(y.size), y].mean()


def fit_site_adaptation(shared_scores, X, y, penalties=PENALTIES):
    """The site's adaptation in raw units: ``(scale, coef, intercept, penalty)``.

    Parameters
    ----------
    shared_scores : ndarray of shape (n_samples, n_classes)
        The shared model's scores of the site's rows.
    X : ndarray of shape (n_samples, n_features)
        The site's rows, raw units.
    y : ndarray of shape (n_samples,)
        Class codes ``0 .. n_classes - 1``.
    penalties : array-like, default=PENALTIES
        Ridge strengths tried for ``W_g``.

    Returns
    -------
    scale : float
        ``t_g``, the weight of the shared scores.
    coef : ndarray of shape (n_classes, n_features)
        ``W_g`` in raw units.
    intercept : ndarray of shape (n_classes,)
        ``c_g`` in raw units.
    penalty : float
        The strength the site's cross-validation chose.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.linear_model._personalize import fit_site_adaptation
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((90, 2)); y = (X[:, 0] > 0).astype(int)
    >>> scale, coef, intercept, lam = fit_site_adaptation(np.zeros((90, 2)), X, y)
    >>> bool(coef[1, 0] - coef[0, 0] > 0)
    True
    """
    F = np.asarray(shared_scores, dtype=float)
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=np.int64)
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    std[std <= 1e-12 * np.maximum(1.0, np.abs(mean))] = 1.0  # constant on this site
    Z = (X - mean) / std
    # strongest penalty first: each fit starts from the previous, more shrunk one
    penalties = np.sort(np.asarray(penalties, dtype=float))[::-1]
    start = _start(F.shape[1], Z.shape[1])
    if y.size < MIN_ROWS_CV:
        best = float(penalties.max())
    else:
        # deterministic folds (every N_FOLDS-th row): the choice needs no random stream
        fold = np.arange(y.size) % N_FOLDS
        losses = np.zeros(penalties.size)
        for k in range(N_FOLDS):
            train, test = fold != k, fold == k
            theta = start
            for i, lam in enumerate(penalties):
                theta = _fit(F[train], Z[train], y[train], lam, theta)
                losses[i] += _log_loss(theta, F[test], Z[test], y[test])
        best = float(penalties[int(np.argmin(losses))])
    t, W, c = _unpack(_fit(F, Z, y, best, start), F.shape[1], Z.shape[1])
    coef = W / std
    return float(t), coef, c - coef @ mean, best
