"""PFedHGPRegressor's per-site linear trend and ARD lengthscales (issue 14).

Question: at seed 100 PFedHGP misses its seen-site targets on sleepstudy
(the truth is a straight line per subject: a random slope; 95% coverage
0.889), ChickWeight (6.07 vs Local GPR 5.51) and Produc (0.0303 vs 0.0286).
Does what a statistician would add first help: (1) a per-site linear
component, ``site_trend="linear"`` (each client's affine deviation from the
pooled linear mean, a random intercept and slope by ridge on the client's own
rows, with its posterior variance in the predictive variance; the GP blocks
model what is left); (2) one lengthscale per feature, ``ard=True``?

Protocol and criterion: those of ``benchmarks/defaults/pfedhgp_mean.py`` (its
``measure`` and ``summary`` are reused unchanged), on the selection split
seeds 0, 1, 2 only, disjoint from the reported seed 100: the score of a
candidate is the mean over (data set, seed) of ``seen RMSE / best Ridge seen
RMSE + new RMSE / Pooled Ridge new RMSE`` (lower is better), among
candidates whose mean seen-site 95% coverage is in [0.90, 0.98] on every data
set; a candidate replaces the current default (``mean_function="linear"``,
``site_trend="none"``, ``ard=False``) only if its score is lower by more than
0.5%, on every data set of ``pfedhgp_mean.DATASETS``.

Run (appends CSV rows to ``--out``; prints the summary of what it holds)::

    PYTHONPATH=. python benchmarks/defaults/pfedhgp_local_linear.py --out pfedhgp_local_linear.csv \
        --datasets sleepstudy chickweight produc
    PYTHONPATH=. python benchmarks/defaults/pfedhgp_local_linear.py --out pfedhgp_local_linear.csv \
        --summary
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pfedhgp_mean as base  # noqa: E402

# "linear (default)" is the default at the time of the measurement, ard=False;
# "ard" won by the criterion above and is the default since (ard=True)
CANDIDATES = {
    "linear (default)": dict(ard=False),
    "site_trend=linear": dict(site_trend="linear", ard=False),
    "ard": dict(ard=True),
}


def main():
    # the protocol of pfedhgp_mean, with this question's candidates
    base.CANDIDATES.clear()
    base.CANDIDATES.update(CANDIDATES)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="pfedhgp_local_linear.csv")
    parser.add_argument("--datasets", nargs="*", default=list(base.DATASETS))
    parser.add_argument("--seeds", nargs="*", type=int, default=list(base.SEEDS))
    parser.add_argument("--models", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args()
    if not args.summary:
        base.measure(args.out, args.datasets, args.seeds, args.models)
    base.summary(args.out)


if __name__ == "__main__":
    main()
