"""
======================================================================
Personalized Gaussian process bands per subject, and for a new subject
======================================================================

The sleepstudy data (``load_multilevel("sleepstudy")``): the reaction time of
18 subjects over ten days of sleep deprivation, one subject per site. We fit a
:class:`skfed.PFedHGPRegressor` at its defaults (a global GP shared by all
sites, plus a deviation GP, a local GP and a random intercept per site, each
site's parts integrated out exactly) on 15 subjects, with a fifth of every
subject's days held out, and keep 3 subjects out entirely.

* With ``groups``, each seen subject gets its **personalized** predictive band
  (blue): it follows the subject's own trend and is narrow where the subject
  has data.
* Without ``groups`` (or for a subject not seen in ``fit``), the model gives
  the **population** band (grey): what it expects of a new subject, wide
  because subjects differ.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

from skfed import PFedHGPRegressor
from skfed.datasets import load_multilevel
from skfed.model_selection import WithinClientKFold

X, y, groups = load_multilevel("sleepstudy", return_X_y=True)
subjects = np.unique(groups)
new_subjects = subjects[-3:]                       # never seen in fit
seen = ~np.isin(groups, new_subjects)
# a fifth of the days of every seen subject held out
cv = WithinClientKFold(5, shuffle=True, random_state=0)
fold = next(cv.split(X[seen], y[seen], groups[seen]))
train = np.zeros(len(y), dtype=bool)
train[np.flatnonzero(seen)[fold[0]]] = True

model = PFedHGPRegressor(random_state=0)
model.fit(X[train], y[train], groups=groups[train])

# %%
# Predict on a grid of days: per seen subject (personalized) and without
# ``groups`` (population, the new-subject prediction).
days = np.linspace(0, 9, 50)[:, None]
pop_mean, pop_std = model.predict(days, return_std=True)

shown = list(subjects[[0, 2, 4, 7, 9, 12]]) + list(new_subjects)
fig, axes = plt.subplots(3, 3, figsize=(10, 8), sharex=True, sharey=True)
for ax, subject in zip(axes.ravel(), shown):
    rows = groups == subject
    ax.fill_between(days[:, 0], pop_mean - 2 * pop_std, pop_mean + 2 * pop_std,
                    color="0.85", label="new subject (population)")
    ax.plot(days[:, 0], pop_mean, color="0.6", lw=1)
    if subject in new_subjects:
        ax.set_title(f"subject {subject} (not seen)", color="C3")
    else:
        mean, std = model.predict(days, groups=[subject] * len(days), return_std=True)
        ax.fill_between(days[:, 0], mean - 2 * std, mean + 2 * std, color="C0", alpha=0.3,
                        label="this subject (personalized)")
        ax.plot(days[:, 0], mean, color="C0")
        ax.set_title(f"subject {subject}")
    ax.plot(X[rows & train, 0], y[rows & train], "k.", label="training rows")
    ax.plot(X[rows & ~train, 0], y[rows & ~train], "o", mfc="none", color="C3",
            label="held-out rows")
for ax in axes[-1]:
    ax.set_xlabel("days of sleep deprivation")
for ax in axes[:, 0]:
    ax.set_ylabel("reaction time (ms)")
handles, labels = axes[0, 0].get_legend_handles_labels()
fig.legend(handles, labels, loc="upper center", ncol=4, frameon=False)
fig.tight_layout(rect=(0, 0, 1, 0.95))

# %%
# How good are the bands on the held-out days? RMSE and the share of rows
# inside the 95% band (``skfed.metrics``), for seen subjects (personalized)
# and for the three new subjects (population).
from skfed.metrics import interval_coverage

test_seen = seen & ~train
mean, std = model.predict(X[test_seen], groups=groups[test_seen], return_std=True)
print("seen subjects, held-out days: RMSE %.1f ms, 95%% coverage %.2f"
      % (np.sqrt(np.mean((y[test_seen] - mean) ** 2)),
         interval_coverage(y[test_seen], mean, std)))
mean, std = model.predict(X[~seen], return_std=True)
print("new subjects, all days:       RMSE %.1f ms, 95%% coverage %.2f"
      % (np.sqrt(np.mean((y[~seen] - mean) ** 2)), interval_coverage(y[~seen], mean, std)))

# %%
# Only arrays of statistics crossed during ``fit``; the ledger counts them.
print(f"{model.communication_.bytes_up / 1e6:.1f} MB up, "
      f"{model.communication_.bytes_down / 1e6:.1f} MB down in "
      f"{model.communication_.n_rounds} rounds")
