"""Fault-diagnosis simulators and client splitters of the DP-Fed DRO paper.

The paper's pump data come from a MATLAB/Simulink model that cannot run
here; :func:`make_pump_faults` is a documented *proxy* with the paper's class
counts, sizes and perturbations. :func:`make_correlated_faults` is a proxy of
its appendix B.4 study (the paper gives no means or covariances).
"""

import numpy as np
from sklearn.utils import check_random_state

from ..utils._validation import check_fraction, check_positive_int
from ._checks import check_counts, check_labels, check_number

__all__ = [
    "dirichlet_client_split",
    "flip_labels",
    "make_correlated_faults",
    "make_pump_faults",
]

PUMP_CLASSES = ("healthy", "cylinder_leak", "blocked_inlet", "bearing_friction")
FAULT_CLASSES = ("normal", "fault_a", "fault_b", "fault_c")
OVERLAP_SHIFT = {"strong": 1.0, "moderate": 2.0, "low": 3.0}


def flip_labels(y, fraction, *, random_state=None):
    """Replace a ``fraction`` of the labels by a different class, uniformly.

    Exactly ``round(fraction * n)`` rows (drawn without replacement) get a
    label drawn uniformly from the *other* classes present in ``y``.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels (at least two classes; no NaN or None).
    fraction : float in [0, 1)
        Share of rows to flip.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    y_noisy : ndarray of shape (n_samples,)
    flipped : ndarray of shape (n_samples,), dtype=bool
        Which rows were flipped.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.datasets import flip_labels
    >>> y_noisy, flipped = flip_labels(np.repeat([0, 1, 2], 10), 0.1, random_state=0)
    >>> int(flipped.sum()), int((y_noisy != np.repeat([0, 1, 2], 10)).sum())
    (3, 3)
    """
    y = check_labels(y)
    fraction = check_fraction(fraction, "fraction", allow_zero=True, allow_one=False)
    rng = check_random_state(random_state)
    classes = np.unique(y)
    if classes.size < 2:
        raise ValueError("y needs at least 2 classes to flip labels.")
    n_flip = int(round(fraction * y.size))
    rows = rng.choice(y.size, size=n_flip, replace=False)
    out = y.copy()
    for i in rows:
        others = classes[classes != y[i]]
        out[i] = others[rng.randint(others.size)]
    flipped = np.zeros(y.size, dtype=bool)
    flipped[rows] = True
    return out, flipped


def dirichlet_client_split(y, n_clients, *, concentration=0.5, min_per_class=1,
                           random_state=None):
    """Class-imbalanced split: each class spread over clients by Dirichlet proportions.

    For every class, proportions ``p ~ Dirichlet(concentration * 1)`` over the
    clients decide how many of its rows each client gets, after giving every
    client ``min_per_class`` rows of it, so every client keeps every class (the
    paper's "controlled class-imbalanced split"; its proportions are not
    given).

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels (no NaN or None).
    n_clients : int
        Number of clients.
    concentration : float, default=0.5
        Dirichlet concentration, finite and > 0 (smaller: more imbalanced).
    min_per_class : int, default=1
        Rows of every class each client is guaranteed.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    groups : ndarray of shape (n_samples,), dtype=int
        Client index of every row.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.datasets import dirichlet_client_split
    >>> y = np.repeat([0, 1, 2], 20)
    >>> groups = dirichlet_client_split(y, 4, random_state=0)
    >>> all(len(np.unique(y[groups == g])) == 3 for g in range(4))
    True
    """
    y = check_labels(y)
    n_clients = check_positive_int(n_clients, "n_clients")
    check_number(concentration, "concentration", minimum=0, strict=True)
    min_per_class = check_positive_int(min_per_class, "min_per_class", minimum=0)
    rng = check_random_state(random_state)
    groups = np.empty(y.size, dtype=np.int64)
    for cls in np.unique(y):
        rows = rng.permutation(np.flatnonzero(y == cls))
        base = n_clients * min_per_class
        if rows.size < base:
            raise ValueError(
                f"class {cls!r} has {rows.size} rows, fewer than n_clients * min_per_class "
                f"= {base}."
            )
        p = rng.dirichlet(np.full(n_clients, float(concentration)))
        extra = rng.multinomial(rows.size - base, p)
        counts = extra + min_per_class
        groups[rows] = np.repeat(np.arange(n_clients), counts)
    return groups


def make_pump_faults(*, n_per_class=(750, 418, 418, 414), n_features=13, n_test=400,
                     n_clients=4, dominant_fraction=0.7, test_noise=0.1, train_noise=None,
                     flip_fraction=0.15, test_offset=0.5, n_offset_features=5,
                     random_state=None):
    """Proxy of the paper's simulated pump fault data (Sec. 7.1, App. B.2.1).

    The paper simulates a Simulink pump (healthy, cylinder leak, blocked inlet,
    bearing friction; 2,000 runs; 13 features) that cannot be run here. This
    generator keeps its class counts, sizes and perturbations and fills in
    every choice the paper leaves open:

    * features: class-conditional Gaussians. Each fault moves the mean along
      its own random unit direction in proportion to its sampled severity
      level (cylinder leak: levels 5-6; blocked inlet: 3-4; bearing friction:
      7-9, each run drawing one level), times 0.12 per level, so the faults
      differ in difficulty as in the paper; the shared within-class spread is
      a random correlated covariance with unit average variance.
    * split: ``n_test`` rows drawn at random for the test set, the rest
      spread over ``n_clients`` equally sized clients, each with
      ``dominant_fraction`` of its rows from one dominant class (client ``g``
      dominated by class ``g mod 4``; rows drawn without replacement as long
      as the class lasts).
    * perturbations (before any scaling): Gaussian feature noise of standard
      deviation ``test_noise`` on test rows and ``train_noise`` (default
      ``2 * test_noise``) on training rows; ``flip_fraction`` of the training
      labels flipped uniformly to another class; ``test_offset`` added to
      ``n_offset_features`` randomly chosen test features (deployment shift).

    Parameters
    ----------
    n_per_class : tuple of 4 int, default=(750, 418, 418, 414)
        Runs per class (the paper's counts), each >= 1.
    n_features : int, default=13
        Number of features.
    n_test : int, default=400
        Test rows: at least 1, fewer than ``sum(n_per_class) - n_clients``.
    n_clients : int, default=4
        Clients.
    dominant_fraction : float, default=0.7
        Share of each client's rows from its dominant class.
    test_noise : float, default=0.1
        Noise standard deviation on test features (finite, >= 0).
    train_noise : float or None, default=None
        On training features (``2 * test_noise`` if None; finite, >= 0).
    flip_fraction : float, default=0.15
        Training labels flipped.
    test_offset : float, default=0.5
        Constant (finite) added to the shifted test features.
    n_offset_features : int, default=5
        Number of shifted test features (>= 0; at most ``n_features`` are shifted).
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    X_train : ndarray of shape (n_train, n_features)
    y_train : ndarray of shape (n_train,)
        Noisy training labels in ``0..3`` (see ``PUMP_CLASSES``).
    groups : ndarray of shape (n_train,)
        Client of every training row.
    X_test : ndarray of shape (n_test, n_features)
    y_test : ndarray of shape (n_test,)
        Clean test labels.

    Examples
    --------
    >>> from skfed.datasets import make_pump_faults
    >>> X, y, groups, X_test, y_test = make_pump_faults(random_state=0)
    >>> X.shape, X_test.shape, len(set(groups.tolist()))
    ((1600, 13), (400, 13), 4)
    """
    rng = check_random_state(random_state)
    check_counts(n_per_class, "n_per_class", length=4)
    n_per_class = np.asarray(n_per_class, dtype=int)
    n_features = check_positive_int(n_features, "n_features")
    n_clients = check_positive_int(n_clients, "n_clients")
    check_number(test_noise, "test_noise", minimum=0)
    if train_noise is not None:
        check_number(train_noise, "train_noise", minimum=0)
    train_noise = 2.0 * test_noise if train_noise is None else train_noise
    check_fraction(flip_fraction, "flip_fraction", allow_zero=True, allow_one=False)
    check_fraction(dominant_fraction, "dominant_fraction")
    check_number(test_offset, "test_offset")
    check_positive_int(n_offset_features, "n_offset_features", minimum=0)
    n_total = int(n_per_class.sum())
    if n_clients > n_total - 2:  # else no n_test leaves more training rows than clients
        raise ValueError(
            f"n_clients must be at most sum(n_per_class) - 2 = {n_total - 2} (every client "
            f"needs training rows and the test set at least one row), got {n_clients}."
        )
    check_positive_int(n_test, "n_test")
    if not 0 < n_test < n_total - n_clients:
        raise ValueError(f"n_test must be in (0, {n_total - n_clients}), got {n_test!r}.")
    levels = {1: (5, 6), 2: (3, 4), 3: (7, 8, 9)}
    directions = rng.standard_normal((4, n_features))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    A = rng.standard_normal((n_features, n_features)) / np.sqrt(n_features)
    y = np.repeat(np.arange(4), n_per_class)
    X = rng.standard_normal((n_total, n_features)) @ A.T
    for k in (1, 2, 3):
        rows = np.flatnonzero(y == k)
        severity = rng.choice(levels[k], size=rows.size)
        X[rows] += 0.12 * severity[:, None] * directions[k]
    order = rng.permutation(n_total)
    test_rows, train_rows = order[:n_test], order[n_test:]
    X_test, y_test = X[test_rows], y[test_rows]
    X_train, y_train = X[train_rows], y[train_rows]
    X_test = X_test + test_noise * rng.standard_normal(X_test.shape)
    shifted = rng.choice(n_features, size=min(n_offset_features, n_features), replace=False)
    X_test[:, shifted] += test_offset
    X_train = X_train + train_noise * rng.standard_normal(X_train.shape)
    groups = _dominant_split(y_train, n_clients, dominant_fraction, rng)
    y_train, _ = flip_labels(y_train, flip_fraction, random_state=rng)
    return X_train, y_train, groups, X_test, y_test


def _dominant_split(y, n_clients, dominant_fraction, rng):
    """Equal-size clients, each with ``dominant_fraction`` of rows from one class."""
    n = y.size
    size = n // n_clients
    pools = {k: list(rng.permutation(np.flatnonzero(y == k))) for k in np.unique(y)}
    classes = sorted(pools)
    groups = np.full(n, -1, dtype=np.int64)
    for g in range(n_clients):
        dom = classes[g % len(classes)]
        take = min(int(round(dominant_fraction * size)), len(pools[dom]))
        for _ in range(take):
            groups[pools[dom].pop()] = g
    rest = rng.permutation(np.flatnonzero(groups < 0))
    counts = np.bincount(groups[groups >= 0], minlength=n_clients)
    pos = 0
    for g in range(n_clients):
        need = max(0, size - counts[g]) if g < n_clients - 1 else rest.size - pos
        groups[rest[pos:pos + need]] = g
        pos += need
    return groups


def make_correlated_faults(overlap="moderate", *, n_train=(500, 120, 120, 120), n_test=216,
                           n_clients=4, label_noise=0.1, random_state=None):
    """Proxy of the correlated-fault study of the paper's appendix B.4.

    Four classes (normal, fault A, fault B, fault C) in 8 features, each a
    Gaussian with a class mean and one shared covariance: unit variances,
    correlation 0.7 within features {0, 1, 2} and within {3, 4, 5}, 0.1
    elsewhere. Means: normal at 0; fault A at 3 on features 0-2; fault B at
    fault A's mean plus ``d`` on features 3-5 with ``d`` = 1 / 2 / 3 for
    strong / moderate / low overlap; fault C at 4 on features 6-7 (a distinct
    mode). The paper gives none of these numbers; only the sizes
    (860 imbalanced training rows, normal over-represented; 216 balanced test
    rows), the 10% training label noise and G = 4 come from it. Training rows
    are split over the clients uniformly at random.

    Parameters
    ----------
    overlap : {"strong", "moderate", "low"}, default="moderate"
        Overlap of fault A and fault B.
    n_train : tuple of 4 int, default=(500, 120, 120, 120)
        Training rows per class, each >= 1.
    n_test : int, default=216
        Test rows (balanced; a positive multiple of 4).
    n_clients : int, default=4
        Clients, at most ``sum(n_train)``.
    label_noise : float in [0, 1), default=0.1
        Share of training labels flipped.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    X_train, y_train, groups, X_test, y_test : ndarray
        As :func:`make_pump_faults` (labels in ``0..3``, see ``FAULT_CLASSES``).

    Examples
    --------
    >>> from skfed.datasets import make_correlated_faults
    >>> X, y, groups, X_test, y_test = make_correlated_faults("low", random_state=0)
    >>> X.shape, X_test.shape
    ((860, 8), (216, 8))
    """
    if not isinstance(overlap, str) or overlap not in OVERLAP_SHIFT:
        raise ValueError(f"overlap must be one of {tuple(OVERLAP_SHIFT)}, got {overlap!r}.")
    check_positive_int(n_test, "n_test", minimum=4)
    if n_test % 4:
        raise ValueError(f"n_test must be a multiple of 4 (balanced classes), got {n_test!r}.")
    n_clients = check_positive_int(n_clients, "n_clients")
    check_counts(n_train, "n_train", length=4)
    n_total = int(np.sum(n_train))
    if n_clients > n_total:
        raise ValueError(
            f"n_clients must be at most the {n_total} training rows (sum of n_train), so that "
            f"every client gets a row, got {n_clients}."
        )
    check_fraction(label_noise, "label_noise", allow_zero=True, allow_one=False)
    rng = check_random_state(random_state)
    p = 8
    cov = np.full((p, p), 0.1)
    for block in ((0, 1, 2), (3, 4, 5)):
        cov[np.ix_(block, block)] = 0.7
    np.fill_diagonal(cov, 1.0)
    means = np.zeros((4, p))
    means[1, :3] = 3.0
    means[2] = means[1]
    means[2, 3:6] += OVERLAP_SHIFT[overlap]
    means[3, 6:] = 4.0
    chol = np.linalg.cholesky(cov)

    def draw(counts):
        y = np.repeat(np.arange(4), counts)
        return means[y] + rng.standard_normal((y.size, p)) @ chol.T, y

    X_train, y_train = draw(np.asarray(n_train, dtype=int))
    X_test, y_test = draw(np.full(4, n_test // 4))
    perm = rng.permutation(y_train.size)
    X_train, y_train = X_train[perm], y_train[perm]
    y_train, _ = flip_labels(y_train, label_noise, random_state=rng)
    groups = rng.permutation(np.arange(y_train.size) % n_clients)
    return X_train, y_train, groups, X_test, y_test
