"""Non-private defaults of DPFedDROClassifier (``epsilon=None``), chosen by measurement.

Protocol: the real-data benchmark's own (``skfed.benchmark._real_data``): for
each split seed, seen-site folds (``WithinClientKFold(5, small_clients="train",
shuffle=True)``) and new-site folds (``GroupKFold(5, shuffle=True)``,
leave-one-site-out on WVS), on Chile and WVS (``load_multilevel``), raw units.
Selection seeds are 0, 1, ... (the reported real-data seed is 100, so they are
disjoint from it).

Criterion: the mean, over (data set, protocol, seed), of DPFedDROClassifier's
macro-F1 minus Pooled LogReg's (``PooledEstimator(LogisticRegression(max_iter=
1000))``, the baseline of the issue-14 target), among the candidates whose
released model is not numerically zero (``||coef_||_F`` in standardized units
at least 1e-4 on every fold: a model at 1e-8 predicts from solver round-off) and
run at the estimator's 50 rounds (the T 20 rows show what fewer rounds give). Candidates
within 0.01 of the best are ties, resolved in favour of the first listed (the
paper's non-private values at the estimator's 50 rounds come first).

Guard (``--uci``): the same candidates on the DP-Fed DRO paper's UCI protocol
(``skfed.benchmark._dp_fed_dro._uci_split``: min-max + l2 rows, Dirichlet
clients, 10% flipped labels) and on ``make_correlated_faults`` ("moderate",
standardized), to check that a new default does not make them worse.

Run (one process, n_jobs=1; the commands and results are in
``doc/results/real_data_defaults.md``, "How the DP-Fed DRO non-private defaults were chosen")::

    python benchmarks/defaults/dro_nonprivate_defaults.py --seeds 0 --out dro_np.jsonl
    python benchmarks/defaults/dro_nonprivate_defaults.py --seeds 1 --only "LABEL" ... \
        --out dro_np.jsonl
    python benchmarks/defaults/dro_nonprivate_defaults.py --seeds 0 1 --uci --only "LABEL" ... \
        --out dro_np_uci.jsonl
    python benchmarks/defaults/dro_nonprivate_defaults.py --summarize --seeds 0 --out dro_np.jsonl
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from skfed.baselines import LocalEstimator, PooledEstimator  # noqa: E402
from skfed.benchmark._real_data import _splits  # noqa: E402
from skfed.datasets import load_multilevel  # noqa: E402
from skfed.linear_model import DPFedDROClassifier  # noqa: E402

def _c(kappa, radius, n_rounds, fit_intercept=False, rho=0.8):
    """One candidate: every changed parameter explicit (the defaults are "auto")."""
    return dict(kappa=kappa, radius=radius, rho=rho, n_rounds=n_rounds,
                fit_intercept=fit_intercept)


# the estimator's private-mode values (the paper's Sec. 7.1 DP-Fed DRO settings)
PRIVATE = _c(0.5, 0.1, 50)
CANDIDATES = {
    "grid": {
        "private values (kappa 0.5, r 0.1, T 50)": PRIVATE,
        # the paper's non-private Fed DRO values (Sec. 7.1: kappa 2, r 1e-2)
        "kappa 2, r 1e-2, T 50": _c(2.0, 1e-2, 50),
        "kappa 2, r 1e-2, T 20": _c(2.0, 1e-2, 20),
        "kappa 2, r 1e-3, T 20": _c(2.0, 1e-3, 20),
        "kappa 2, r 5e-2, T 20": _c(2.0, 5e-2, 20),
        "kappa 1, r 1e-2, T 20": _c(1.0, 1e-2, 20),
        "kappa 4, r 1e-2, T 20": _c(4.0, 1e-2, 20),
        "kappa 2, r 1e-2, rho 0.1, T 20": _c(2.0, 1e-2, 20, rho=0.1),
        # with an intercept (centred features without one make M = 0 optimal on WVS)
        "kappa 2, r 1e-2, intercept, T 20": _c(2.0, 1e-2, 20, True),
        "kappa 2, r 1e-2, intercept, T 50": _c(2.0, 1e-2, 50, True),
        "kappa 0.5, r 0.1, intercept, T 20": _c(0.5, 0.1, 20, True),
        "kappa 2, r 1e-3, intercept, T 20": _c(2.0, 1e-3, 20, True),
        "kappa 8, r 1e-2, intercept, T 20": _c(8.0, 1e-2, 20, True),
        "kappa 2, r 1e-3, intercept, T 50": _c(2.0, 1e-3, 50, True),
        "kappa 8, r 1e-2, intercept, T 50": _c(8.0, 1e-2, 50, True),
    },
}
BASELINES = {
    "Pooled LogReg": lambda: PooledEstimator(LogisticRegression(max_iter=1000)),
    "Local LogReg": lambda: LocalEstimator(LogisticRegression(max_iter=1000)),
}
ZERO_MODEL = 1e-4
# candidates within TIE of the best criterion are ties (T 20 and T 50 of the same values
# differ by about 0.004), resolved in favour of the first listed: the paper's values first
TIE = 0.01


def _model_norm(est):
    coef = est.coef_ if est.feature_scale_ is None else est.coef_ * est.feature_scale_
    return float(np.linalg.norm(coef))


def _run_folds(make, X, y, groups, folds, setting):
    f1, norms, times = [], [], []
    for tr, te in folds:
        est = make()
        tic = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X[tr], y[tr], groups=groups[tr])
        times.append(time.process_time() - tic)
        pred = est.predict(X[te], groups=groups[te] if setting == "seen-site" else None)
        f1.append(f1_score(y[te], pred, average="macro"))
        if isinstance(est, DPFedDROClassifier):
            norms.append(_model_norm(est))
    return dict(macro_f1=float(np.mean(f1)), cpu_s=float(np.mean(times)),
                min_norm=float(min(norms)) if norms else None)


def real_rows(names, seeds, candidates):
    for name in names:
        data = load_multilevel(name)
        X, y, groups = data.data, data.target, data.groups
        for seed in seeds:
            for setting, folds in _splits(X, y, groups, seed).items():
                base = {"data": name, "seed": seed, "setting": setting}
                for label, make in BASELINES.items():
                    yield dict(base, method=label, **_run_folds(make, X, y, groups, folds,
                                                                setting))
                for label, params in candidates.items():
                    def make(params=params, seed=seed):
                        return DPFedDROClassifier(epsilon=None, n_jobs=1, random_state=seed,
                                                  **params)
                    yield dict(base, method=label, **_run_folds(make, X, y, groups, folds,
                                                                setting))


def uci_rows(seeds, candidates):
    from sklearn.preprocessing import StandardScaler

    from skfed.benchmark._dp_fed_dro import _uci_split
    from skfed.datasets import available_uci, make_correlated_faults

    for seed in seeds:
        sets = {name: _uci_split(name, seed) for name in available_uci()}
        X, y, g, X_te, y_te = make_correlated_faults("moderate", n_train=(500, 120, 120, 120),
                                                     n_test=216, random_state=seed)
        scaler = StandardScaler().fit(X)
        sets["faults (moderate)"] = (scaler.transform(X), y, g, scaler.transform(X_te), y_te)
        for name, (X, y, g, X_te, y_te) in sets.items():
            for label, params in candidates.items():
                est = DPFedDROClassifier(epsilon=None, n_jobs=1, random_state=seed, **params)
                tic = time.process_time()
                est.fit(X, y, groups=g)
                yield {"data": name, "seed": seed, "setting": "paper protocol",
                       "method": label, "cpu_s": time.process_time() - tic,
                       "macro_f1": float(f1_score(y_te, est.predict(X_te), average="macro")),
                       "min_norm": _model_norm(est)}


def _cells(rows):
    cells = {}
    for r in rows:
        cells.setdefault(f"{r['data']} {r['setting']}", []).append(r["macro_f1"])
    return {k: float(np.mean(v)) for k, v in cells.items()}


def summarize(rows, candidates):
    """Markdown table of mean macro-F1 per (data set, protocol) and the selection."""
    ref = {(r["data"], r["seed"], r["setting"]): r["macro_f1"] for r in rows
           if r["method"] == "Pooled LogReg"}
    against = "Pooled LogReg"
    if not ref:  # the paper-protocol guard: relative to the first candidate (private values)
        against = next(iter(candidates))
        ref = {(r["data"], r["seed"], r["setting"]): r["macro_f1"] for r in rows
               if r["method"] == against}
    columns = sorted({f"{r['data']} {r['setting']}" for r in rows})
    print(f"| candidate | {' | '.join(columns)} | mean diff to {against} | min model norm "
          "| cpu s / fit |")
    print("|---" * (len(columns) + 4) + "|")
    scores = []
    for label in list(candidates) + list(BASELINES):
        mine = [r for r in rows if r["method"] == label]
        if not mine:
            continue
        cells = _cells(mine)
        line = f"| {label} | " + " | ".join(f"{cells[c]:.3f}" if c in cells else ""
                                            for c in columns)
        if label in BASELINES:
            print(line + " | | | |")
            continue
        diffs = [r["macro_f1"] - ref[(r["data"], r["seed"], r["setting"])] for r in mine
                 if (r["data"], r["seed"], r["setting"]) in ref]
        crit = float(np.mean(diffs)) if diffs else float("nan")
        norm = min(r["min_norm"] for r in mine)
        cpu = float(np.mean([r["cpu_s"] for r in mine]))
        scores.append((crit, label, norm))
        print(line + f" | {crit:+.3f} | {norm:.2g} | {cpu:.1f} |")
    # only candidates at the estimator's 50 rounds (tied to the private budget); the T 20
    # rows show what fewer rounds would give
    valid = [s for s in scores if s[2] >= ZERO_MODEL and np.isfinite(s[0])
             and candidates[s[1]].get("n_rounds") == 50]
    if valid and against == "Pooled LogReg":
        top = max(s[0] for s in valid)
        best = next(s for s in valid if s[0] >= top - TIE)  # first listed among the ties
        print(f"\nselected: {best[1]} ({candidates[best[1]]}), criterion {best[0]:+.3f} "
              f"(best {top:+.3f}; ties within {TIE})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--datasets", nargs="+", default=["chile", "wvs"])
    parser.add_argument("--candidates", default="grid", choices=list(CANDIDATES))
    parser.add_argument("--only", nargs="*", help="run only these candidate labels")
    parser.add_argument("--uci", action="store_true", help="the paper-protocol guard")
    parser.add_argument("--out", help="append JSON lines here (and summarize all of them)")
    parser.add_argument("--summarize", action="store_true", help="only summarize --out")
    args = parser.parse_args()
    candidates = CANDIDATES[args.candidates]
    unknown = sorted(set(args.only or ()) - set(candidates))
    if unknown:  # a misspelt label would run nothing of it, silently
        parser.error(f"--only: no candidate {unknown} in --candidates {args.candidates}; "
                     f"known: {list(candidates)}")
    run = {k: v for k, v in candidates.items() if not args.only or k in args.only}
    rows = []
    if not args.summarize:
        gen = (uci_rows(args.seeds, run) if args.uci
               else real_rows(args.datasets, args.seeds, run))
        for row in gen:
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
    if args.out:
        with open(args.out, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh]
        rows = [r for r in rows if r["seed"] in args.seeds]
    summarize(rows, candidates)


if __name__ == "__main__":
    main()
