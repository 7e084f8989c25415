"""Where does the private DP-Fed DRO Table 1 shortfall come from? (issue 16 diagnostic)

A diagnostic, not a new table. On Iris and Wine, for every seed, the private rows of
Table 1 (DP-Fed DRO with the paper's accountant, eps=0.5/round, delta=1e-6, T=50; its
PLD row, noise calibrated to the total (3.7299, 1e-6); DP-Fed ERM; DP-Fed SGD) and the
non-private Centralized DRO are refitted with **fixed hyperparameters** while ONE
factor of the data protocol is changed at a time:

* ``split`` (client split; scaling and flips as the protocol):
  ``dirichlet`` (ours: ``dirichlet_client_split(concentration=0.5)``, all classes on
  every client, unequal sizes), ``dominant70`` / ``dominant50`` (equal-size clients,
  70% / 50% of each client's rows from one dominant class ``g mod K``, every class on
  every client: the paper's pump split, Sec. 7.1), ``stratified`` (equal-size clients
  with the pooled class mix: no imbalance, a reference);
* ``norm`` (row scaling after min-max with training statistics): ``clip`` (ours:
  ``x / max(1, ||x||)``), ``unit`` (``x / ||x||`` for every row), ``globalmax`` (every
  row divided by the largest training-row norm, test rows then clipped), and
  ``centered`` (min-max to [-1, 1], then clip: *not* the paper's text, a check of the
  no-intercept explanation of the Iris ceiling);
* ``flips``: ``on`` (ours: 10% of training labels) or ``off``;
* ``model`` (an estimator option, not the paper's stated setting): ``intercept``
  (``fit_intercept=True`` for every model; the private sensitivities then use
  ``sqrt(L^2 + 1)``) or ``alpha_size`` (client weights proportional to client size
  instead of the paper's uniform ``alpha_g = 1/G``).

The baseline cell (dirichlet, clip, flips on) is exactly ``_uci_split`` (checked), and
with ``--hparams cv`` at noise repetition 0 it reproduces the Table 1 rows.

Hyperparameters (``--hparams``): ``cv`` takes, per seed and data set, the selections of
the Table 1 run's own 5-fold CV recorded in ``doc/results/dp_fed_dro_table1.jsonl``
(DP-Fed ERM's ``c_w`` is recomputed on each variant's training rows as the protocol
does); ``pump`` uses the paper's Sec. 7.1 values for every seed (DP-Fed DRO kappa=0.5,
r=0.1, c_M=2, c_lambda=6; DP-Fed ERM reg=1e-4; DP-Fed SGD eta=8, reg=1e-6; Centralized
DRO kappa=2, r=1e-2, the non-private Fed DRO's); ``recv`` reruns the Table 1 protocol's
5-fold within-client CV (``_cv_select``, the same grids) on each variant's own training
rows (about 30x the cost; use ``--only`` to pick cells). Noise repetitions (``--reps``): the
private models' noise seed is ``seed + 1000 * rep`` (rep 0 is Table 1's); data, split
and flips depend on the seed only.

Criterion: test macro-F1, mean over seeds (each seed averaged over its noise
repetitions), and the paired difference from the baseline cell with its standard
error over seeds. ``--oracle`` adds the Centralized DRO's test-set oracle over the
paper's 16 (kappa, r) points under each scaling and flip variant (an upper bound on
any tuning, as ``benchmarks/papers/dro_uci_ceiling.py``); ``--nonprivate`` adds Table 1's
non-private Fed DRO (rho=0.01, T=100, the Centralized DRO's (kappa, r)) in the cells
it names (every cell without a value; 5-15 s a fit).
Each private row at rep 0 also records the noise standard deviation that reaches the
consensus per entry and round and (ADMM models) the smallest client's step size
``eta_g`` over the largest's.

Run (one process, one BLAS thread)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 \\
        python benchmarks/papers/dro_private_gap.py \\
        --datasets iris wine --seeds 0 1 2 3 4 5 6 7 8 9 --reps 5 --hparams cv --oracle \\
        --nonprivate split=dirichlet split=dominant70 model=alpha_size --out gap_cv.jsonl
    python benchmarks/papers/dro_private_gap.py --summarize gap_cv.jsonl    # every cell
    python benchmarks/papers/dro_private_gap.py --compact gap_cv.jsonl --hparams cv  # the doc's
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

from scipy.stats import spearmanr  # noqa: E402
from sklearn.metrics import f1_score  # noqa: E402
from sklearn.model_selection import StratifiedKFold, train_test_split  # noqa: E402
from sklearn.preprocessing import MinMaxScaler  # noqa: E402

from skfed.benchmark._dp_fed_dro import (  # noqa: E402
    GRIDS,
    TABLE1,
    UCI_ADMM,
    UCI_PRIVACY,
    UCI_ROUNDS,
    UCI_TOTAL,
    _c_w,
    _cv_select,
    _uci_split,
)
from skfed.datasets import dirichlet_client_split, flip_labels, load_uci  # noqa: E402
from skfed.linear_model import (  # noqa: E402
    CentralizedDROClassifier,
    DPFedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
)
from skfed.preprocessing import NormClipper, make_minmax_l2_pipeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TABLE1_ROWS = ROOT / "doc" / "results" / "dp_fed_dro_table1.jsonl"
G = 4
BASE = dict(split="dirichlet", norm="clip", flips="on")
# one factor at a time from the baseline
VARIANTS = ([("split", v) for v in ("dirichlet", "dominant70", "dominant50", "stratified")]
            + [("norm", v) for v in ("unit", "globalmax", "centered")]
            + [("flips", "off")]
            + [("model", "intercept"), ("model", "alpha_size")])
# the "model" factor changes an estimator option instead of the data (not the paper's
# stated setting): a fitted intercept (constant feature, intercept_scaling=1; the
# sensitivities use sqrt(L^2 + 1)) or client weights alpha_g proportional to size
MODEL_KW = {"intercept": dict(fit_intercept=True), "alpha_size": dict(alpha="size")}
PLD = "DP-Fed DRO (PLD, eps_total 3.73)"
PRIVATE = ("DP-Fed DRO", PLD, "DP-Fed ERM", "DP-Fed SGD")
PUMP = {  # the paper's Sec. 7.1 values
    "DP-Fed DRO": dict(kappa=0.5, radius=0.1, c_M=2.0, c_lambda=6.0),
    PLD: dict(kappa=0.5, radius=0.1, c_M=2.0, c_lambda=6.0),
    "DP-Fed ERM": dict(reg=1e-4),
    "DP-Fed SGD": dict(learning_rate=8.0),
    "Centralized DRO": dict(kappa=2.0, radius=1e-2),
}


def dominant_split(y, fraction, rng):
    """Equal-size clients (sizes differ by at most 1); client ``g`` takes
    ``round(fraction * size)`` rows of class ``g mod K`` (fewer if the class runs out,
    then its rows go to the other clients), one row of every other class, and the rest
    at random from what is left, so every client holds every class."""
    classes = np.unique(y)
    n = y.size
    sizes = np.full(G, n // G) + (np.arange(G) < n % G)
    for _ in range(1000):
        pools = {k: list(rng.permutation(np.flatnonzero(y == k))) for k in classes}
        groups = np.full(n, -1, dtype=np.int64)
        for g in range(G):  # one row of every class first
            for k in classes:
                groups[pools[k].pop()] = g
        for g in range(G):
            dom = classes[g % classes.size]
            take = min(int(round(fraction * sizes[g])) - 1, len(pools[dom]))
            for _ in range(max(take, 0)):
                groups[pools[dom].pop()] = g
        rest = list(rng.permutation(np.flatnonzero(groups < 0)))
        for g in range(G):
            need = sizes[g] - np.sum(groups == g)
            for _ in range(max(need, 0)):
                groups[rest.pop()] = g
        if not rest and all(np.unique(y[groups == g]).size == classes.size
                            for g in range(G)):
            return groups
    raise RuntimeError("no feasible dominant split")


def prepare(name, seed, split="dirichlet", norm="clip", flips="on"):
    """``_uci_split`` with one factor changed (the same draws otherwise)."""
    X, y = load_uci(name)
    _, y = np.unique(y, return_inverse=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y,
                                              random_state=seed)
    if norm in ("clip", "unit"):
        prep = make_minmax_l2_pipeline(mode="clip" if norm == "clip" else "normalize")
        prep.fit(X_tr)
        X_tr, X_te = prep.transform(X_tr), prep.transform(X_te)
    elif norm == "globalmax":
        mm = MinMaxScaler().fit(X_tr)
        X_tr, X_te = mm.transform(X_tr), mm.transform(X_te)
        scale = np.linalg.norm(X_tr, axis=1).max()
        X_tr = X_tr / scale
        X_te = NormClipper().fit(X_tr).transform(X_te / scale)
    elif norm == "centered":
        mm = MinMaxScaler(feature_range=(-1, 1)).fit(X_tr)
        clip = NormClipper().fit(X_tr)
        X_tr, X_te = clip.transform(mm.transform(X_tr)), clip.transform(mm.transform(X_te))
    else:
        raise ValueError(f"norm {norm!r}")
    if split == "dirichlet":
        groups = dirichlet_client_split(y_tr, G, concentration=0.5, random_state=seed)
    elif split.startswith("dominant"):
        groups = dominant_split(y_tr, int(split[8:]) / 100, np.random.RandomState(seed))
    elif split == "stratified":
        groups = np.empty(y_tr.size, dtype=np.int64)
        for g, (_, idx) in enumerate(StratifiedKFold(G, shuffle=True, random_state=seed)
                                     .split(X_tr, y_tr)):
            groups[idx] = g
    else:
        raise ValueError(f"split {split!r}")
    if flips == "on":
        y_tr, _ = flip_labels(y_tr, 0.1, random_state=seed)
    return X_tr, y_tr, groups, X_te, y_te


def recorded_params():
    """``{(data set, seed, method): params}`` of the Table 1 run's CV."""
    out = {}
    for line in TABLE1_ROWS.read_text().splitlines():
        r = json.loads(line)
        out.setdefault((r["setting"], r["seed"], r["method"]), r["params"])
    return out


def pld_round_epsilon():
    """The per-round budget of Table 1's PLD row: ``DPFedDROClassifier(**UCI_TOTAL)``
    calibrates the noise multipliers with the PLD accountant (about 1 s per fit, since
    every fit calibrates anew); the same multipliers and step sizes follow from the
    paper's accountant at the per-round epsilon ``sqrt(eps_M^2 + eps_lambda^2)`` of that
    fit (0.5 -> 0.59), so the PLD row is refitted at that epsilon (checked: equal
    coefficients)."""
    X, y, groups, _, _ = _uci_split("iris", 0)
    kw = dict(n_rounds=UCI_ROUNDS["full"]["private"], random_state=0, kappa=1.0,
              radius=0.02, c_M=2.0, c_lambda=1.0, **UCI_ADMM)
    ref = DPFedDROClassifier(**UCI_TOTAL, **kw).fit(X, y, groups=groups)
    eps = float(np.hypot(*ref.epsilon_round_))
    same = DPFedDROClassifier(epsilon=eps, delta=UCI_TOTAL["target_delta"], **kw)
    assert np.array_equal(same.fit(X, y, groups=groups).coef_, ref.coef_)
    return eps


PLD_EPSILON = None  # set in main()


def make(method, params, random_state, c_w=None, model_kw=None):
    T = UCI_ROUNDS["full"]["private"]
    kw = dict(model_kw or {})
    if method == "DP-Fed DRO":
        return DPFedDROClassifier(n_rounds=T, random_state=random_state,
                                  **UCI_PRIVACY, **{**UCI_ADMM, **kw}, **params)
    if method == PLD:
        return DPFedDROClassifier(n_rounds=T, random_state=random_state,
                                  epsilon=PLD_EPSILON, delta=UCI_TOTAL["target_delta"],
                                  **{**UCI_ADMM, **kw}, **params)
    if method == "DP-Fed ERM":
        return DPFedERMClassifier(n_rounds=T, c_w=c_w, random_state=random_state,
                                  **UCI_PRIVACY, **kw, **params)
    if method == "DP-Fed SGD":
        return DPFedSGDClassifier(n_rounds=T, reg=1e-6, random_state=random_state,
                                  **UCI_PRIVACY, **kw, **params)
    if method == "Non-Private Fed DRO":  # Table 1's row: rho=0.01, T=100
        return DPFedDROClassifier(epsilon=None, standardize=False,
                                  n_rounds=UCI_ROUNDS["full"]["np"],
                                  **{**UCI_ADMM, "rho": UCI_ROUNDS["full"]["np_rho"], **kw},
                                  **params)
    if method == "Centralized DRO":
        return CentralizedDROClassifier(**{k: v for k, v in kw.items() if k != "alpha"},
                                        **params)
    raise ValueError(method)


def f1(est, X, y, groups, X_te, y_te):
    est.fit(X, y, groups=groups)
    return float(f1_score(y_te, est.predict(X_te), average="macro"))


def mechanism(est):
    """What the split changes in a private fit: the standard deviation of the noise
    that reaches the consensus per entry and round, ``sqrt(sum_g alpha_g^2
    sigma_g^2)`` (DP-Fed DRO: its ``M`` release), and for the linearized-ADMM models
    the smallest client's step size over the largest's (``eta_g`` of Theorem 3)."""
    sigma = getattr(est, "noise_sigma_M_", None)
    if sigma is None:
        sigma = est.noise_sigma_
    weights = getattr(est, "client_weights_", None)
    if weights is None:
        weights = np.full(sigma.size, 1.0 / sigma.size)
    out = {"consensus_sigma": float(np.sqrt(np.sum(weights ** 2 * sigma ** 2)))}
    eta = getattr(est, "eta_", None)
    if eta is not None:
        out["eta_min_over_max"] = float(np.min(eta) / np.max(eta))
    return out


def run_cell(name, seed, factor, variant, hparams, reps, oracle, recorded,
             nonprivate=False):
    cell = {**BASE, factor: variant} if factor != "model" else dict(BASE)
    model_kw = MODEL_KW.get(variant) if factor == "model" else None
    X, y, groups, X_te, y_te = prepare(name, seed, **cell)
    if cell == BASE:  # the baseline is the protocol itself
        ref = _uci_split(name, seed)
        assert all(np.array_equal(a, b) for a, b in zip((X, y, groups, X_te, y_te), ref))
    sizes = np.bincount(groups, minlength=G)
    common = dict(dataset=name, seed=seed, factor=factor, variant=variant, hparams=hparams,
                  min_client=int(sizes.min()), max_client=int(sizes.max()))
    c_w = _c_w(X, y, groups)
    if hparams == "recv":  # the Table 1 protocol's CV, rerun on this variant's rows
        grids = {**GRIDS, PLD: GRIDS["DP-Fed DRO"], "Centralized DRO": GRIDS["NP"]}
        params = {m: _cv_select(lambda p, m=m: make(m, p, seed, c_w, model_kw), grids[m],
                                X, y, groups, seed)
                  for m in (*PRIVATE, "Centralized DRO")}
    else:
        params = {m: (recorded[(name, seed, m)] if hparams == "cv" else PUMP[m])
                  for m in (*PRIVATE, "Centralized DRO")}
    common["params"] = {m: {k: float(v) for k, v in p.items()} for m, p in params.items()}
    rows = []
    for method in PRIVATE:
        for rep in range(reps):
            est = make(method, params[method], seed + 1000 * rep, c_w, model_kw)
            rows.append({**common, "method": method, "rep": rep,
                         "macro_f1": f1(est, X, y, groups, X_te, y_te)})
            if rep == 0:
                rows[-1].update(mechanism(est))
    if nonprivate:  # the federated optimum moves with the split (Table 1's (kappa, r))
        rows.append({**common, "method": "Non-Private Fed DRO", "rep": 0,
                     "macro_f1": f1(make("Non-Private Fed DRO", params["Centralized DRO"],
                                         None, model_kw=model_kw), X, y, groups, X_te, y_te)})
    # the pooled model ignores the split and the client weights
    if (factor != "split" or variant == "dirichlet") and variant != "alpha_size":
        rows.append({**common, "method": "Centralized DRO", "rep": 0,
                     "macro_f1": f1(make("Centralized DRO", params["Centralized DRO"], None,
                                         model_kw=model_kw), X, y, groups, X_te, y_te)})
        if oracle:
            scores = [f1(make("Centralized DRO", p, None, model_kw=model_kw),
                         X, y, groups, X_te, y_te) for p in GRIDS["NP"]]
            rows.append({**common, "method": "Centralized DRO, test oracle", "rep": 0,
                         "macro_f1": max(scores)})
    return rows


def compact(paths, hparams="cv"):
    """One line per cell: mean over seeds (paired difference from the baseline) of
    every private method on each data set, for the doc."""
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]
    per_seed = defaultdict(list)
    for r in rows:
        per_seed[(r["hparams"], r["dataset"], r["method"], r["factor"], r["variant"],
                  r["seed"])].append(r["macro_f1"])
    cells = defaultdict(dict)
    for (*key, seed), v in per_seed.items():
        cells[tuple(key)][seed] = float(np.mean(v))
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = [m for m in (*PRIVATE, "Non-Private Fed DRO", "Centralized DRO",
                           "Centralized DRO, test oracle")
               if any(r["method"] == m for r in rows)]
    for n in names:
        have = [m for m in methods if any(k[1] == n and k[2] == m for k in cells)]
        print(f"\n{n} ({hparams})\n")
        print("| cell | " + " | ".join(have) + " |")
        print("|---|" + "---|" * len(have))
        print("| paper | " + " | ".join(
            f"{TABLE1[n].get(m.split(' (PLD')[0].split(',')[0], float('nan')):.3f}"
            for m in have) + " |")
        for factor, variant in VARIANTS:
            out = []
            for m in have:
                v = cells.get((hparams, n, m, factor, variant))
                base = (cells.get((hparams, n, m, "split", "dirichlet"))
                        or cells.get(("cv", n, m, "split", "dirichlet")))
                if not v:
                    out.append("")
                    continue
                mean = np.mean(list(v.values()))
                if (factor, variant) == ("split", "dirichlet") or not base:
                    out.append(f"{mean:.3f}")
                else:
                    d = np.mean([v[s] - base[s] for s in v if s in base])
                    out.append(f"{mean:.3f} ({d:+.3f})")
            if any(out):
                print(f"| {factor} = {variant} | " + " | ".join(out) + " |")


def per_seed_csv(paths, out):
    """One row per (hparams, data set, method, cell, seed): macro-F1 averaged over the
    noise repetitions, at rep 0, and the rep-0 mechanism numbers (the committed
    record; the JSON lines of a run hold every repetition)."""
    import csv

    groups = defaultdict(list)
    for line in (line for p in paths for line in Path(p).read_text().splitlines()):
        r = json.loads(line)
        groups[(r["hparams"], r["dataset"], r["method"], r["factor"], r["variant"],
                r["seed"])].append(r)
    fields = ["hparams", "dataset", "method", "factor", "variant", "seed", "n_reps",
              "macro_f1_mean", "macro_f1_rep0", "min_client", "max_client",
              "consensus_sigma", "eta_min_over_max"]
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(fields)
        for key, rs in groups.items():
            r0 = next(r for r in rs if r["rep"] == 0)
            w.writerow([*key, len(rs), f"{np.mean([r['macro_f1'] for r in rs]):.6f}",
                        f"{r0['macro_f1']:.6f}", r0["min_client"], r0["max_client"],
                        *(f"{r0[k]:.6g}" if k in r0 else "" for k in fields[-2:])])


def summarize(paths):
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]
    # per (hparams, data, method, factor, variant, seed): mean over noise repetitions
    per_seed = defaultdict(list)
    rep0 = defaultdict(list)
    sizes = defaultdict(list)
    sigma = defaultdict(list)
    eta = defaultdict(list)
    for r in rows:
        key = (r["hparams"], r["dataset"], r["method"], r["factor"], r["variant"])
        per_seed[key + (r["seed"],)].append(r["macro_f1"])
        if r["rep"] == 0:
            rep0[key].append(r["macro_f1"])
        if r["method"] == "DP-Fed DRO" and r["rep"] == 0:
            sizes[(r["dataset"], r["factor"], r["variant"])].append(
                (r["min_client"], r["max_client"]))
        if "consensus_sigma" in r:
            sigma[key].append(r["consensus_sigma"])
        if "eta_min_over_max" in r:
            eta[key].append(r["eta_min_over_max"])
    cells = defaultdict(dict)
    for (*key, seed), v in per_seed.items():
        cells[tuple(key)][seed] = float(np.mean(v))
    print("| hparams | data | method | factor = variant | client sizes (min-max) "
          "| macro-F1 (mean ± sd over seeds) | minus baseline (± s.e.) | rep 0 | paper "
          "| consensus noise sd | eta min/max |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    order = {fv: i for i, fv in enumerate(VARIANTS)}
    for key in sorted(cells, key=lambda k: (k[0], k[1], k[2] != "DP-Fed DRO", k[2],
                                            order.get((k[3], k[4]), 99))):
        hp, name, method, factor, variant = key
        v = cells[key]
        # ``recv`` at the baseline cell is the Table 1 run's own CV, i.e. ``cv``'s baseline
        base = (cells.get((hp, name, method, "split", "dirichlet"))
                or cells.get(("cv", name, method, "split", "dirichlet"), {}))
        seeds = sorted(set(v) & set(base))
        vals = np.array([v[s] for s in sorted(v)])
        if (factor, variant) == ("split", "dirichlet"):
            label, diff = "baseline (dirichlet, clip, flips on)", "-"
        else:
            label = f"{factor} = {variant}"
            d = np.array([v[s] - base[s] for s in seeds])
            diff = (f"{d.mean():+.3f} ± {d.std(ddof=1) / np.sqrt(d.size):.3f}"
                    if d.size > 1 else "")
        sz = sizes.get((name, factor, variant), [])
        sz = f"{min(a for a, _ in sz)}-{max(b for _, b in sz)}" if sz else ""
        paper = TABLE1[name].get(method.split(" (PLD")[0].split(",")[0])
        print(f"| {hp} | {name} | {method} | {label} | {sz} | {vals.mean():.3f} ± "
              f"{vals.std(ddof=1) if vals.size > 1 else 0:.3f} | {diff} | "
              f"{np.mean(rep0[key]):.3f} | {'' if paper is None else f'{paper:.3f}'} | "
              f"{f'{np.mean(sigma[key]):.4f}' if sigma.get(key) else ''} | "
              f"{f'{np.mean(eta[key]):.2f}' if eta.get(key) else ''} |")
    # does a seed's smallest client predict its private score? (baseline cells)
    for (hp, name, method, factor, variant), v in cells.items():
        if (factor, variant) != ("split", "dirichlet") or method not in PRIVATE:
            continue
        smallest = {r["seed"]: r["min_client"] for r in rows
                    if (r["hparams"], r["dataset"], r["factor"], r["variant"])
                    == (hp, name, factor, variant)}
        seeds = sorted(v)
        rho = spearmanr([smallest[s] for s in seeds], [v[s] for s in seeds])[0]
        print(f"{hp} / {name} / {method}: Spearman(smallest client, macro-F1) over "
              f"baseline seeds = {rho:+.2f}")
    n = {(r["hparams"], r["dataset"]): set() for r in rows}
    for r in rows:
        n[(r["hparams"], r["dataset"])].add(r["seed"])
    for k, s in n.items():
        print(f"{k}: seeds {sorted(s)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="*", default=["iris", "wine"])
    parser.add_argument("--seeds", nargs="*", type=int, default=list(range(10)))
    parser.add_argument("--reps", type=int, default=3, help="noise draws per seed")
    parser.add_argument("--hparams", default="cv", choices=["cv", "pump", "recv"])
    parser.add_argument("--oracle", action="store_true",
                        help="add the Centralized DRO's test-set oracle over its grid")
    parser.add_argument("--nonprivate", nargs="*",
                        help="add the non-private Fed DRO (Table 1's ADMM) in these "
                             "factor=variant cells (no value: every cell)")
    parser.add_argument("--only", nargs="*", help="factor=variant cells to run")
    parser.add_argument("--out", default="dro_private_gap.jsonl")
    parser.add_argument("--summarize", nargs="*")
    parser.add_argument("--csv", help="with --summarize: write the per-seed record here")
    parser.add_argument("--compact", nargs="*", help="one line per cell (--hparams picks)")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        if args.csv:
            per_seed_csv(args.summarize, args.csv)
        return
    if args.compact:
        compact(args.compact, args.hparams)
        return
    recorded = recorded_params() if args.hparams == "cv" else None
    global PLD_EPSILON
    PLD_EPSILON = pld_round_epsilon()
    print(f"PLD row: per-round epsilon {PLD_EPSILON:.4f}", flush=True)
    variants = VARIANTS if not args.only else [tuple(c.split("=")) for c in args.only]
    for name in args.datasets:
        for seed in args.seeds:
            t0 = time.perf_counter()
            rows = []
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for factor, variant in variants:
                    rows += run_cell(name, seed, factor, variant, args.hparams, args.reps,
                                     args.oracle, recorded,
                                     args.nonprivate is not None
                                     and (not args.nonprivate
                                          or f"{factor}={variant}" in args.nonprivate))
            took = time.perf_counter() - t0
            with open(args.out, "a") as fh:
                for r in rows:
                    fh.write(json.dumps({**r, "seconds": took}) + "\n")
            print(f"{name} seed {seed}: {took:.0f} s", flush=True)


if __name__ == "__main__":
    main()
