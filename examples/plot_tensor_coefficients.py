"""
================================================================
Personalized tensor regression: shared and per-site coefficients
================================================================

:class:`skfed.PersonalizedTensorRegressor` models site ``k``'s coefficient as
``A_k = A_0 + B_k``: a shared coefficient ``A_0`` of low Tucker rank, learned
by federated rounds, plus a sparse site deviation ``B_k`` that never leaves
the site.

**Images.** A scalar-on-image problem resembling a three-site imaging study
(:func:`skfed.datasets.make_tensor_image_regression`: 80, 220 and 255 images of
32 x 32 pixels; each site's coefficient deviates from the shared one on one
small square). The fitted coefficient images beside the truth, and beside one
model per site fitted alone.

**Real data.** The same estimator on tabular data is a personalized linear
model: on ChickWeight (chicks' weight over time on four diets, one chick per
site) it is compared with one ridge model per site and one pooled model.
"""

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import Ridge, RidgeCV

from skfed import LocalEstimator, PersonalizedTensorRegressor, PooledEstimator
from skfed.datasets import load_multilevel, make_tensor_image_regression

# SKFED_DOC_QUICK=1 (set by the test suite) runs a smaller version; unset, the full one
QUICK = os.environ.get("SKFED_DOC_QUICK") == "1"

shape = (16, 16) if QUICK else (32, 32)
X, y, groups, truth = make_tensor_image_regression(
    image_shape=shape, patch_size=shape[0] // 8, return_truth=True, random_state=0)
model = PersonalizedTensorRegressor(tensor_shape=shape, rank=(2, 2), random_state=0)
model.fit(X, y, groups=groups)
local = LocalEstimator(RidgeCV(alphas=np.logspace(-2, 3, 11))).fit(X, y, groups=groups)

# %%
# Row 1: the truth; row 2: the federated fit (``shared_coef_`` and each
# site's ``coef_``, shared plus deviation);
# row 3: each site's own ridge regression on its images only. Sites with few
# images (site 0: 80 images for 1024 pixels) cannot recover the pattern alone;
# the shared part pools what the sites have in common.
sites = model.clients_
columns = ["shared part"] + [f"site {s}" for s in sites]
rows = {
    "truth": [truth.shared_coef] + list(truth.coef),
    "federated\n(PersonalizedTensorRegressor)": [model.shared_coef_] + list(model.coef_),
    "each site alone\n(LocalEstimator(RidgeCV))": [None] + [
        local.estimators_[i].coef_.reshape(shape) for i in range(len(sites))],
}
vmax = np.abs(truth.coef).max()
fig, axes = plt.subplots(3, len(columns), figsize=(2.4 * len(columns) + 1.5, 7.5),
                         layout="constrained")
for r, (name, images) in enumerate(rows.items()):
    for c, image in enumerate(images):
        ax = axes[r, c]
        ax.set_xticks([])
        ax.set_yticks([])
        if image is None:
            ax.axis("off")
            continue
        im = ax.imshow(np.reshape(image, shape), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        if r == 0:
            ax.set_title(columns[c])
    axes[r, 0 if r < 2 else 1].set_ylabel(name)
fig.colorbar(im, ax=axes, shrink=0.6, label="coefficient")

errors = [np.linalg.norm(model.coef_[i] - truth.coef[i]) / np.linalg.norm(truth.coef[i])
          for i in range(len(sites))]
print("relative error of A_k per site, federated:", np.round(errors, 2))
errors = [np.linalg.norm(local.estimators_[i].coef_.reshape(shape) - truth.coef[i])
          / np.linalg.norm(truth.coef[i]) for i in range(len(sites))]
print("relative error of A_k per site, alone:    ", np.round(errors, 2))

# %%
# ChickWeight: weight (g) on ``Time`` and the diet indicators, 50 chicks. A
# fifth of every chick's weighings is held out (seen-site error), and a fifth
# of the chicks entirely (new-site error: the population model ``A_0``).
from sklearn.model_selection import GroupKFold

from skfed.model_selection import WithinClientKFold

X, y, groups = load_multilevel("chickweight", return_X_y=True)
splits = {
    "seen chicks\n(held-out weighings)": next(WithinClientKFold(
        5, small_clients="train", shuffle=True, random_state=0).split(X, y, groups)),
    "new chicks\n(held-out chicks)": next(GroupKFold(5).split(X, y, groups)),
}
candidates = {
    "PersonalizedTensorRegressor": lambda: PersonalizedTensorRegressor(random_state=0),
    "Ridge per chick (LocalEstimator)": lambda: LocalEstimator(Ridge()),
    "pooled Ridge (PooledEstimator)": lambda: PooledEstimator(Ridge()),
}
rmse = {name: [] for name in candidates}
for train, test in splits.values():
    for name, make in candidates.items():
        fitted = make().fit(X[train], y[train], groups=groups[train])
        pred = fitted.predict(X[test], groups=groups[test])
        rmse[name].append(np.sqrt(np.mean((y[test] - pred) ** 2)))

fig, ax = plt.subplots(figsize=(7, 3.5))
width = 0.25
for i, (name, values) in enumerate(rmse.items()):
    bars = ax.bar(np.arange(len(splits)) + (i - 1) * width, values, width, label=name)
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
ax.set_xticks(np.arange(len(splits)), list(splits))
ax.set_ylabel("RMSE of weight (g)")
ax.legend(fontsize=8)
fig.tight_layout()
