"""pFedHGP's classification and clustering demos on synthetic stand-ins (not a test).

The paper's press-tonnage and Beijing air-quality data are not shipped; the
generators ``make_press_tonnage`` and ``make_monitoring_stations`` have the
same structure.

* ``--part classification`` (paper sec. 3.8.1): ``PFedHGPClassifier`` at its
  defaults on ``make_press_tonnage(n_cycles=(50, 20, 20, 20, 20),
  n_points=120)`` (normal + 4 missing-part faults, 130 cycles); trained on the
  first 8 normal cycles and the first 4 of each fault (24 cycles, 18.5%),
  every other cycle classified; accuracy per generator seed.
* ``--part clustering`` (paper sec. 3.8.2 and 5.2): ``PFedHGPRegressor``
  (``optimizer="cavi"``, ``M_i = 12``, 15 rounds, ``random_state=0``, and the
  settings of the demo as first run: ``tol=None, server_lr=0.1,
  mean_update="blockwise", mean_function="constant", normalize_X=False``) on
  ``make_monitoring_stations`` (12 stations, 3 zones), then
  ``cluster_clients(rho, 3, random_state=0)`` and the adjusted Rand index
  against the true zones, for four readings of ``rho``: the paper's operator
  (``client_dissimilarity`` defaults: ``K_g`` in both blocks),
  ``deviation_kernel="deviation"`` (``phi K_g``), ``component="local"``, and
  the squared Euclidean distance between the fitted ``(log s_i, log l_i)``
  of the local kernels. Settings: S1: 100 times per station, ``M = 15``,
  default initial values; S2: S1 with ``normalize_y=True`` and initial
  lengthscales 0.15 (global), 0.1 (local); S3 / S4: the paper's sizes (730
  times per station, ``M = 30``) with the S1 / S2 initial values.
* ``--part zones``: can the zones be told apart at all? With the generator's
  true kernels, each station's log marginal likelihood under each zone's
  covariance (shared + deviation + that zone's local kernel + noise; the
  shared signal integrated out); printed: the largest ``|log p(zone 1) - log
  p(zone 2)|`` over the zone-1/2 stations and the accuracy of the Bayes
  classifier that assigns each station its most likely zone. Also the ARI of
  the labelling with zone 0 exact and the other 8 stations split 4/4 at
  random (over all 70 such splits).

Run: ``python benchmarks/papers/pfedhgp_demos.py --part classification --seeds 0-2``,
``python benchmarks/papers/pfedhgp_demos.py --part clustering --settings S1,S2,S3,S4
--seeds 0-2`` and ``python benchmarks/papers/pfedhgp_demos.py --part zones --seeds
0-2`` (``PYTHONPATH=.`` from the repository root, so that the checkout's
``skfed`` is imported).
"""

import argparse
import itertools
import time

import numpy as np
from scipy.stats import multivariate_normal
from sklearn.metrics import adjusted_rand_score

from skfed import PFedHGPRegressor
from skfed.datasets import make_monitoring_stations, make_press_tonnage
from skfed.gaussian_process import PFedHGPClassifier, client_dissimilarity, cluster_clients

from pfedhgp_oracle import _seeds  # noqa: E402  (this folder is on sys.path when run)

SETTINGS = {
    "S1": dict(n_times=100, M=15, init={}),
    "S2": dict(n_times=100, M=15, init=dict(normalize_y=True, init_lengthscale_global=0.15,
                                             init_lengthscale_local=0.1)),
    "S3": dict(n_times=730, M=30, init={}),
    "S4": dict(n_times=730, M=30, init=dict(normalize_y=True, init_lengthscale_global=0.15,
                                             init_lengthscale_local=0.1)),
}
READINGS = {
    "paper (K_g, both blocks)": dict(),
    'deviation_kernel="deviation"': dict(deviation_kernel="deviation"),
    'component="local"': dict(component="local"),
}


def classification(seeds):
    print("| seed | accuracy | test cycles | fit + predict s |")
    print("|---|---|---|---|")
    for seed in seeds:
        X, y, t = make_press_tonnage(n_cycles=(50, 20, 20, 20, 20), n_points=120,
                                     random_state=seed)
        train = np.zeros(len(y), dtype=bool)
        for c in range(5):
            train[np.flatnonzero(y == c)[: 8 if c == 0 else 4]] = True
        tic = time.process_time()
        clf = PFedHGPClassifier(input_grid=t).fit(X[train], y[train])
        acc = float(np.mean(clf.predict(X[~train]) == y[~train]))
        print(f"| {seed} | {acc:.3f} | {int((~train).sum())} | "
              f"{time.process_time() - tic:.1f} |", flush=True)


def clustering(settings, seeds):
    cols = [*READINGS, "fitted (log s_i, log l_i)"]
    print("| setting | seed | " + " | ".join(cols) + " | local lengthscales by zone | fit s |")
    print("|---" * (len(cols) + 4) + "|")
    for name in settings:
        s = SETTINGS[name]
        for seed in seeds:
            X, y, groups, zones = make_monitoring_stations(n_times=s["n_times"],
                                                           random_state=seed)
            model = PFedHGPRegressor(
                inference="variational", optimizer="cavi", n_inducing_global=s["M"],
                n_inducing_local=12, n_rounds=15,
                tol=None, server_lr=0.1, mean_update="blockwise", mean_function="constant",
                normalize_X=False, normalize_y=s["init"].get("normalize_y", False),
                random_state=0,
                **{k: v for k, v in s["init"].items() if k != "normalize_y"})
            tic = time.process_time()
            model.fit(X, y, groups=groups)
            fit_s = time.process_time() - tic
            aris = []
            for kw in READINGS.values():
                rho = client_dissimilarity(model, X, groups, **kw)
                labels = cluster_clients(rho, 3, random_state=0)
                aris.append(adjusted_rand_score(zones, labels))
            feats = np.column_stack([0.5 * np.log(model.variances_local_),
                                     np.log(model.lengthscales_local_[:, 0])])
            rho = ((feats[:, None, :] - feats[None, :, :]) ** 2).sum(-1)
            aris.append(adjusted_rand_score(zones, cluster_clients(rho, 3, random_state=0)))
            ls = model.lengthscales_local_[:, 0]
            by_zone = "; ".join(f"{ls[zones == z].min():.2f}-{ls[zones == z].max():.2f}"
                                for z in np.unique(zones))
            print(f"| {name} | {seed} | " + " | ".join(f"{a:.3f}" for a in aris)
                  + f" | {by_zone} | {fit_s:.1f} |", flush=True)


def _rbf(t, lengthscale, variance):
    return variance * np.exp(-0.5 * ((t[:, None] - t[None, :]) / lengthscale) ** 2)


def zones_identifiable(seeds, n_times_list=(100, 730)):
    # the generator's kernels (skfed.datasets.make_monitoring_stations)
    lss, sds, noise = [0.08, 0.2, 0.6], [1.0, 0.5, 0.25], 0.1
    print("| n_times | seed | max abs LLR zone 1 vs 2 (zone-1/2 stations) | Bayes accuracy |")
    print("|---|---|---|---|")
    for m in n_times_list:
        for seed in seeds:
            X, y, groups, zones = make_monitoring_stations(n_times=m, random_state=seed)
            t = X[groups == 0, 0]
            base = _rbf(t, 0.15, 1.0) + _rbf(t, 0.15, 0.2) + noise**2 * np.eye(m)
            covs = [base + _rbf(t, lss[z], sds[z] ** 2) for z in range(3)]
            ll = np.array([[multivariate_normal(np.zeros(m), c).logpdf(y[groups == s])
                            for c in covs] for s in range(len(zones))])
            mid = zones > 0
            llr = np.abs(ll[mid, 1] - ll[mid, 2]).max()
            acc = float(np.mean(ll.argmax(1) == zones))
            print(f"| {m} | {seed} | {llr:.2f} | {acc:.3f} |", flush=True)
    zones = np.arange(12) % 3
    rest = np.flatnonzero(zones > 0)
    aris = []
    for half in itertools.combinations(rest, 4):
        labels = np.zeros(12, dtype=int)
        labels[rest] = 2
        labels[list(half)] = 1
        aris.append(adjusted_rand_score(zones, labels))
    merged = adjusted_rand_score(zones, np.minimum(zones, 1))
    values, counts = np.unique(np.round(aris, 3), return_counts=True)
    print("\nzone 0 exact, zones 1/2 split 4/4 at random (70 splits): ARI "
          + ", ".join(f"{v:.3f} ({c} splits)" for v, c in zip(values, counts))
          + f"; zones 1 and 2 merged: {merged:.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["classification", "clustering", "zones"],
                        required=True)
    parser.add_argument("--settings", default="S1,S2,S3,S4")
    parser.add_argument("--seeds", default="0-2", help="e.g. 0-2 or 0,2")
    args = parser.parse_args()
    if args.part == "classification":
        classification(_seeds(args.seeds))
    elif args.part == "clustering":
        clustering(args.settings.split(","), _seeds(args.seeds))
    else:
        zones_identifiable(_seeds(args.seeds))


if __name__ == "__main__":
    main()
