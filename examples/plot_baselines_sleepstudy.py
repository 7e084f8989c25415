"""
===================================================================
Baselines on sleepstudy: one model per subject, pooled, and between
===================================================================

The sleepstudy data (``load_multilevel("sleepstudy")``, 18 subjects, reaction
time over ten days of sleep deprivation) fitted by the baselines of
:mod:`skfed.baselines`, each with ``fit(X, y, groups=subject)``:

* :class:`~skfed.baselines.LocalEstimator`: a ridge line per subject, from that
  subject's days only;
* :class:`~skfed.baselines.PooledEstimator`: one line for everybody (needs the
  rows in one place: the centralized reference);
* :class:`~skfed.baselines.FedAvgRegressor` with ``fine_tune_epochs``:
  federated averaging of a linear model, then a few local epochs per subject;
* :class:`~skfed.baselines.MixedLMRegressor`: the statistician's linear mixed
  model (random intercept and slope per subject, centralized), whose subject
  lines are shrunk towards the population line.

Four subjects' days 0-5 are used for training, the rest is held out; the
lines show how each model extrapolates per subject.
"""

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import Ridge

from skfed.baselines import FedAvgRegressor, LocalEstimator, MixedLMRegressor, PooledEstimator
from skfed.datasets import load_multilevel

# SKFED_DOC_QUICK=1 (set by the test suite) runs a smaller version; unset, the full one
QUICK = os.environ.get("SKFED_DOC_QUICK") == "1"

X, y, groups = load_multilevel("sleepstudy", return_X_y=True)
train = X[:, 0] <= 5  # days 0-5 of every subject; days 6-9 held out

models = {
    "Local Ridge": LocalEstimator(Ridge(alpha=1.0)),
    "Pooled Ridge": PooledEstimator(Ridge(alpha=1.0)),
    # plain SGD on raw units (an intercept of about 250 ms) needs many rounds
    "FedAvg + fine-tuning": FedAvgRegressor(n_rounds=100 if QUICK else 400, fine_tune_epochs=5,
                                            random_state=0),
    "MixedLM (random slope)": MixedLMRegressor(random_slopes=[0]),
}
for model in models.values():
    model.fit(X[train], y[train], groups=groups[train])

# %%
subjects = np.unique(groups)
days = np.arange(10.0)[:, None]
fig, axes = plt.subplots(3, 6, figsize=(14, 7), sharex=True, sharey=True)
for ax, subject in zip(axes.ravel(), subjects):
    rows = groups == subject
    ax.plot(X[rows & train, 0], y[rows & train], "k.")
    ax.plot(X[rows & ~train, 0], y[rows & ~train], "o", mfc="none", color="0.4")
    for i, (name, model) in enumerate(models.items()):
        ax.plot(days, model.predict(days, groups=[subject] * len(days)), color=f"C{i}",
                label=name, lw=1.3)
    ax.axvline(5.5, color="0.8", lw=0.8)
    ax.set_title(f"subject {subject}", fontsize=9)
for ax in axes[-1]:
    ax.set_xlabel("day")
for ax in axes[:, 0]:
    ax.set_ylabel("reaction (ms)")
handles, labels = axes[0, 0].get_legend_handles_labels()
fig.legend(handles, labels, loc="upper center", ncol=4, frameon=False)
fig.tight_layout(rect=(0, 0, 1, 0.95))

# %%
# Error on the held-out days 6-9 (extrapolation per subject):
for name, model in models.items():
    pred = model.predict(X[~train], groups=groups[~train])
    print(f"{name:24s} RMSE {np.sqrt(np.mean((y[~train] - pred) ** 2)):5.1f} ms")
