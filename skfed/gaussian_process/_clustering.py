"""Client clustering from projection operators (pFedHGP paper sec. 3.8.2)."""

import numbers
import warnings

import numpy as np
from scipy.linalg import block_diag, cho_factor, cho_solve
from sklearn.cluster import SpectralClustering
from sklearn.utils.validation import check_is_fitted

from ..utils._validation import check_groups, check_positive_int, check_scale, validate_data
from ._covariance import kernel_args
from ._covariance import kernel_matrix

__all__ = ["client_dissimilarity", "cluster_clients"]

COMPONENTS = ("both", "deviation", "local")
DEVIATION_KERNELS = ("global", "deviation")
MULTIOUTPUT = ("outputs", "latent")


def _projection(X, latents, kind, noise, scale=1.0):
    """``Cov(v, y) Cov(y)^{-1} Cov(y, v)`` for one component observed at ``X``.

    ``y`` is the component's ``Q``-output process at the rows of ``X`` plus
    noise and ``v`` the same process at the inducing inputs ``Z`` (shared by
    the component's latents)::

        f = sum_r b_r h_r,  h_r ~ GP(0, scale * k_r),  y = f(X) + eps,  v = f(Z)

    so ``Cov(v, y) = sum_r (b_r b_r^T) kron k_r(Z, X)`` (times ``scale``) and
    ``Cov(y) = sum_r (b_r b_r^T) kron k_r(X, X) + noise I`` (output-major
    ordering). With one latent and ``b = [1]`` this is the paper's
    ``K(Z, X) (K(X, X) + sigma^2 I)^{-1} K(X, Z)``. Computed through a
    Cholesky factorization of ``Cov(y)`` (``O((n Q)^3)``).
    """
    n, Q = X.shape[0], latents[0][3].shape[0]
    Kyy = noise * np.eye(n * Q)
    Kvy = 0.0
    for Z, ls, var, b in latents:
        P = np.outer(b, b)
        Kyy += np.kron(P, kernel_matrix(*kernel_args(X, X), ls, scale * var, kind))
        Kvy = Kvy + np.kron(P, kernel_matrix(*kernel_args(X, Z), ls, scale * var, kind).T)
    A = Kvy @ cho_solve(cho_factor(Kyy, lower=True), Kvy.T)
    return 0.5 * (A + A.T)


def _check_X(model, X):
    """``X`` validated as the model's ``client_dissimilarity`` method does, and in range.

    2-D, finite, with the fitted number of features (the fitted feature names
    if ``X`` has names), and no overflowing sum of squares (which would give
    NaN dissimilarities).
    """
    with warnings.catch_warnings():
        # the method passes the array it validated itself (the names were checked there)
        warnings.filterwarnings("ignore", message="X does not have valid feature names",
                                category=UserWarning)
        X = validate_data(model, X, reset=False, dtype=np.float64)
    check_scale(X, "X")
    return X


def client_dissimilarity(model, X, groups, *, component="both", deviation_kernel="global",
                         multioutput="outputs"):
    """The ``T x T`` dissimilarity of the paper's sec. 3.8.2 for a fitted model.

    Client ``i`` is represented by projection operators built from its inputs
    ``X_i`` and the trained kernels only (no targets and no variational
    parameters enter, paper sec. 3.8.2)::

        A_delta_i = K_g(Z_g, X_i) (K_g(X_i, X_i) + sigma^2 I)^{-1} K_g(X_i, Z_g)
        A_loc_i   = K_i(Z_i, X_i) (K_i(X_i, X_i) + sigma^2 I)^{-1} K_i(X_i, Z_i)

    ``A_i = blockdiag(A_delta_i, A_loc_i)``, ``hat A_i = A_i / tr(A_i)`` and
    ``rho(i, j) = ||hat A_i - hat A_j||_F^2``. The deviation block uses the
    global kernel ``K_g`` itself, "since the client-specific offset does not
    possess an independent kernel" (paper); ``deviation_kernel="deviation"``
    uses the deviation's prior covariance ``phi K_g`` instead. Each client
    computes its ``hat A_i`` locally (``O(n_i^3)``); only these square
    matrices would be shared.

    What the operators can tell apart: with the same ``X_i`` for every
    client (shared timestamps) and one shared ``sigma^2``, ``A_delta_i`` is
    identical for all clients (derived here from the operators of the
    paper's Sec. 3.8.2); the signal comes from the local kernels
    (lengthscale, variance, ``Z_i``), the deviation block only weighting
    them through the trace normalization. The local blocks are
    comparable only if the clients' ``Z_i`` are aligned (all clients start
    from the same grid in the same order and have the same ``M_i``).

    **Multi-output (ILMM) fits** (not covered by the paper). Every latent
    ``r`` of a component has its own kernel and the client's loadings
    ``B_delta_i``, ``B_l_i`` carry its scale (the latent variances are
    fixed), so the loadings take the place of the scalar model's local
    variance:

    - ``multioutput="outputs"`` (default): the block of a component is the
      operator of its ``Q``-output process ``f = sum_r b_r h_r`` at the
      inducing inputs, ``v = f(Z)`` (``Q M`` or ``Q M_i`` values): ``Cov(v,
      y) Cov(y)^{-1} Cov(y, v)`` with ``y = f(X_i) + eps``, ``eps ~ N(0,
      sigma^2 I_Q)``, ``Cov(y) = sum_r (b_r b_r^T) kron K_r(X_i, X_i) +
      sigma^2 I`` and ``Cov(v, y) = sum_r (b_r b_r^T) kron K_r(Z, X_i)``. For
      ``Q = 1`` and ``b = 1`` it is the paper's operator; like the scalar
      local block (whose ``Cov(u, y) = s_i k(Z, X_i)``) it sees the client's
      scale, here the loadings, including which outputs they load, and it
      does not change when a loading column and its latent flip sign.
      Cost ``O((n_i Q)^3)``.
    - ``multioutput="latent"``: the block-diagonal of one scalar operator
      per latent with its own kernel (fixed variance); the loadings do not
      enter, so only the lengthscales and ``Z_i`` differ between clients.

    Parameters
    ----------
    model : PFedHGPRegressor
        Fitted with the deviation and/or local component.
    X : array-like of shape (n_samples, n_features)
        The inputs of the fitted clients (``X_i``: the paper uses each
        client's training inputs); finite, with the fitted number of features.
    groups : array-like of shape (n_samples,)
        Client label of each row (every label of ``model.clients_`` must
        have rows; other labels are ignored).
    component : {"both", "deviation", "local"}, default="both"
        ``"both"``: the paper's ``blockdiag(A_delta_i, A_loc_i)`` (only the
        block of the fitted component if the model has one of them).
        ``"deviation"`` or ``"local"``: that block alone.
    deviation_kernel : {"global", "deviation"}, default="global"
        Kernel of ``A_delta_i``: ``K_g`` (the paper) or ``phi K_g``.
    multioutput : {"outputs", "latent"}, default="outputs"
        Operator of a multi-output fit (see above); ignored for scalar fits.

    Returns
    -------
    rho : ndarray of shape (n_clients, n_clients)
        In the order of ``model.clients_``.
    """
    check_is_fitted(model)
    for name, value, allowed in (("component", component, COMPONENTS),
                                 ("deviation_kernel", deviation_kernel, DEVIATION_KERNELS),
                                 ("multioutput", multioutput, MULTIOUTPUT)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}.")
    X = _check_X(model, X)
    # the fitted kernels' input units (client_kernels)
    X = (X - model.x_mean_) / model.x_std_
    labels, index = check_groups(groups, X.shape[0])
    missing = set(model.clients_.tolist()) - set(labels.tolist())
    if missing and groups is None:
        raise ValueError(
            "groups is None (every row one client), but the model has the clients "
            f"{model.clients_.tolist()[:10]}: pass the client label of each row of X."
        )
    if missing:
        raise ValueError(f"groups has no rows for the fitted clients {sorted(missing)[:10]}.")
    wanted = ("deviation", "local") if component == "both" else (component,)
    ops = []
    for k, label in enumerate(model.clients_.tolist()):
        Xi = X[index == int(np.flatnonzero(labels == label)[0])]
        fk = model.client_kernels(label)
        blocks = []
        for name in wanted:
            if name not in fk:
                continue
            scale = fk["phi"] if name == "deviation" and deviation_kernel == "deviation" else 1.0
            latents = fk[name]
            if multioutput == "latent":
                blocks += [_projection(Xi, [(Z, ls, var, np.ones(1))], fk["kind"], fk["noise"],
                                       scale)
                           for Z, ls, var, _ in latents]
            else:
                blocks.append(_projection(Xi, latents, fk["kind"], fk["noise"], scale))
        if not blocks:
            raise ValueError(f"component={component!r} needs the fitted model to have "
                             f"{' or '.join(wanted)} component.")
        A = block_diag(*blocks)
        trace = np.trace(A)
        if not (np.isfinite(trace) and trace > 0):  # else 0/0: NaN dissimilarities
            raise ValueError(
                f"X of client {label!r} gives a zero projection operator: its rows are so far "
                "from the fitted inputs that every kernel value vanishes. Pass the client's "
                "inputs on the scale the model was fitted on."
            )
        ops.append((A / trace).ravel())
    ops = np.array(ops)
    rho = np.zeros((len(ops), len(ops)))
    for i in range(len(ops) - 1):  # explicit differences: no cancellation for near-equal operators
        rho[i, i + 1:] = rho[i + 1:, i] = np.sum((ops[i + 1:] - ops[i]) ** 2, axis=1)
    return rho


def cluster_clients(rho, n_clusters=3, *, bandwidth=None, random_state=None):
    """Spectral clustering of clients from a dissimilarity matrix.

    The affinity is ``exp(-rho / h)`` with ``h`` the median off-diagonal
    dissimilarity unless ``bandwidth`` is given (our choice; the paper,
    Sec. 3.8.2 and 5.2, gives no affinity and uses spectral clustering with
    3 clusters for its monitoring stations).

    Parameters
    ----------
    rho : array-like of shape (n_clients, n_clients)
        Symmetric non-negative dissimilarities (e.g. :func:`client_dissimilarity`).
    n_clusters : int, default=3
    bandwidth : float or None, default=None
        Finite and > 0 (None: the median off-diagonal dissimilarity).
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    labels : ndarray of shape (n_clients,)

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.gaussian_process import cluster_clients
    >>> rho = np.array([[0, .1, 5, 5], [.1, 0, 5, 5], [5, 5, 0, .1], [5, 5, .1, 0]])
    >>> labels = cluster_clients(rho, n_clusters=2, random_state=0)
    >>> bool(labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2])
    True
    """
    rho = np.asarray(rho, dtype=float)
    if (rho.ndim != 2 or rho.shape[0] != rho.shape[1] or not np.all(np.isfinite(rho))
            or np.any(rho < 0)):
        raise ValueError("rho must be a square, finite, non-negative dissimilarity matrix.")
    asym = np.abs(rho - rho.T)
    if asym.size and asym.max() > 1e-8 * rho.max():  # rounding differences are tolerated
        i, j = np.unravel_index(np.argmax(asym), asym.shape)
        raise ValueError(
            f"rho must be symmetric (a dissimilarity matrix), got rho[{i}, {j}] = "
            f"{rho[i, j]:.6g} but rho[{j}, {i}] = {rho[j, i]:.6g}."
        )
    k = check_positive_int(n_clusters, "n_clusters")
    if k > rho.shape[0]:
        raise ValueError(f"n_clusters={k} exceeds the number of clients {rho.shape[0]}.")
    if bandwidth is None:
        off = rho[~np.eye(len(rho), dtype=bool)]
        bandwidth = float(np.median(off)) if off.size and np.median(off) > 0 else 1.0
    elif (isinstance(bandwidth, (bool, np.bool_)) or not isinstance(bandwidth, numbers.Real)
          or not 0 < bandwidth < np.inf):  # inf: every affinity 1, arbitrary clusters
        raise ValueError(f"bandwidth must be a finite number > 0 or None, got {bandwidth!r}.")
    affinity = np.exp(-rho / bandwidth)
    return SpectralClustering(n_clusters=k, affinity="precomputed",
                              random_state=random_state).fit_predict(affinity)
