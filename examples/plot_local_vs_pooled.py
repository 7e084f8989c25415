"""
================================================
Local-only vs pooled models as sites drift apart
================================================

Two reference points of every personalized federated method: a model per site
trained only on that site's rows (:class:`skfed.baselines.LocalEstimator`), and
one model trained on all rows pooled (:class:`skfed.baselines.PooledEstimator`,
possible only without privacy constraints). When the sites share one model,
pooling wins; as the sites' models drift apart, local models win.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np
from sklearn.linear_model import Ridge

from skfed.baselines import LocalEstimator, PooledEstimator
from skfed.datasets import make_federated_regression
from skfed.model_selection import WithinClientKFold

levels = [0.0, 0.25, 0.5, 1.0, 2.0]
rmse = {"local": [], "pooled": []}
for heterogeneity in levels:
    X, y, groups = make_federated_regression(
        n_clients=8, n_samples=60, heterogeneity=heterogeneity, random_state=0
    )
    train, test = next(WithinClientKFold(4, shuffle=True, random_state=0).split(X, y, groups))
    for name, model in (("local", LocalEstimator(Ridge())), ("pooled", PooledEstimator(Ridge()))):
        model.fit(X[train], y[train], groups=groups[train])
        pred = model.predict(X[test], groups=groups[test])  # personalized predictions
        rmse[name].append(np.sqrt(np.mean((y[test] - pred) ** 2)))

# %%
fig, ax = plt.subplots(figsize=(5, 3.5))
for name, values in rmse.items():
    ax.plot(levels, values, marker="o", label=name)
ax.set_xlabel("heterogeneity (std of client coefficient deviations)")
ax.set_ylabel("RMSE on held-out rows of seen sites")
ax.legend()
fig.tight_layout()

# %%
# What crossed during the local fit: each site sent only its row count.
local = LocalEstimator(Ridge()).fit(X, y, groups=groups)
print(local.communication_)
