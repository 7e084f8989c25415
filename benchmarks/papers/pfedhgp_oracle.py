"""Bayes-oracle predictive on the pFedHGP Table 2 data (a floor, not a method).

For each seed and scenario this draws exactly the data of
``skfed.benchmark._pfedhgp.run(seed, "full")`` (same call, same arguments),
takes the generator's true quantities (training inputs, loadings ``B_g``,
``B_delta_i``, ``B_l_i``, the Cholesky jitters, ``gamma_i``) from its
``return_truth``, and computes the exact Gaussian posterior of every
client's noisy test targets under the true model:

* ``oracle (pooled)``: conditioned on all clients' training data (the
  ``T n Q`` joint covariance);
* ``oracle (client-only)``: conditioned on the client's own training data.

Both are scored with the benchmark's own ``_metrics`` (per-client metrics,
averaged over clients). Scenario C (``gamma_i f_g * f_delta``) is not
Gaussian; for it the script reports the best *linear* predictor under the
true second moments (exact ``E[y y^T]``), with a Gaussian predictive of its
error covariance, labelled "C (linear)": its expected MSE bounds the Bayes
one from above, its NLL is that of a Gaussian approximation.

``chi2/dof`` is ``z^T z / (T n Q)`` for the whitened training vector
``z = L^{-1} y`` (``L L^T`` the true covariance): about 1 (sd ~0.04) when the
covariance is that of the generator.

Usage: ``python benchmarks/papers/pfedhgp_oracle.py [--seeds 0-29] [--scenarios A,B,D]
[--json out.json]``
"""

import argparse
import json
import time

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from sklearn.utils import Bunch

from skfed.benchmark import summarize
from skfed.benchmark._pfedhgp import SIZES, _metrics
from skfed.datasets import make_hierarchical_gp

METRICS = ("rmse", "nll", "crps", "cov95", "width95", "coverr")


def generator_truth(*, n_clients, n_outputs, n_train, n_test, scenario, random_state,
                    noise=0.05, phi=1.2, global_lengthscales=(1.8, 2.5),
                    global_scales=(1.0, 0.7), local_lengthscales=(0.25, 0.45),
                    local_scales=(1.0, 0.8), domain=(0.0, 10.0)):
    """The data of ``make_hierarchical_gp`` and the true quantities behind them.

    The generator's own ``return_truth`` (the loadings, the jitter of each
    latent draw, ``gamma_i``), with the settings the oracle's covariances need.

    Parameters
    ----------
    n_clients, n_outputs, n_train, n_test, scenario, random_state, noise, phi
        As in :func:`skfed.datasets.make_hierarchical_gp` (multi-output).
    global_lengthscales, global_scales, local_lengthscales, local_scales, domain
        As in :func:`skfed.datasets.make_hierarchical_gp`.

    Returns
    -------
    truth : Bunch
        ``data`` (the generator's Bunch), ``X`` (list of training inputs per
        client), ``x_test``, ``B_g`` (Q, R), ``B_d`` and ``B_l`` (T, Q, R),
        ``jit_g`` (R,), ``jit_d`` and ``jit_l`` (T, R) (the jitter each latent
        draw was made with: white latent variance on its draw's points),
        ``gamma`` (T,) (scenario C, else zeros) and the kernel settings.
    """
    data = make_hierarchical_gp(
        n_clients=n_clients, n_outputs=n_outputs, n_train=n_train, n_test=n_test,
        scenario=scenario, noise=noise, phi=phi, global_lengthscales=global_lengthscales,
        global_scales=global_scales, local_lengthscales=local_lengthscales,
        local_scales=local_scales, domain=domain, random_state=random_state, return_truth=True)
    t = data.truth
    return Bunch(data=data, X=list(t.x_train), x_test=t.x_test, B_g=t.B_g, B_d=t.B_d, B_l=t.B_l,
                 jit_g=t.jit_g, jit_d=t.jit_d, jit_l=t.jit_l, gamma=t.gamma,
                 scenario=scenario, noise=noise, phi=phi,
                 ls_g=np.asarray(global_lengthscales), tau_g=np.asarray(global_scales),
                 ls_l=np.asarray(local_lengthscales), tau_l=np.asarray(local_scales),
                 n_train=n_train, n_test=n_test)


def _points(truth, client, kind):
    """Points of a client's training rows or test grid: inputs and draw indices.

    ``g`` indexes the joint global draw (all training inputs, then the grid,
    shared by the clients), ``l`` the client's own draws (its rows, then the
    grid). Equal indices share the draw's jitter (white latent variance).
    """
    n, nt, T = truth.n_train, truth.n_test, len(truth.X)
    if kind == "train":
        x, g, loc = truth.X[client], client * n + np.arange(n), np.arange(n)
    else:
        x, g, loc = truth.x_test, T * n + np.arange(nt), n + np.arange(nt)
    return Bunch(x=x, g=g, l=loc, c=np.full(len(x), client))


def _cat(points):
    return Bunch(**{k: np.concatenate([p[k] for p in points]) for k in ("x", "g", "l", "c")})


def _k_rbf(x1, x2, ls, scale2):
    return scale2 * np.exp(-0.5 * ((x1[:, None] - x2[None, :]) / ls) ** 2)


def _k_per(x1, x2, period, ls, scale2):
    d = np.abs(x1[:, None] - x2[None, :])
    return scale2 * np.exp(-2.0 * np.sin(np.pi * d / period) ** 2 / ls**2)


def _mix(K, B1, B2):
    """``sum_r K[..., r] B1[q, r] B2[p, r]`` laid out as (m1 Q, m2 Q), point-major."""
    m1, m2 = K.shape[:2]
    return np.einsum("abr,qr,pr->aqbp", K, B1, B2).reshape(m1 * B1.shape[0], m2 * B2.shape[0])


def _blocks(truth, P1, P2):
    """Clean-function covariances between two point sets, by component.

    Returns ``G`` (global) and, per client ``c`` present in both sets, the
    row and column masks and the deviation ``D`` and local ``L`` blocks (each
    already mixed by the true loadings, jitter included).
    """
    R = len(truth.ls_g)
    same_g = (P1.g[:, None] == P2.g[None, :])
    Kg = np.stack([_k_rbf(P1.x, P2.x, truth.ls_g[r], truth.tau_g[r] ** 2)
                   + truth.jit_g[r] * same_g for r in range(R)], axis=-1)
    G = _mix(Kg, truth.B_g, truth.B_g)
    per_client = []
    for c in np.intersect1d(P1.c, P2.c):
        a, b = P1.c == c, P2.c == c
        x1, x2 = P1.x[a], P2.x[b]
        same_l = P1.l[a][:, None] == P2.l[b][None, :]
        Kd, Kl = [], []
        for r in range(R):
            s2 = truth.phi * truth.tau_g[r] ** 2
            k = _k_rbf(x1, x2, truth.ls_g[r], s2)
            if truth.scenario == "B":
                k = 0.65 * k + 0.35 * _k_per(x1, x2, 3.0, 0.8, s2)
            Kd.append(k + truth.jit_d[c, r] * same_l)
            Kl.append(_k_rbf(x1, x2, truth.ls_l[r], truth.tau_l[r] ** 2)
                      + truth.jit_l[c, r] * same_l)
        per_client.append((c, np.repeat(a, truth.B_g.shape[0]), np.repeat(b, truth.B_g.shape[0]),
                           _mix(np.stack(Kd, -1), truth.B_d[c], truth.B_d[c]),
                           _mix(np.stack(Kl, -1), truth.B_l[c], truth.B_l[c])))
    return G, per_client


def true_covariance(truth, P1, P2):
    """Covariance of the clean outputs at two point sets under the true model.

    Parameters
    ----------
    truth : Bunch
        Output of :func:`generator_truth`.
    P1, P2 : Bunch
        Point sets (``x``, draw indices ``g`` and ``l``, client ``c``).

    Returns
    -------
    K : ndarray of shape (len(P1.x) * Q, len(P2.x) * Q)
        Point-major (row ``a Q + q`` is output ``q`` at point ``a``). Scenario
        D: ``f_l = 0.5 f_delta + sqrt(0.75) f_l~``, so the deviation enters
        with weight ``1.5^2`` and the independent local part with ``0.75``.
        Scenario C: the exact second moment, the product term adding
        ``gamma_i^2 G * D`` (elementwise; it is uncorrelated with the
        Gaussian terms and across clients).
    """
    G, per_client = _blocks(truth, P1, P2)
    K = G.copy()
    wd, wl = (2.25, 0.75) if truth.scenario == "D" else (1.0, 1.0)
    for c, a, b, D, L in per_client:
        block = wd * D + wl * L
        if truth.scenario == "C":
            block = block + truth.gamma[c] ** 2 * G[np.ix_(a, b)] * D
        K[np.ix_(a, b)] += block
    return K


def oracle_predict(truth, pooled=True):
    """Posterior of every client's noisy test targets under the true model.

    Parameters
    ----------
    truth : Bunch
        Output of :func:`generator_truth`.
    pooled : bool, default=True
        Condition on all clients' training data (else on the client's own).

    Returns
    -------
    mean : ndarray of shape (T n_test, Q)
    cov : ndarray of shape (T n_test, Q, Q)
        Predictive covariance of the noisy target (``sigma^2 I_Q`` added).
    chi2 : float
        ``z^T z / dim`` of the whitened conditioning vector(s).
    """
    data, T, Q = truth.data, len(truth.X), truth.B_g.shape[0]
    n, nt, s2 = truth.n_train, truth.n_test, truth.noise**2
    sets = [list(range(T))] if pooled else [[i] for i in range(T)]
    mean, cov = np.empty((T, nt, Q)), np.empty((T, nt, Q, Q))
    z2, dim = 0.0, 0
    for clients in sets:
        Ptr = _cat([_points(truth, c, "train") for c in clients])
        y = np.concatenate([data.y_train[c * n:(c + 1) * n] for c in clients]).ravel()
        Ktt = true_covariance(truth, Ptr, Ptr) + s2 * np.eye(len(y))
        fac = cho_factor(Ktt, lower=True)
        z = solve_triangular(fac[0], y, lower=True)
        z2, dim = z2 + z @ z, dim + len(y)
        alpha = cho_solve(fac, y)
        for c in clients:
            Pte = _points(truth, c, "test")
            Kst = true_covariance(truth, Pte, Ptr)
            V = solve_triangular(fac[0], Kst.T, lower=True).reshape(-1, nt, Q)
            prior = true_covariance(truth, Pte, Pte).reshape(nt, Q, nt, Q)
            prior = prior[np.arange(nt), :, np.arange(nt), :]
            mean[c] = (Kst @ alpha).reshape(nt, Q)
            cov[c] = prior - np.einsum("kjq,kjp->jqp", V, V) + s2 * np.eye(Q)
    return mean.reshape(T * nt, Q), cov.reshape(T * nt, Q, Q), float(z2 / dim)


def _seeds(text):
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-29", help="e.g. 0-29 or 0,3,5-7")
    parser.add_argument("--scenarios", default="A,B,D", help="any of A,B,C,D (C: linear)")
    parser.add_argument("--json", default="pfedhgp_oracle.json", help="per-seed numbers")
    args = parser.parse_args(argv)
    size = SIZES["full"]
    rows, per_seed = [], []
    tic = time.perf_counter()
    for scenario in args.scenarios.split(","):
        setting = "scenario C (linear)" if scenario == "C" else f"scenario {scenario}"
        for seed in _seeds(args.seeds):
            # the benchmark's call (skfed.benchmark._pfedhgp.run, mode "full")
            truth = generator_truth(n_clients=size["n_clients"], n_outputs=size["n_outputs"],
                                    n_train=size["n_train"], n_test=size["n_test"],
                                    scenario=scenario, random_state=seed)
            for method, pooled in (("oracle (pooled)", True), ("oracle (client-only)", False)):
                mean, cov, chi2 = oracle_predict(truth, pooled)
                std = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
                scores = {**_metrics(truth.data, mean, std, cov), "chi2/dof": chi2}
                per_seed.append({"setting": setting, "method": method, "seed": seed, **scores})
                rows.extend({"experiment": "pfedhgp_oracle", "setting": setting,
                             "method": method, "metric": k, "value": v}
                            for k, v in scores.items())
    summary = summarize(rows)
    cols = [*METRICS, "chi2/dof"]
    print(f"Bayes oracle on the Table 2 data, seeds {args.seeds} "
          f"({time.perf_counter() - tic:.0f} s); mean [95% t-interval]\n")
    for setting in dict.fromkeys(r["setting"] for r in per_seed):
        print(f"**{setting}**\n\n| method | " + " | ".join(cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        for method in dict.fromkeys(r["method"] for r in per_seed):
            cells = {s["metric"]: s for s in summary
                     if s["setting"] == setting and s["method"] == method}
            print(f"| {method} | " + " | ".join(
                f"{cells[k]['mean']:.3f} [{cells[k]['low']:.3f}, {cells[k]['high']:.3f}]"
                for k in cols) + " |")
        print()
    with open(args.json, "w") as fh:
        json.dump({"seeds": args.seeds, "sizes": size, "per_seed": per_seed}, fh, indent=1)
    print(f"per-seed numbers: {args.json}")


if __name__ == "__main__":
    main()
