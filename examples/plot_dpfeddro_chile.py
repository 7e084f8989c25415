"""
===============================================================
DP-Fed DRO: per-region confusion on the Chile plebiscite survey
===============================================================

The Chile survey (``load_multilevel("chile")``): 2431 voters' intention in the
1988 plebiscite (``Y`` yes, ``N`` no, ``A`` abstain, ``U`` undecided) from
their age, sex, education, income, town size and support of the status quo.
Each of the 5 regions is one site. :class:`skfed.DPFedDROClassifier` trains
one multiclass linear model by federated ADMM, robust to shifts of the
regions' distributions (Wasserstein DRO), and optionally with differential
privacy.

We fit it without privacy and with a total budget of epsilon = 10 (per voter,
over all rounds), and show each region's confusion matrix on its held-out
voters. Differential privacy needs a bound on every row's norm that does not
depend on the private rows: the features are divided by fixed bounds (town
size 250,000, age 100, income 200,000 pesos, status-quo scale 2: the coding
ranges of these banded variables) and rows beyond norm 1 are clipped. In a
real deployment such bounds must come from public knowledge, never from the
sites' data.
"""

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import ConfusionMatrixDisplay, f1_score

from skfed import DPFedDROClassifier
from skfed.datasets import load_multilevel
from skfed.model_selection import WithinClientKFold
from skfed.preprocessing import NormClipper

# SKFED_DOC_QUICK=1 (set by the test suite) runs a smaller version; unset, the full one
QUICK = os.environ.get("SKFED_DOC_QUICK") == "1"

data = load_multilevel("chile")
X, y, groups = data.data, data.target, data.groups
# fixed bounds of population, sex_M, age, education_PS, education_S, income, statusquo
bounds = np.array([250_000, 1, 100, 1, 1, 200_000, 2.0])
X = NormClipper(max_norm=1.0).fit_transform(X / bounds / np.sqrt(len(bounds)))
train, test = next(WithinClientKFold(5, shuffle=True, random_state=0).split(X, y, groups))

models = {
    "no privacy": DPFedDROClassifier(epsilon=None, n_rounds=10 if QUICK else 20,
                                     random_state=0),
    # the survey's answer options are public: classes= keeps each region's set of answers
    # (a function of its rows) out of the set-up exchange, which the guarantee does not cover
    "epsilon = 10": DPFedDROClassifier(target_epsilon=10.0, target_delta=1e-5,
                                       classes=["A", "N", "U", "Y"], accountant="rdp",
                                       n_rounds=20, random_state=0),
}
for model in models.values():
    model.fit(X[train], y[train], groups=groups[train])

# %%
# One confusion matrix per region and model, rows normalized to the true class
# (the diagonal is each class's recall). ``predict`` with ``groups`` uses the
# site labels; DP-Fed DRO releases one shared model, so every region is
# predicted by the same model, on its own voters.
regions = np.unique(groups)
region_names = {"C": "Centre", "M": "Metropolitan", "N": "North", "S": "South",
                "SA": "Santiago city"}
labels = np.unique(y)
fig, axes = plt.subplots(2, len(regions), figsize=(15, 6.5))
for row, (name, model) in enumerate(models.items()):
    for ax, region in zip(axes[row], regions):
        rows = test[groups[test] == region]
        pred = model.predict(X[rows], groups=groups[rows])
        ConfusionMatrixDisplay.from_predictions(
            y[rows], pred, labels=labels, normalize="true", values_format=".2f",
            ax=ax, colorbar=False, cmap="Blues", im_kw={"vmin": 0, "vmax": 1})
        f1 = f1_score(y[rows], pred, labels=labels, average="macro")
        ax.set_title(f"{region_names.get(region, region)}: macro-F1 {f1:.2f}", fontsize=10)
        if region != regions[0]:
            ax.set_ylabel("")
    axes[row, 0].set_ylabel(f"{name}\ntrue vote")
fig.tight_layout()

# %%
# What the private fit guarantees: ``privacy_spent_`` holds the total
# (epsilon, delta) per voter, over everything each region released.
private = models["epsilon = 10"]
spent = private.privacy_spent_
print("privacy spent (epsilon, delta):", round(spent["epsilon"], 3), spent["delta"])
print("it covers:", spent["covers"])
print("noise multiplier (model, norm bound):", private.noise_multiplier_)
