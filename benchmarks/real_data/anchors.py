"""The mixed-effects anchors (GPBoost, MERF) alone on the real regression sets (not a test).

``skfed benchmark --full --experiments real`` runs every method with the anchors;
on a 2-core machine MERF's tuning makes that hours. This runs the anchors (and
MixedLM, to check that the folds are the benchmark's: its cells must equal the
tables of ``doc/results/real_data.md``) on the benchmark's own splits, seeds and
tuning (:func:`skfed.benchmark._real_data.anchor_methods`), so their rows can be
set beside the tables' other rows.

    python benchmarks/real_data/anchors.py --sets exam hsb82 chickweight produc \\
        --seeds 3 --methods "GPBoost (trees)" "GPBoost (linear)" MixedLM

Prints one markdown row per data set, protocol and method: the RMSE's mean over the
seeds with its smallest and largest value, and the mean fit time per fold.
"""

import argparse
import json
import time

import numpy as np

from skfed.baselines import MixedLMRegressor
from skfed.benchmark._real_data import (
    N_SPLITS, RANDOM_SLOPES, SEED_BASE, _regression_fold, _splits, anchor_methods,
)
from skfed.datasets import load_multilevel


def run(name, seed, wanted):
    data = load_multilevel(name)
    X, y, groups = data.data, data.target, data.groups
    names = list(data.feature_names)
    slopes = RANDOM_SLOPES[name]
    slope_cols = None if slopes is None else [names.index(f) for f in slopes]
    seed = SEED_BASE + seed
    rows = []
    for setting, folds in _splits(X, y, groups, seed).items():
        methods = anchor_methods(slope_cols, setting, seed)
        methods.append(("MixedLM", MixedLMRegressor(random_slopes=slope_cols), False))
        for label, model, is_gp in methods:
            if label not in wanted:
                continue
            parts = [_regression_fold(label, model, is_gp, X, y, groups, tr, te, setting)
                     for tr, te in folds]
            rmse = float(np.sqrt(sum(p["sse"] for p in parts) / sum(p["n"] for p in parts)))
            rows.append({"set": name, "seed": seed, "setting": setting, "method": label,
                         "rmse": rmse,
                         "fit_time_s": float(np.mean([p["fit_time_s"] for p in parts]))})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=list(RANDOM_SLOPES))
    parser.add_argument("--seeds", type=int, default=3, help="split seeds 100, 101, ...")
    labels = ["GPBoost (trees)", "GPBoost (linear)", "MERF", "MixedLM"]
    parser.add_argument("--methods", nargs="+", default=labels, choices=labels)
    args = parser.parse_args()
    tic = time.perf_counter()
    rows = [r for name in args.sets for seed in range(args.seeds)
            for r in run(name, seed, set(args.methods))]
    print(f"\n{args.seeds} split seeds from {SEED_BASE}, {N_SPLITS} folds, "
          f"{time.perf_counter() - tic:.0f} s\n")
    print("| data set | protocol | method | RMSE, mean (min..max) | fit s per fold |")
    print("|---|---|---|---|---|")
    keys = dict.fromkeys((r["set"], r["setting"], r["method"]) for r in rows)
    for key in keys:
        mine = [r for r in rows if (r["set"], r["setting"], r["method"]) == key]
        v = np.array([r["rmse"] for r in mine])
        fit = np.mean([r["fit_time_s"] for r in mine])
        print(f"| {key[0]} | {key[1]} | {key[2]} | {v.mean():.4g} ({v.min():.4g}..{v.max():.4g})"
              f" | {fit:.3g} |")


if __name__ == "__main__":
    main()
