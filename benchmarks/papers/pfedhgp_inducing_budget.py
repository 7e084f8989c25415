"""Where the PFedHGP Table 2 fit loses to the Bayes oracle: the inducing budget (not a test).

Fits "Full (cavi)" of the Table 2 benchmark (``skfed.benchmark._pfedhgp``: 6
clients, 4 outputs, 50 rows each, ILMM rank 2, 20 rounds, 10 local steps;
the very estimator of the benchmark's "Full (cavi)" row, so the first variant
reproduces that row) on the data of ``run(seed, "full")`` with the paper's
inducing budget (M = M_i = 25) and with larger budgets or more rounds, and
prints the client-averaged metrics beside the Bayes oracle of
``benchmarks/papers/pfedhgp_oracle.py`` (exact posterior under the true model, same
data). Fit time is wall clock (fit and predict).

Run: ``python benchmarks/papers/pfedhgp_inducing_budget.py [--scenario A] [--seeds 0-3]``.
"""

import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np

from skfed.benchmark._pfedhgp import SIZES, _metrics, _models
from skfed.datasets import make_hierarchical_gp

VARIANTS = {
    "paper budget (M=25, M_i=25, 20 rounds)": {},
    "M_i=50": dict(n_inducing_local=50),
    "60 rounds": dict(n_rounds=60),
    "M_i=50, M=50": dict(n_inducing_local=50, n_inducing_global=50),
}
KEYS = ("rmse", "nll", "crps", "cov95", "width95", "coverr")


def _oracle():
    path = Path(__file__).resolve().parent / "pfedhgp_oracle.py"
    spec = importlib.util.spec_from_file_location("pfedhgp_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default="A", choices=["A", "B", "D"])
    parser.add_argument("--seeds", default="0-3", help="a range a-b or a comma list")
    args = parser.parse_args()
    if "-" in args.seeds:
        lo, hi = map(int, args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
    size = SIZES["full"]
    oracle = _oracle()
    rows = {name: [] for name in [*VARIANTS, "Bayes oracle (pooled)"]}
    for seed in seeds:
        data_kw = dict(n_clients=size["n_clients"], n_outputs=size["n_outputs"],
                       n_train=size["n_train"], n_test=size["n_test"], scenario=args.scenario,
                       random_state=seed)
        data = make_hierarchical_gp(**data_kw)
        # the benchmark's grid box (pooled training range), as in run(seed, "full")
        bounds = (data.X_train.min(axis=0), data.X_train.max(axis=0))
        for name, kw in VARIANTS.items():
            # Table 2's "Full (cavi)" estimator, with the variant's changes
            model = _models(size, bounds)["Full (cavi)"]().set_params(**kw)
            tic = time.perf_counter()
            model.fit(data.X_train, data.y_train, groups=data.groups_train)
            mean, cov = model.predict(data.X_test, groups=data.groups_test, return_cov=True)
            std = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
            rows[name].append({**_metrics(data, mean, std, cov), "elbo": float(model.elbo_[-1]),
                               "fit_time_s": time.perf_counter() - tic})
            print(seed, name, {k: round(v, 3) for k, v in rows[name][-1].items()}, flush=True)
        truth = oracle.generator_truth(**data_kw)
        mean, cov, _ = oracle.oracle_predict(truth, pooled=True)
        std = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
        rows["Bayes oracle (pooled)"].append(_metrics(truth.data, mean, std, cov))
    keys = KEYS + ("elbo", "fit_time_s")
    print(f"\nscenario {args.scenario}, seeds {args.seeds} (means over seeds)\n")
    print("| fit | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, rs in rows.items():
        cells = [f"{np.mean([r[k] for r in rs]):.3f}" if k in rs[0] else "-" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
