"""Privacy-utility curves of DPFedDROClassifier on raw real data (issue 29, item 6).

The private default at total epsilon in {0.5, 1, 2, 4, 8, 16} (delta 1e-6, PLD
accountant, public class labels) and the non-private fit, on WVS and Chile
(``load_multilevel``, raw features), both protocols of
``skfed.benchmark._real_data`` (seen-site: each site's own adaptation; new-site:
the shared model), split and model seeds 100-102 (the reported seeds; nothing
is selected here). Macro-F1 and log loss, mean over the 5 folds.

Run (one process; CSV rows appended), then the figure and the table; the
"none" points (no privacy) are read from the ``results.csv`` of ``skfed
benchmark --full --experiments real_wvs real_chile --seeds 3`` (the same
splits and seeds), or fitted here with ``--candidates non-private``::

    python benchmarks/defaults/dro_privacy_utility.py --out dro_curve.csv
    python benchmarks/defaults/dro_privacy_utility.py --out dro_curve.csv \
        --plot doc/results/dro_privacy_utility.png --reference real-cls/results.csv
"""

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from dro_private_defaults import run  # noqa: E402

from skfed.benchmark._real_data import SEED_BASE  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
TABLE = {f"eps={e:g}": dict(target_epsilon=e) for e in EPSILONS}
TABLE["non-private"] = dict(epsilon=None)


#: the benchmark's label of the non-private fit (skfed.benchmark._real_data)
REFERENCE_METHOD = "DP-Fed DRO (non-private)"


def _reference_rows(path):
    """The non-private fit's rows of a ``skfed benchmark`` results.csv, as ours."""
    import pandas as pd

    ref = pd.read_csv(path)
    ref = ref[ref.method == REFERENCE_METHOD]
    ref = ref.pivot_table(index=["experiment", "setting", "seed"], columns="metric",
                          values="value").reset_index()
    ref["dataset"] = ref.experiment.str.replace("real_", "", regex=False)
    ref["candidate"] = "non-private"
    ref["seed"] = ref.seed + SEED_BASE  # the benchmark's seed 0 is split seed 100
    return ref[["dataset", "seed", "setting", "candidate", "macro_f1", "log_loss"]]


def plot(out, path, reference=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.read_csv(out)
    if reference is not None:
        df = pd.concat([df, _reference_rows(reference)], ignore_index=True)
    x = {label: (e if label != "non-private" else 2 * EPSILONS[-1])
         for label, e in zip(TABLE, EPSILONS + (None,))}
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.5), sharex=True)
    for j, metric in enumerate(("macro_f1", "log_loss")):
        for i, name in enumerate(("wvs", "chile")):
            ax = axes[j, i]
            for setting, marker in (("seen-site", "o"), ("new-site", "s")):
                sub = df[(df.dataset == name) & (df.setting == setting)]
                g = sub.groupby("candidate")[metric]
                labels = [lab for lab in TABLE if lab in g.groups]
                mean = np.array([g.get_group(lab).mean() for lab in labels])
                lo = np.array([g.get_group(lab).min() for lab in labels])
                hi = np.array([g.get_group(lab).max() for lab in labels])
                xs = np.array([x[lab] for lab in labels])
                err = np.maximum(0.0, [mean - lo, hi - mean])  # equal seeds: round-off
                ax.errorbar(xs, mean, yerr=err, marker=marker,
                            capsize=3, label=setting)
            ax.set_xscale("log", base=2)
            ax.set_xticks([*EPSILONS, 2 * EPSILONS[-1]],
                          [f"{e:g}" for e in EPSILONS] + ["none"])
            ax.set_title(f"{name}: {metric.replace('_', ' ')}")
            if j == 1:
                ax.set_xlabel("total epsilon (delta 1e-6)")
            ax.grid(alpha=0.3)
    axes[0, 0].legend()
    n_seeds = df.seed.nunique()
    fig.suptitle(f"DPFedDROClassifier on raw data: mean of {n_seeds} split seeds "
                 "(bars: range of the seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    table = df.pivot_table(index="candidate", columns=["dataset", "setting"],
                           values=["macro_f1", "log_loss"], aggfunc="mean")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.reindex([lab for lab in TABLE if lab in table.index]).round(4))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["wvs", "chile"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102])
    parser.add_argument("--candidates", nargs="+", default=list(TABLE))
    parser.add_argument("--out", default="dro_curve.csv")
    parser.add_argument("--plot", default=None, help="write the figure here, print the table")
    parser.add_argument("--reference", default=None,
                        help="results.csv of skfed benchmark with the non-private fit")
    args = parser.parse_args(argv)
    if args.plot:
        plot(args.out, args.plot, args.reference)
    else:
        run(args.datasets, args.seeds, args.candidates, args.out, table=TABLE)


if __name__ == "__main__":
    main()
