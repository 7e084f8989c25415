"""How high can a linear DRO model go on the paper's UCI protocol? (Table 1 diagnosis)

For each seed, the paper's split (``skfed.benchmark._dp_fed_dro._uci_split``: 80/20,
min-max + l2 clipping, 10% flipped training labels; the client split does not matter
here) and ``CentralizedDROClassifier`` (the exact pooled LP, no ADMM) at each of the
paper's 16 (kappa, r) grid points. Reported, mean over seeds of test macro-F1:

* ``oracle``: the best grid point *on the test rows* of each seed, an upper bound on
  what any selection of (kappa, r) can give (and so on what CV can give, and on a
  converged Fed DRO, which solves nearly the same problem);
* ``grid mean``: the average over the 16 points.

Variants (one change each): the paper's protocol; ``+ intercept`` (a constant
feature, which the paper's model has not); ``clean labels`` (no flipped labels).

Run: ``python benchmarks/papers/dro_uci_ceiling.py --seeds 0 1 2 3 4 5 6 7 8 9``
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.metrics import f1_score
from sklearn.model_selection import train_test_split

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from skfed.benchmark._dp_fed_dro import GRIDS, _uci_split  # noqa: E402
from skfed.datasets import load_uci  # noqa: E402
from skfed.linear_model import CentralizedDROClassifier  # noqa: E402
from skfed.preprocessing import make_minmax_l2_pipeline  # noqa: E402


def clean_split(name, seed):
    """``_uci_split`` without the label flips (same rows, same scaling)."""
    X, y = load_uci(name)
    _, y = np.unique(y, return_inverse=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y,
                                              random_state=seed)
    prep = make_minmax_l2_pipeline().fit(X_tr)
    return prep.transform(X_tr), y_tr, prep.transform(X_te), y_te


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="*", default=["iris", "wine"])
    parser.add_argument("--seeds", nargs="*", type=int, default=list(range(10)))
    args = parser.parse_args()
    print("| data | variant | oracle over the grid | grid mean |")
    print("|---|---|---|---|")
    for name in args.datasets:
        for variant in ("paper protocol", "+ intercept", "clean labels"):
            best, mean = [], []
            for seed in args.seeds:
                if variant == "clean labels":
                    X, y, X_te, y_te = clean_split(name, seed)
                else:
                    X, y, _, X_te, y_te = _uci_split(name, seed)
                scores = [
                    f1_score(y_te, CentralizedDROClassifier(
                        fit_intercept=variant == "+ intercept", **p).fit(X, y).predict(X_te),
                        average="macro")
                    for p in GRIDS["NP"]
                ]
                best.append(max(scores))
                mean.append(np.mean(scores))
            print(f"| {name} | {variant} | {np.mean(best):.3f} | {np.mean(mean):.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
