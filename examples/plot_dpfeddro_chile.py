"""
===========================================================
DP-Fed DRO on raw survey data: privacy against accuracy
===========================================================

The Chile survey (``load_multilevel("chile")``): 2431 voters' intention in the
1988 plebiscite (``Y`` yes, ``N`` no, ``A`` abstain, ``U`` undecided) from
their age, sex, education, income, town size and support of the status quo,
in raw units (incomes in pesos, town sizes in inhabitants). Each of the 5
regions is one site. :class:`skfed.DPFedDROClassifier` trains one multiclass
linear model by federated ADMM, robust to shifts of the regions'
distributions (Wasserstein DRO), with differential privacy per voter.

Nothing is scaled by hand: a private fit scales the features itself from
noisy histograms each region releases once (a share of the budget), and
each region then adapts the shared model on its own voters, an adaptation
it keeps (nothing more is sent, so the guarantee is unchanged). We fit it
at several total budgets and without privacy, and score each fit on the
held-out voters of every region, with the region's adaptation (seen
regions) and with the shared model alone (what a new region would get).
"""

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import f1_score, log_loss

from skfed import DPFedDROClassifier
from skfed.datasets import load_multilevel
from skfed.model_selection import WithinClientKFold

# SKFED_DOC_QUICK=1 (set by the test suite) runs a smaller version; unset, the full one
QUICK = os.environ.get("SKFED_DOC_QUICK") == "1"

X, y, groups = load_multilevel("chile", return_X_y=True)
train, test = next(WithinClientKFold(5, shuffle=True, random_state=0).split(X, y, groups))
# the survey's answer options are public: classes= keeps each region's set of answers
# (a function of its rows) out of the set-up exchange
classes = ["A", "N", "U", "Y"]
epsilons = [1.0, 4.0] if QUICK else [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
models = {eps: DPFedDROClassifier(target_epsilon=eps, classes=classes, random_state=0)
          for eps in epsilons}
models[None] = DPFedDROClassifier(epsilon=None, n_rounds=10 if QUICK else 50, random_state=0)

scores = {"adapted": {}, "shared": {}}
for eps, model in models.items():
    model.fit(X[train], y[train], groups=groups[train])
    for kind, g in (("adapted", groups[test]), ("shared", None)):
        scores[kind][eps] = (
            f1_score(y[test], model.predict(X[test], groups=g), average="macro"),
            log_loss(y[test], model.predict_proba(X[test], groups=g), labels=classes))

# %%
# Macro-F1 and log loss on the held-out voters against the total epsilon
# (delta 1e-6); "none" is the fit without privacy. One split, one seed:
# ``benchmarks/defaults/dro_privacy_utility.py`` averages three on both data sets.
xs = [*epsilons, 2 * epsilons[-1]]
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for ax, m, title in ((axes[0], 0, "macro-F1 (higher is better)"),
                     (axes[1], 1, "log loss (lower is better)")):
    for kind, marker in (("adapted", "o"), ("shared", "s")):
        ax.plot(xs, [scores[kind][e][m] for e in [*epsilons, None]], marker=marker,
                label={"adapted": "each region's adaptation",
                       "shared": "shared model (a new region)"}[kind])
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{e:g}" for e in epsilons] + ["none"])
    ax.set_xlabel("total epsilon")
    ax.set_title(title)
    ax.grid(alpha=0.3)
axes[1].axhline(np.log(4), color="gray", ls=":", label="uniform probabilities")
axes[0].legend()
axes[1].legend()
fig.tight_layout()

# %%
# What a private fit guarantees: ``privacy_spent_`` holds the total
# (epsilon, delta) per voter over everything each region released, and each
# kind of release with its noise and its share of the budget; the features'
# ranges the histograms gave are ``feature_range_``.
private = models[4.0]
spent = private.privacy_spent_
print("privacy spent (epsilon, delta):", round(spent["epsilon"], 3), spent["delta"])
for release in spent["releases"]:
    print(f"  {release['name']:>12}: {release['count']:2d} release(s), noise multiplier "
          f"{release['noise_multiplier']:.2f}, {release['share']:.0%} of the budget")
print("feature ranges (low, high):")
for name, low, high in zip(load_multilevel("chile").feature_names, *private.feature_range_):
    print(f"  {name:>12}: {low:10.4g} .. {high:10.4g}")
