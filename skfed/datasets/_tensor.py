"""Federated tensor regression problems: shared low-Tucker-rank part + sparse deviations."""

import numpy as np
from sklearn.utils import Bunch, check_random_state

from ..utils._validation import check_positive_int
from ._checks import check_number, is_integral
from ._regression import _client_sizes

__all__ = ["make_tensor_regression", "make_tensor_image_regression"]


def _as_shape(shape, name, allow_none=False):
    if shape is None and allow_none:
        return ()
    try:
        entries = np.atleast_1d(shape)
        ok = entries.ndim == 1 and is_integral(entries)  # (2.5, 3) is not truncated to (2, 3)
        out = tuple(int(s) for s in entries) if ok else ()
    except (TypeError, ValueError):
        out = ()
    if not out or min(out) < 1:
        raise ValueError(f"{name} must be a tuple of positive ints, got {shape!r}.")
    return out


def _check_rank(rank, shape):
    try:
        entries = np.atleast_1d(rank)
        ok = entries.ndim == 1 and is_integral(entries)
    except (TypeError, ValueError):
        ok = False
    if not ok:  # (1.5, 1) is not truncated to (1, 1)
        raise ValueError(f"rank must be a tuple of positive ints, got {rank!r}.")
    rank = tuple(int(r) for r in entries)
    if len(rank) != len(shape):
        raise ValueError(
            f"rank must have one entry per mode of the coefficient shape {shape}, got {rank}."
        )
    for s, (r, n) in enumerate(zip(rank, shape)):
        others = int(np.prod([rank[j] for j in range(len(rank)) if j != s]))
        if not 1 <= r <= n or r > others:
            raise ValueError(f"rank {rank} is invalid or infeasible for shape {shape} (rank).")
    return rank


def _ratio(value, name):
    check_number(value, name, minimum=0)
    return float(value)


def _draw(sizes, coef, noise, rng, response_shape):
    """Rows ``X ~ N(0, I)`` and ``y = <A_k, X> + N(0, noise^2)`` client by client."""
    p = int(np.prod(coef.shape[1 + len(response_shape):]))
    q = int(np.prod(response_shape)) if response_shape else 1
    Xs, ys, gs = [], [], []
    for k, n_k in enumerate(sizes):
        X = rng.standard_normal((n_k, p))
        Y = X @ coef[k].reshape(q, p).T + noise * rng.standard_normal((n_k, q))
        Xs.append(X)
        ys.append(Y)
        gs.append(np.full(n_k, k))
    X, Y, groups = np.vstack(Xs), np.vstack(ys), np.concatenate(gs)
    return X, (Y[:, 0] if not response_shape else Y), groups


def make_tensor_regression(
    n_clients=5,
    n_samples=250,
    tensor_shape=(10, 5),
    output_shape=(5, 5),
    *,
    rank=(3, 3, 3, 3),
    n_nonzero=50,
    deviation_ratio=0.5,
    shared_norm=1.0,
    noise=0.1,
    return_truth=False,
    coef_random_state=None,
    random_state=None,
):
    """The simulation design of personalized federated tensor regression.

    Client ``k`` holds rows ``Y_i = <A_0 + B_k, X_i> + E_i`` (Chen, Wei and
    Zhu; design of the authors' simulation study, reconstructed from the
    authors' code since the paper's Section 6 is not in our copy):

    * ``A_0`` (shape ``output_shape + tensor_shape``, response modes first)
      is ``core x_1 U_1 ... x_N U_N`` with a Gaussian core rescaled to
      Frobenius norm ``shared_norm`` and factors ``U_s`` the Q of the QR
      decomposition of Gaussian matrices: Tucker rank ``rank``;
    * ``B_k`` has ``n_nonzero`` Gaussian entries at uniformly random
      positions, rescaled to ``||B_k||_F = deviation_ratio ||A_0||_F``;
    * ``X_i`` has i.i.d. ``N(0, 1)`` entries, ``E_i`` i.i.d. ``N(0, noise^2)``.

    Parameters
    ----------
    n_clients : int, default=5
        Number of clients ``K``.
    n_samples : int or array-like of shape (n_clients,), default=250
        Rows per client.
    tensor_shape : tuple of int, default=(10, 5)
        Shape of a covariate tensor.
    output_shape : tuple of int or None, default=(5, 5)
        Shape of a response tensor; ``None`` gives a scalar response.
    rank : tuple of int, default=(3, 3, 3, 3)
        Tucker rank of ``A_0`` (one entry per coefficient mode).
    n_nonzero : int, default=50
        Nonzero entries of each ``B_k``.
    deviation_ratio : float, default=0.5
        ``||B_k||_F / ||A_0||_F``.
    shared_norm : float, default=1.0
        ``||A_0||_F``.
    noise : float, default=0.1
        Standard deviation of the noise entries.
    return_truth : bool, default=False
        Also return the true coefficients.
    coef_random_state : int, RandomState instance or None, default=None
        Seed of the true coefficients (``None``: use ``random_state``); fix
        it to keep one truth across replications, as in the paper.
    random_state : int, RandomState instance or None, default=None
        Seed of the rows.

    Returns
    -------
    X : ndarray of shape (n_total, prod(tensor_shape))
        Covariate tensors flattened in C order, grouped by client.
    y : ndarray of shape (n_total,) or (n_total, prod(output_shape))
        Responses (flattened in C order).
    groups : ndarray of shape (n_total,)
        Client index of each row.
    truth : Bunch
        If ``return_truth``: ``shared_coef`` (``A_0``), ``deviations``
        (``B_k``, shape ``(n_clients, *coef_shape)``), ``coef`` (``A_k``),
        ``core`` and ``factors``.

    Examples
    --------
    >>> from skfed.datasets import make_tensor_regression
    >>> X, y, groups = make_tensor_regression(n_samples=20, random_state=0)
    >>> X.shape, y.shape
    ((100, 50), (100, 25))
    """
    n_clients = check_positive_int(n_clients, "n_clients")
    sizes = _client_sizes(n_samples, n_clients)
    tensor_shape = _as_shape(tensor_shape, "tensor_shape")
    response_shape = _as_shape(output_shape, "output_shape", allow_none=True)
    shape = response_shape + tensor_shape
    rank = _check_rank(rank, shape)
    n_nonzero = check_positive_int(n_nonzero, "n_nonzero", minimum=0)
    if n_nonzero > int(np.prod(shape)):
        raise ValueError(f"n_nonzero={n_nonzero} exceeds the {int(np.prod(shape))} coefficients.")
    deviation_ratio = _ratio(deviation_ratio, "deviation_ratio")
    shared_norm = _ratio(shared_norm, "shared_norm")
    noise = _ratio(noise, "noise")
    rng = check_random_state(random_state)
    coef_rng = rng if coef_random_state is None else check_random_state(coef_random_state)

    core = coef_rng.standard_normal(rank)
    core *= shared_norm / np.linalg.norm(core)
    factors = [np.linalg.qr(coef_rng.standard_normal((n, r)))[0] for n, r in zip(shape, rank)]
    A0 = core
    for s, U in enumerate(factors):
        A0 = np.moveaxis(np.tensordot(U, A0, axes=(1, s)), 0, s)
    deviations = np.zeros((n_clients, *shape))
    for k in range(n_clients):
        flat = np.zeros(int(np.prod(shape)))
        if n_nonzero:
            idx = coef_rng.choice(flat.size, size=n_nonzero, replace=False)
            vals = coef_rng.standard_normal(n_nonzero)
            flat[idx] = vals * deviation_ratio * np.linalg.norm(A0) / np.linalg.norm(vals)
        deviations[k] = flat.reshape(shape)
    coef = A0[None] + deviations
    X, y, groups = _draw(sizes, coef, noise, rng, response_shape)
    if not return_truth:
        return X, y, groups
    truth = Bunch(shared_coef=A0, deviations=deviations, coef=coef, core=core, factors=factors)
    return X, y, groups, truth


def make_tensor_image_regression(
    n_clients=3,
    n_samples=(80, 220, 255),
    image_shape=(32, 32),
    *,
    rank=(2, 2),
    patch_size=4,
    deviation_ratio=0.5,
    noise=0.1,
    return_truth=False,
    random_state=None,
):
    """A scalar-on-image federated problem resembling a multi-site MRI study.

    The shared coefficient image is a smooth rank-``rank`` pattern (factors
    from Gaussian bumps, orthonormalized; Frobenius norm 1); client ``k``
    deviates on one ``patch_size x patch_size`` square at a client-specific
    place (``||B_k||_F = deviation_ratio``). Pixels are i.i.d. ``N(0, 1)``,
    the response is scalar with ``N(0, noise^2)`` noise. Default sizes follow
    the three sites of the paper's ADHD-200 analysis (80, 220 and 255
    subjects).

    Parameters
    ----------
    n_clients : int, default=3
        Number of clients.
    n_samples : int or array-like of shape (n_clients,), default=(80, 220, 255)
        Rows per client.
    image_shape : tuple of int, default=(32, 32)
        Shape of the covariate images.
    rank : tuple of int, default=(2, 2)
        Tucker rank of the shared image.
    patch_size : int, default=4
        Side of each client's deviation patch.
    deviation_ratio : float, default=0.5
        ``||B_k||_F / ||A_0||_F``.
    noise : float, default=0.1
        Noise standard deviation.
    return_truth : bool, default=False
        Also return the true coefficient images.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    X : ndarray of shape (n_total, prod(image_shape))
    y : ndarray of shape (n_total,)
    groups : ndarray of shape (n_total,)
    truth : Bunch
        If ``return_truth``: ``shared_coef``, ``deviations``, ``coef``.

    Examples
    --------
    >>> from skfed.datasets import make_tensor_image_regression
    >>> X, y, groups = make_tensor_image_regression(n_samples=10, image_shape=(8, 8),
    ...                                             patch_size=2, random_state=0)
    >>> X.shape
    (30, 64)
    """
    n_clients = check_positive_int(n_clients, "n_clients")
    sizes = _client_sizes(n_samples, n_clients)
    shape = _as_shape(image_shape, "image_shape")
    rank = _check_rank(rank, shape)
    patch_size = check_positive_int(patch_size, "patch_size")
    if patch_size > min(shape):
        raise ValueError(f"patch_size={patch_size} exceeds the image shape {shape}.")
    deviation_ratio = _ratio(deviation_ratio, "deviation_ratio")
    noise = _ratio(noise, "noise")
    rng = check_random_state(random_state)

    factors = []
    for n, r in zip(shape, rank):
        grid = np.linspace(0.0, 1.0, n)
        centers = (np.arange(r) + 1.0) / (r + 1.0) + rng.uniform(-0.1, 0.1, size=r)
        bumps = np.exp(-0.5 * ((grid[:, None] - centers[None]) / 0.12) ** 2)
        factors.append(np.linalg.qr(bumps)[0] * np.sign(np.linalg.qr(bumps)[0].sum(0)))
    core = np.diag(np.linspace(1.0, 0.6, max(rank)))[: rank[0], : rank[1]] if len(shape) == 2 \
        else rng.standard_normal(rank)
    core = core / np.linalg.norm(core)
    A0 = core
    for s, U in enumerate(factors):
        A0 = np.moveaxis(np.tensordot(U, A0, axes=(1, s)), 0, s)
    deviations = np.zeros((n_clients, *shape))
    for k in range(n_clients):
        corner = [rng.randint(0, n - patch_size + 1) for n in shape]
        sl = tuple(slice(c, c + patch_size) for c in corner)
        patch = np.zeros(shape)
        patch[sl] = rng.choice([-1.0, 1.0])
        deviations[k] = patch * deviation_ratio * np.linalg.norm(A0) / np.linalg.norm(patch)
    coef = A0[None] + deviations
    X, y, groups = _draw(sizes, coef, noise, rng, ())
    if not return_truth:
        return X, y, groups
    return X, y, groups, Bunch(shared_coef=A0, deviations=deviations, coef=coef)
