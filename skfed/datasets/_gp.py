"""Generators for the pFedHGP studies: hierarchical GPs, press tonnage, monitoring.

The paper's press-tonnage and Beijing monitoring data sets are not shipped (the
tonnage data are not public); the two generators below are synthetic
stand-ins with the same structure, for the classification and clustering
demos.
"""

import numpy as np
from sklearn.utils import Bunch, check_random_state

from ..utils._validation import check_fraction, check_positive_int
from ._checks import check_counts, check_number, check_numbers

__all__ = ["make_hierarchical_gp", "make_press_tonnage", "make_monitoring_stations"]

SCENARIOS = ("A", "B", "C", "D")


def _rbf(x, ls, scale2):
    d = x[:, None] - x[None, :]
    return scale2 * np.exp(-0.5 * (d / ls) ** 2)


def _periodic(x, period, ls, scale2):
    d = np.abs(x[:, None] - x[None, :])
    return scale2 * np.exp(-2.0 * np.sin(np.pi * d / period) ** 2 / ls**2)


def _draw(rng, K, size=1, return_jitter=False):
    """Draws from N(0, K) (jittered Cholesky), shape (len(K), size).

    With ``return_jitter`` also the jitter the draws were made with: they are
    exact draws from ``N(0, K + jitter I)``.
    """
    jit = 1e-8 * max(1.0, float(np.mean(np.diag(K))))
    for _ in range(6):
        try:
            L = np.linalg.cholesky(K + jit * np.eye(len(K)))
            break
        except np.linalg.LinAlgError:
            jit *= 10
    draws = L @ rng.standard_normal((len(K), size))
    return (draws, jit) if return_jitter else draws


def _check_domain(domain):
    """Refuse a ``domain`` that is not two finite numbers ``low < high``."""
    try:
        lo, hi = domain
        check_number(lo, "domain")
        check_number(hi, "domain")
        ok = lo < hi
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"domain must be two finite numbers (low, high) with low < high, "
                         f"got {domain!r}.")


def make_hierarchical_gp(
    n_clients=6,
    n_outputs=4,
    *,
    n_train=50,
    n_test=150,
    scenario="A",
    noise=0.05,
    phi=1.2,
    global_lengthscales=(1.8, 2.5),
    global_scales=(1.0, 0.7),
    local_lengthscales=(0.25, 0.45),
    local_scales=(1.0, 0.8),
    domain=(0.0, 10.0),
    random_state=None,
    return_truth=False,
):
    """Clients whose functions are global + deviation + local GPs (pFedHGP sec. 4.1).

    Each component has ``R = len(global_lengthscales)`` independent latent GP
    draws mixed into ``n_outputs`` channels by loadings with i.i.d. N(0, 1)
    entries: ``B_g`` shared, ``B_delta_i`` and ``B_l_i`` per client (ILMM, paper
    eqs. 34-37). Global latents use ``tau_g^2 RBF(l_g)``, deviations
    ``phi * tau_g^2 RBF(l_g)`` independently per client, local latents
    ``tau_l^2 RBF(l_l)``. Global draws are joint over every client's training
    inputs and the test grid; client draws over that client's inputs and the
    grid. With ``n_outputs=None`` the output is scalar: one latent per
    component (the first entry of each tuple) and no loadings.

    Scenarios (paper sec. 4.3): ``"A"`` the matched hierarchy; ``"B"`` a
    deviation kernel ``0.65 k_RBF + 0.35 k_per`` (period 3, periodic
    lengthscale 0.8; the same total variance ``phi tau_g^2``); ``"C"`` a
    non-additive term ``gamma_i f_g * f_delta`` with ``gamma_i ~ U(0.35,
    0.60)``; ``"D"`` correlated components ``f_l = 0.5 f_delta + sqrt(0.75)
    f_l_tilde``.

    Parameters
    ----------
    n_clients : int, default=6
    n_outputs : int or None, default=4
    n_train : int, default=50
        Training inputs per client, i.i.d. uniform on ``domain``.
    n_test : int, default=150
        Test inputs: an even grid on ``domain``, the same for every client.
    scenario : {"A", "B", "C", "D"}, default="A"
    noise : float, default=0.05
        Noise standard deviation.
    phi : float, default=1.2
        Deviation variance scale.
    global_lengthscales, global_scales, local_lengthscales, local_scales : tuple of float
        Per-latent lengthscales (finite, > 0) and standard deviations (``tau``;
        finite, >= 0).
    domain : tuple of float, default=(0, 10)
        ``(low, high)``, finite with ``low < high``.
    random_state : int, RandomState instance or None, default=None
    return_truth : bool, default=False
        Also return the draws behind the data (for oracle predictors and
        simulation studies); the data are the same either way.

    Returns
    -------
    data : Bunch
        ``X_train`` (n_clients * n_train, 1), ``y_train`` (…, n_outputs) or
        (…,), ``groups_train``; ``X_test``, ``y_test`` (noisy), ``y_test_clean``,
        ``groups_test`` (the grid repeated for each client); ``components_test``
        (dict of the clean global, deviation and local parts on the test rows).
        With ``return_truth``, ``truth``: a Bunch of ``x_train`` (n_clients,
        n_train) and ``x_test``; the latent draws ``h_g`` (n_clients * n_train
        + n_test, R) on every client's training inputs then the grid, ``h_d``
        and ``h_l`` (n_clients, n_train + n_test, R) on each client's inputs
        then the grid; the loadings ``B_g`` (Q, R), ``B_d`` and ``B_l``
        (n_clients, Q, R) (ones for scalar output); the jitter each latent was
        drawn with, ``jit_g`` (R,), ``jit_d`` and ``jit_l`` (n_clients, R)
        (each draw is exact from its kernel matrix plus that jitter times the
        identity); ``gamma`` (n_clients,) (scenario C, else zeros). The clean
        targets are ``h_g B_g^T + h_d B_d^T + h_l B_l^T`` on each client's rows,
        with the scenario's changes.

    Examples
    --------
    >>> from skfed.datasets import make_hierarchical_gp
    >>> data = make_hierarchical_gp(n_clients=3, n_train=20, n_test=30, random_state=0)
    >>> data.X_train.shape, data.y_train.shape, data.y_test.shape
    ((60, 1), (60, 4), (90, 4))
    """
    T = check_positive_int(n_clients, "n_clients")
    n = check_positive_int(n_train, "n_train")
    nt = check_positive_int(n_test, "n_test")
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}.")
    scalar = n_outputs is None
    Q = 1 if scalar else check_positive_int(n_outputs, "n_outputs")
    for name, val in (("noise", noise), ("phi", phi)):
        check_number(val, name, minimum=0)
    for name, val in (("global_lengthscales", global_lengthscales),
                      ("global_scales", global_scales),
                      ("local_lengthscales", local_lengthscales),
                      ("local_scales", local_scales)):
        # lengthscales divide distances (0 or NaN gives NaN data); scales are standard
        # deviations (0 switches a component off)
        check_numbers(val, name, strict=name.endswith("lengthscales"), first_only=scalar)
    ls_g, tau_g = np.atleast_1d(global_lengthscales), np.atleast_1d(global_scales)
    ls_l, tau_l = np.atleast_1d(local_lengthscales), np.atleast_1d(local_scales)
    if scalar:
        ls_g, tau_g, ls_l, tau_l = ls_g[:1], tau_g[:1], ls_l[:1], tau_l[:1]
    R = len(ls_g)
    if not (len(tau_g) == R and len(ls_l) == R and len(tau_l) == R):
        raise ValueError(
            "global/local lengthscales and scales must have the same length (latents)."
        )
    _check_domain(domain)
    rng = check_random_state(random_state)
    lo, hi = domain
    x_test = np.linspace(lo, hi, nt)
    X = [rng.uniform(lo, hi, n) for _ in range(T)]
    x_all = np.concatenate(X + [x_test])
    QR = (1 if scalar else Q, R)
    truth = Bunch(x_train=np.array(X), x_test=x_test, jit_g=np.empty(R),
                  h_d=np.empty((T, n + nt, R)), h_l=np.empty((T, n + nt, R)),
                  B_d=np.empty((T,) + QR), B_l=np.empty((T,) + QR),
                  jit_d=np.empty((T, R)), jit_l=np.empty((T, R)), gamma=np.zeros(T))
    # global latents, jointly over all clients and the grid
    h_g = np.empty((T * n + nt, R))
    for r in range(R):
        draw, truth.jit_g[r] = _draw(rng, _rbf(x_all, ls_g[r], tau_g[r] ** 2), return_jitter=True)
        h_g[:, r] = draw[:, 0]

    def loadings():
        return np.ones((1, R)) if scalar else rng.standard_normal((Q, R))

    B_g = loadings()
    f_g_all = h_g @ B_g.T
    Xtr, ytr, gtr, yte, yte_clean, gte = [], [], [], [], [], []
    parts = {"global": [], "deviation": [], "local": []}
    for i in range(T):
        xi = np.concatenate([X[i], x_test])
        idx = np.concatenate([np.arange(i * n, (i + 1) * n), T * n + np.arange(nt)])
        h_d, h_l = truth.h_d[i], truth.h_l[i]
        for r in range(R):
            Kd = _rbf(xi, ls_g[r], phi * tau_g[r] ** 2)
            if scenario == "B":
                Kd = 0.65 * Kd + 0.35 * _periodic(xi, 3.0, 0.8, phi * tau_g[r] ** 2)
            draw, truth.jit_d[i, r] = _draw(rng, Kd, return_jitter=True)
            h_d[:, r] = draw[:, 0]
            draw, truth.jit_l[i, r] = _draw(rng, _rbf(xi, ls_l[r], tau_l[r] ** 2),
                                            return_jitter=True)
            h_l[:, r] = draw[:, 0]
        truth.B_d[i] = loadings()
        truth.B_l[i] = loadings()
        f_g = f_g_all[idx]
        f_d = h_d @ truth.B_d[i].T
        f_l = h_l @ truth.B_l[i].T
        if scenario == "D":
            f_l = 0.5 * f_d + np.sqrt(1 - 0.25) * f_l
        clean = f_g + f_d + f_l
        if scenario == "C":
            truth.gamma[i] = rng.uniform(0.35, 0.60)
            clean = clean + truth.gamma[i] * f_g * f_d
        y = clean + noise * rng.standard_normal(clean.shape)
        Xtr.append(X[i][:, None])
        ytr.append(y[:n])
        gtr.append(np.full(n, i))
        yte.append(y[n:])
        yte_clean.append(clean[n:])
        gte.append(np.full(nt, i))
        for k, v in (("global", f_g), ("deviation", f_d), ("local", f_l)):
            parts[k].append(v[n:])

    def out(a):
        a = np.concatenate(a)
        return a[:, 0] if scalar else a

    data = Bunch(
        X_train=np.concatenate(Xtr), y_train=out(ytr), groups_train=np.concatenate(gtr),
        X_test=np.tile(x_test, T)[:, None], y_test=out(yte), y_test_clean=out(yte_clean),
        groups_test=np.concatenate(gte),
        components_test={k: out(v) for k, v in parts.items()},
        noise=noise,
    )
    if return_truth:
        truth.update(h_g=h_g, B_g=B_g)
        data["truth"] = truth
    return data


def make_press_tonnage(
    n_cycles=(40, 15, 15, 15, 15),
    n_points=120,
    *,
    fault_depth=0.35,
    cycle_variation=0.05,
    noise=0.02,
    random_state=None,
):
    """Synthetic multi-station stamping-press tonnage cycles (classes = fault modes).

    A stand-in for the press tonnage data of the paper's sec. 5.1 (Lei, Zhang
    and Jin 2010), which are not public. Each cycle is the tonnage on a time
    grid of ``n_points`` in [0, 1]: the sum of four station bumps (Gaussian
    force peaks at different times and heights). Class 0 is normal; class
    ``k >= 1`` misses the part at station ``k``, which lowers that station's
    bump by ``fault_depth`` of its height. Cycle-to-cycle variation is a
    smooth random GP multiplied in (``cycle_variation``), plus white noise.

    Parameters
    ----------
    n_cycles : sequence of int, default=(40, 15, 15, 15, 15)
        Cycles per class, each >= 1 (the first is the normal class; at most 5
        classes).
    n_points : int, default=120
    fault_depth : float in [0, 1], default=0.35
        Share of the station's bump height a fault removes.
    cycle_variation, noise : float, default=0.05 and 0.02
        Standard deviations (finite, >= 0) of the multiplicative cycle
        variation and of the white noise.
    random_state : int, RandomState instance or None, default=None

    Returns
    -------
    X : ndarray of shape (sum(n_cycles), n_points)
        One cycle per row.
    y : ndarray of shape (sum(n_cycles),)
        Class of each cycle.
    t : ndarray of shape (n_points,)
        The time grid.

    Examples
    --------
    >>> from skfed.datasets import make_press_tonnage
    >>> X, y, t = make_press_tonnage(random_state=0)
    >>> X.shape, sorted(set(y.tolist()))
    ((100, 120), [0, 1, 2, 3, 4])
    """
    check_counts(n_cycles, "n_cycles")
    counts = [int(c) for c in n_cycles]
    if not 1 <= len(counts) <= 5:
        raise ValueError(f"n_cycles must list 1 to 5 classes, got {len(counts)}.")
    m = check_positive_int(n_points, "n_points", minimum=2)
    check_fraction(fault_depth, "fault_depth", allow_zero=True)
    check_number(cycle_variation, "cycle_variation", minimum=0)
    check_number(noise, "noise", minimum=0)
    rng = check_random_state(random_state)
    t = np.linspace(0, 1, m)
    centers, heights, widths = [0.2, 0.4, 0.6, 0.8], [1.0, 0.8, 1.2, 0.9], [0.06, 0.05, 0.07, 0.05]
    bumps = np.array([h * np.exp(-0.5 * ((t - c) / w) ** 2)
                      for c, h, w in zip(centers, heights, widths)])
    Kc = _rbf(t, 0.2, cycle_variation**2)
    X, y = [], []
    for k, count in enumerate(counts):
        amp = np.ones(4)
        if k >= 1:
            amp[k - 1] = 1.0 - fault_depth
        base = amp @ bumps
        wobble = _draw(rng, Kc, count).T
        X.append(base * (1 + wobble) + noise * rng.standard_normal((count, m)))
        y.append(np.full(count, k))
    return np.vstack(X), np.concatenate(y), t


def make_monitoring_stations(
    n_stations=12,
    n_zones=3,
    n_times=150,
    *,
    noise=0.1,
    random_state=None,
):
    """Synthetic multi-station monitoring series with zones (clustering demo).

    A stand-in for the Beijing air-quality stations of the paper's sec. 5.2.
    Every station observes a shared seasonal signal (lengthscale 0.15 on [0,
    1]) plus a station deviation of the same kernel and a local transient
    component whose kernel depends on the station's zone: zone ``z`` has local
    lengthscale ``[0.08, 0.2, 0.6][z]`` and standard deviation
    ``[1.0, 0.5, 0.25][z]`` (cycled for more zones). Stations are assigned to
    zones in turn.

    Returns
    -------
    X : ndarray of shape (n_stations * n_times, 1)
        Observation times.
    y : ndarray of shape (n_stations * n_times,)
    groups : ndarray of shape (n_stations * n_times,)
        Station of each row.
    zones : ndarray of shape (n_stations,)
        True zone of each station.

    Examples
    --------
    >>> from skfed.datasets import make_monitoring_stations
    >>> X, y, groups, zones = make_monitoring_stations(random_state=0)
    >>> X.shape, zones.tolist()[:4]
    ((1800, 1), [0, 1, 2, 0])
    """
    S = check_positive_int(n_stations, "n_stations")
    Z = check_positive_int(n_zones, "n_zones")
    m = check_positive_int(n_times, "n_times", minimum=2)
    check_number(noise, "noise", minimum=0)
    rng = check_random_state(random_state)
    t = np.linspace(0, 1, m)
    lss, sds = [0.08, 0.2, 0.6], [1.0, 0.5, 0.25]
    shared = _draw(rng, _rbf(t, 0.15, 1.0))[:, 0]
    zones = np.arange(S) % Z
    X, y, groups = [], [], []
    for s in range(S):
        z = zones[s] % 3
        dev = _draw(rng, _rbf(t, 0.15, 0.2))[:, 0]
        loc = _draw(rng, _rbf(t, lss[z], sds[z] ** 2))[:, 0]
        X.append(t[:, None])
        y.append(shared + dev + loc + noise * rng.standard_normal(m))
        groups.append(np.full(m, s))
    return np.vstack(X), np.concatenate(y), np.concatenate(groups), zones
