"""PFedHGPRegressor's closed-form optimizer: how the global mean is updated.

Question: with ``optimizer="cavi"`` the blockwise (coordinate-ascent) update
of ``q(u_g)`` given the clients' deviation and local means mixes slowly (the
deviation kernel ``phi k_g`` has the shape of ``k_g``, so the blocks are
strongly coupled and the clients' blocks absorb the shared trend); does the
joint update of all the means (``mean_update="joint"``: the clients send
their statistics with their own blocks integrated out, the same ELBO and
variational family) reach the optimum in the default 20 rounds?

Protocol (fixed): data ``skfed.datasets.load_multilevel`` ChickWeight,
sleepstudy and produc. For each split seed ``s``: seen-site accuracy by
``skfed.model_selection.WithinClientKFold(5, small_clients="train",
shuffle=True, random_state=s)`` and new-site accuracy by
``sklearn.model_selection.GroupKFold(5, shuffle=True, random_state=s)``;
RMSE of the pooled out-of-fold predictions, 95% coverage
(``|y - mean| <= 1.96 std``) of the seen-site and of the new-site
predictions, ELBO of a fit on all rows and its process time (one core).
Baseline: ``skfed.baselines.PooledEstimator(Ridge())``.

Criterion: seen-site RMSE no worse than the blockwise update at the
default rounds, new-site RMSE at most 1.05x Pooled Ridge's, seen-site
coverage in [0.90, 0.98], fit on all rows under 30 s; among the settings
meeting it, the fewest rounds. ``--phase select`` (split seed 1) compares
the candidates; ``--phase report`` (split seed 0) reports the chosen
default beside the old one.

Run: ``PYTHONPATH=. python benchmarks/defaults/pfedhgp_mixing.py --phase select``
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold

from skfed import PFedHGPRegressor
from skfed.baselines import PooledEstimator
from skfed.datasets import load_multilevel
from skfed.model_selection import WithinClientKFold

from pfedhgp_defaults import cv  # noqa: E402  (the same out-of-fold loop; sibling script)

PHASES = {"select": (1,), "report": (0,)}
DATASETS = ("chickweight", "sleepstudy", "produc")
CANDIDATES = {  # phase "select"
    "blockwise (old default)": {"mean_update": "blockwise"},
    "blockwise, 50 rounds": {"mean_update": "blockwise", "n_rounds": 50},
    "joint (default)": {},
    "joint, 40 rounds": {"n_rounds": 40},
    "joint, 60 rounds": {"n_rounds": 60},
}
REPORT = ("blockwise (old default)", "joint (default)")


def evaluate(make, X, y, g, seed, gp):
    seen = WithinClientKFold(5, small_clients="train", shuffle=True, random_state=seed)
    new = GroupKFold(5, shuffle=True, random_state=seed)
    out = {}
    for name, splitter in (("seen", seen), ("new", new)):
        mean, std = cv(make, X, y, g, list(splitter.split(X, y, g)), gp)
        done = ~np.isnan(mean)  # small_clients="train": a small client's rows are never tested
        err = y[done] - mean[done]
        out[name] = np.sqrt(np.mean(err**2))
        if gp:
            out[name + "_cov"] = np.mean(np.abs(err) <= 1.959964 * std[done])
    if gp:
        tic = time.process_time()
        m = make().fit(X, y, groups=g)
        out["fit_s"] = time.process_time() - tic
        out["elbo"] = m.elbo_[-1]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", choices=tuple(PHASES), default="report")
    parser.add_argument("--datasets", nargs="*", default=list(DATASETS))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    cands = CANDIDATES if args.phase == "select" else {k: CANDIDATES[k] for k in REPORT}
    models = {f"PFedHGP {name}": (lambda kw=kw: PFedHGPRegressor(inference="variational",
                                                                 random_state=0, **kw))
              for name, kw in cands.items()}
    models["Pooled Ridge"] = lambda: PooledEstimator(Ridge())
    keys = ("seen", "new", "seen_cov", "new_cov", "elbo", "fit_s")
    print(f"phase {args.phase}, split seed(s) {PHASES[args.phase]}")
    print("| data | model | seen RMSE | new RMSE | seen cov95 | new cov95 | ELBO | fit s |")
    print("|---|---|---|---|---|---|---|---|")
    for dname in args.datasets:
        d = load_multilevel(dname)
        X, y, g = np.asarray(d.data, dtype=float), np.asarray(d.target, dtype=float), d.groups
        for name, make in models.items():
            res = [evaluate(make, X, y, g, s, name.startswith("PFedHGP"))
                   for s in PHASES[args.phase]]
            cells = [f"{np.mean([r[k] for r in res]):.4g}" if k in res[0] else ""
                     for k in keys]
            print(f"| {dname} | {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
