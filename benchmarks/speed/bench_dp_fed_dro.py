"""Performance of DPFedDROClassifier (not a test).

1. Time per round vs one ``X @ M.T`` over all rows, and peak memory vs the
   data, at G=100 clients, 1,000,000 rows, P=50, K=10 (``--rows`` to scale).
2. Fit time and accuracy beside scikit-learn's
   ``LinearSVC(multi_class="crammer_singer")`` on the pooled rows.
3. Runtime against G (fixed total N and fixed N per client) and K, as in the
   paper's scalability study (make_classification, T=120, eps=0.2/round,
   delta=1e-8), with the private baselines.

Run: ``python benchmarks/speed/bench_dp_fed_dro.py [--rows 1000000] [--skip-svc]``.
"""

import argparse
import time
import tracemalloc

import numpy as np
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.svm import LinearSVC

from skfed.linear_model import DPFedDROClassifier, DPFedERMClassifier, DPFedSGDClassifier
from skfed.preprocessing import make_minmax_l2_pipeline


def make_data(n_rows, n_clients, n_features, n_classes, seed=0):
    """Rows grouped by client (contiguous), norms <= 1, labels from a linear model."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    W = rng.standard_normal((n_classes, n_features))
    y = np.argmax(X @ W.T + 0.3 * rng.standard_normal((n_rows, n_classes)), axis=1)
    groups = np.repeat(np.arange(n_clients), n_rows // n_clients)
    groups = np.r_[groups, np.full(n_rows - groups.size, n_clients - 1)]
    return X, y, groups


def best_time(fn, repeat=3):
    out = []
    for _ in range(repeat):
        tic = time.perf_counter()
        fn()
        out.append(time.perf_counter() - tic)
    return min(out)


def per_round(X, y, groups, n_jobs):
    def fit(rounds):
        est = DPFedDROClassifier(epsilon=0.5, n_rounds=rounds, c_M=2.0, random_state=0,
                                 n_jobs=n_jobs)
        tic = time.perf_counter()
        est.fit(X, y, groups=groups)
        return time.perf_counter() - tic, est

    t1, _ = fit(1)
    t6, est = fit(6)
    return (t6 - t1) / 5, t6, est


def section_round(args):
    X, y, groups = make_data(args.rows, args.clients, args.features, args.classes)
    M = np.random.default_rng(1).standard_normal((args.classes, args.features))
    t_mm = best_time(lambda: X @ M.T)
    data_mb = X.nbytes / 2**20
    print(f"\n## One round at G={args.clients}, N={args.rows:,}, P={args.features}, "
          f"K={args.classes} (data {data_mb:.0f} MiB)")
    for n_jobs in (1, 2):
        t_round, t_fit, _ = per_round(X, y, groups, n_jobs)
        print(f"n_jobs={n_jobs}: time per round {t_round:.3f} s; X @ M.T {t_mm:.3f} s; "
              f"ratio {t_round / t_mm:.2f} (target <= 3); fit of 6 rounds {t_fit:.2f} s")
    tracemalloc.start()
    DPFedDROClassifier(epsilon=0.5, n_rounds=3, random_state=0).fit(X, y, groups=groups)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak extra memory during fit (tracemalloc) {peak / 2**20:.1f} MiB = "
          f"{peak / X.nbytes:.2f} x data; with the data held: "
          f"{(peak + X.nbytes) / X.nbytes:.2f} x (target <= 1.5)")
    return X, y, groups


def section_svc(args, X, y, groups):
    n = min(args.svc_rows, X.shape[0])
    idx = np.random.default_rng(2).choice(X.shape[0], n, replace=False)
    idx.sort()
    Xs, ys, gs = X[idx], y[idx], groups[idx]
    Xtr, Xte, ytr, yte, gtr, _ = train_test_split(Xs, ys, gs, test_size=0.2, random_state=0)
    order = np.argsort(gtr, kind="stable")
    Xtr, ytr, gtr = Xtr[order], ytr[order], gtr[order]
    print(f"\n## Beside LinearSVC(crammer_singer), pooled, {Xtr.shape[0]:,} training rows")
    rows = []
    tic = time.perf_counter()
    svc = LinearSVC(multi_class="crammer_singer", C=1.0, max_iter=2000).fit(Xtr, ytr)
    rows.append(("LinearSVC crammer_singer (pooled, non-private)",
                 time.perf_counter() - tic, svc.score(Xte, yte)))
    for eps in (0.5, 5.0):
        est = DPFedDROClassifier(epsilon=eps, n_rounds=50, c_M=2.0, random_state=0)
        tic = time.perf_counter()
        est.fit(Xtr, ytr, groups=gtr)
        rows.append((f"DPFedDROClassifier eps={eps}/round, T=50 "
                     f"(eps_bar={est.privacy_spent_['epsilon']:.1f})",
                     time.perf_counter() - tic, est.score(Xte, yte)))
    print("| method | fit time (s) | test accuracy |\n|---|---|---|")
    for name, t, acc in rows:
        print(f"| {name} | {t:.2f} | {acc:.3f} |")


def scal_fit(n_rows, n_clients, n_classes, seed=0):
    X, y = make_classification(n_samples=n_rows, n_features=10, n_informative=10,
                               n_redundant=0, n_repeated=0, n_classes=n_classes,
                               n_clusters_per_class=1, class_sep=2.5, flip_y=0.0,
                               random_state=seed)
    Xtr, _, ytr, _ = train_test_split(X, y, test_size=0.2, random_state=seed)
    Xtr = make_minmax_l2_pipeline().fit_transform(Xtr)
    groups = np.random.default_rng(seed).permutation(np.arange(Xtr.shape[0]) % n_clients)
    out = {}
    common = dict(epsilon=0.2, delta=1e-8, n_rounds=120, random_state=seed)
    for name, est in (
        ("DP-Fed DRO", DPFedDROClassifier(kappa=0.5, radius=0.02, rho=0.5, **common)),
        ("DP-Fed ERM", DPFedERMClassifier(rho=0.5, reg=1e-4, c_w=5.0, **common)),
        ("DP-Fed SGD", DPFedSGDClassifier(learning_rate=0.1, reg=1e-4, **common)),
    ):
        tic = time.perf_counter()
        est.fit(Xtr, ytr, groups=groups)
        out[name] = time.perf_counter() - tic
    return out


def section_scalability():
    print("\n## Scalability (fit time in s for T=120, eps=0.2/round, delta=1e-8)")
    header = "| setting | DP-Fed DRO | DP-Fed ERM | DP-Fed SGD |\n|---|---|---|---|"
    print("Clients, fixed total N=3000:\n" + header)
    for g in (5, 10, 15, 20, 25, 30):
        t = scal_fit(3000, g, 4)
        print(f"| G={g} | " + " | ".join(f"{v:.2f}" for v in t.values()) + " |")
    print("Clients, 100 rows per client:\n" + header)
    for g in (5, 10, 15, 20, 25, 30):
        t = scal_fit(100 * g, g, 4)
        print(f"| G={g} | " + " | ".join(f"{v:.2f}" for v in t.values()) + " |")
    print("Classes, G=4, N=3000:\n" + header)
    for k in (3, 5, 7, 9):
        t = scal_fit(3000, 4, k)
        print(f"| K={k} | " + " | ".join(f"{v:.2f}" for v in t.values()) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--svc-rows", type=int, default=100_000)
    parser.add_argument("--skip-svc", action="store_true")
    parser.add_argument("--skip-scalability", action="store_true")
    args = parser.parse_args()
    X, y, groups = section_round(args)
    if not args.skip_svc:
        section_svc(args, X, y, groups)
    if not args.skip_scalability:
        section_scalability()


if __name__ == "__main__":
    main()
