"""PFedHGPRegressor's starting values and random effects on real grouped data (issue 27).

Question: on the windowed hierarchy of ``benchmarks/defaults/pfedhgp_windowed.py``
the default fit depends on its start: the per-site parts start as large as
the shared one (``init_variance_local=1``, ``init_phi=1``) and take the
signal before the global lengthscale has moved, and the mean-field ELBO does
not tell the better fits apart (so restarts chosen by ELBO do not help,
see ``doc/results/pfedhgp_start.md``). Do per-site parts that start small,
and/or a random intercept per site (``random_effects``), predict better on
real grouped data at the same protocol?

Protocol and criterion: those of ``benchmarks/defaults/pfedhgp_mean.py`` (selection
split seeds 0, 1, 2, disjoint from the reported seed 100; 5-fold seen-site
and new-site RMSE and 95% coverage; score = seen RMSE / best Ridge seen RMSE
+ new RMSE / Pooled Ridge new RMSE, lower is better). A candidate replaces
the default only if its mean score is lower by more than 0.5% on the (data
set, seed) pairs every candidate has, its mean seen-site coverage is in
[0.90, 0.98] on every data set, and its mean RMSE / oracle RMSE on the
windowed hierarchy (seeds 0-9) is not worse than the default's.

Run (appends to ``--out``; prints the summary)::

    python benchmarks/defaults/pfedhgp_start.py --out pfedhgp_start.csv
    python benchmarks/defaults/pfedhgp_start.py --out pfedhgp_start.csv --datasets sleepstudy produc
    python benchmarks/defaults/pfedhgp_start.py --out pfedhgp_start.csv --summary
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pfedhgp_convergence import read_cells  # noqa: E402
from pfedhgp_mean import BASELINES  # noqa: E402
from pfedhgp_mean import main as study_main  # noqa: E402

SMALL_START = dict(init_variance_local=0.1, init_phi=0.1)
# the defaults when this study ran, explicit (init_variance_local=None is 0.1 for 1-D y since)
FORMER = dict(init_variance_local=1.0)
CANDIDATES = {
    "former default": FORMER,
    "small site parts": SMALL_START,
    "small local variance": dict(init_variance_local=0.1),
    "random intercept": dict(random_effects="intercept", **FORMER),
    "random intercept, small site parts": dict(random_effects="intercept", **SMALL_START),
    # measured after the first-round and common-mode changes of random_effects
    "random intercept, new default": dict(random_effects="intercept", init_variance_local=0.1),
    "random slopes, new default": dict(random_effects="linear", init_variance_local=0.1),
    # ablation: do the per-site parts take shared signal (new-site RMSE of the full model
    # against the global part alone)?
    "global only": dict(components=("global",)),
    "no deviation, new default": dict(components=("global", "local"), init_variance_local=0.1),
}


def against_former(out):
    """Each candidate's mean score beside the former default's on the pairs both have."""
    rows, models = read_cells(out, CANDIDATES)

    def score(key):
        base = {b: rows[key[:2] + (b,)] for b in BASELINES}
        best_seen = min(float(b["seen-site"]["rmse"]) for b in base.values())
        return (float(rows[key]["seen-site"]["rmse"]) / best_seen
                + float(rows[key]["new-site"]["rmse"])
                / float(base["Pooled Ridge"]["new-site"]["rmse"]))

    cells = {k[:2] for k in rows if k[2] == "former default"}
    for model in models[1:]:
        pairs = sorted(k for k in cells if len(rows.get(k + (model,), {})) == 2)
        former = sum(score(k + ("former default",)) for k in pairs) / len(pairs)
        new = sum(score(k + (model,)) for k in pairs) / len(pairs)
        print(f"{model}: {new:.4f} against the former default's {former:.4f} "
              f"({100 * (new / former - 1):+.1f}%) on {len(pairs)} (data set, seed) pairs")


def main():
    args = study_main(CANDIDATES, __doc__, "pfedhgp_start.csv")
    against_former(args.out)


if __name__ == "__main__":
    main()
