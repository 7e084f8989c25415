"""Table 1 of the DP-Fed DRO paper by its protocol, one process per data set.

The same computation as ``skfed benchmark --full --experiments dp_fed_dro_uci`` (it calls
``skfed.benchmark._dp_fed_dro.run_uci``), split so that data sets run as separate
processes and every finished seed is appended to a JSON-lines file (a long run can be
stopped and summarized at any seed). Each row also records the hyperparameters the 5-fold
within-client CV selected.

Run::

    python benchmarks/papers/dp_fed_dro_table1.py --datasets iris --seeds 0 1 2 3 4 5 6 7 8 9 \\
        --out table1_iris.jsonl
    python benchmarks/papers/dp_fed_dro_table1.py --summarize table1_iris.jsonl table1_wine.jsonl

``--federated-cv`` runs only the non-private Fed DRO with its own within-client CV of the
federated ADMM over the paper's (kappa, r) grid (80 ADMM fits per seed and data set).

The per-seed wall time of the run (``seconds``, all data sets of the call) is in each row.
"""

import argparse
import json
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sklearn.metrics import f1_score  # noqa: E402

from skfed.benchmark._dp_fed_dro import (  # noqa: E402
    GRIDS,
    TABLE1,
    UCI_ROUNDS,
    _cv_select,
    _uci_split,
    run_uci,
)
from skfed.linear_model import DPFedDROClassifier  # noqa: E402


def federated_cv_rows(name, seed):
    """Non-private Fed DRO with its *own* within-client CV over the paper's (kappa, r)
    grid (``--federated-cv``; the table's row takes the centralized model's selection)."""
    X, y, groups, X_te, y_te = _uci_split(name, seed)
    rounds = UCI_ROUNDS["full"]

    def make(p):
        return DPFedDROClassifier(epsilon=None, standardize=False, n_rounds=rounds["np"],
                                  rho=rounds["np_rho"], gamma=0.1, feature_norm="l1",
                                  fit_intercept=False, **p)

    params = _cv_select(make, GRIDS["NP"], X, y, groups, seed)
    pred = make(params).fit(X, y, groups=groups).predict(X_te)
    return [{"setting": name, "method": "Non-Private Fed DRO, federated CV", "params": params,
             "macro_f1": float(f1_score(y_te, pred, average="macro"))}]


def summarize(paths):
    rows, seen = [], set()
    for line in (line for p in paths for line in Path(p).read_text().splitlines()):
        r = json.loads(line)
        key = (r["setting"], r["method"], r["seed"])
        if key not in seen:  # a seed run twice (two processes) counts once
            seen.add(key)
            rows.append(r)
    cells = defaultdict(list)
    seeds = defaultdict(set)
    for r in rows:
        cells[(r["setting"], r["method"])].append(r["macro_f1"])
        seeds[r["setting"]].add(r["seed"])
    sets = list(dict.fromkeys(r["setting"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    print("| method | " + " | ".join(f"{s}: paper | {s}: ours" for s in sets) + " |")
    print("|---|" + "---|---|" * len(sets))
    for m in methods:
        out = []
        for s in sets:
            paper = TABLE1[s].get(m.split(" (PLD")[0])
            v = np.array(cells[(s, m)])
            out += [f"{paper:.3f}" if paper is not None else "",
                    f"{v.mean():.3f} ± {v.std(ddof=1):.3f}" if v.size > 1 else f"{v.mean():.3f}"]
        print(f"| {m} | " + " | ".join(out) + " |")
    for s in sets:
        print(f"{s}: seeds {sorted(seeds[s])}")
    sel = defaultdict(lambda: defaultdict(int))
    for r in rows:
        sel[(r["setting"], r["method"])][json.dumps(r["params"], sort_keys=True)] += 1
    print("CV selections (count over seeds):")
    for (s, m), d in sel.items():
        print(f"  {s} / {m}: " + "; ".join(f"{k} x{v}" for k, v in
                                           sorted(d.items(), key=lambda kv: -kv[1])))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="*", default=["iris", "wine"])
    parser.add_argument("--seeds", nargs="*", type=int, default=list(range(10)))
    parser.add_argument("--mode", default="full", choices=["quick", "full"])
    parser.add_argument("--out", default="dp_fed_dro_table1.jsonl")
    parser.add_argument("--summarize", nargs="*")
    parser.add_argument("--federated-cv", action="store_true",
                        help="only the non-private Fed DRO row, with its own federated CV")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    for seed in args.seeds:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if args.federated_cv:
                rows = [r for name in args.datasets for r in federated_cv_rows(name, seed)]
            else:
                rows = run_uci(seed, args.mode, datasets=args.datasets)
        took = time.perf_counter() - t0
        with open(args.out, "a") as fh:
            for r in rows:
                fh.write(json.dumps({**r, "seed": seed, "seconds": took,
                                     "params": {k: float(v) for k, v in r["params"].items()}})
                         + "\n")
        print(f"seed {seed}: {took:.0f} s", flush=True)


if __name__ == "__main__":
    main()
