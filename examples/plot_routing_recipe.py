"""
============================================================
Cross-validating a personalized model with routed ``groups``
============================================================

With scikit-learn's metadata routing on, one ``groups=`` argument reaches the
CV splitter, ``fit`` (training rows) and ``score`` (test rows), also inside a
``Pipeline``. Two evaluations answer two questions:

* ``GroupKFold``: how well does the model do on a **new site**?
* :class:`skfed.model_selection.WithinClientKFold`: how well does it do on
  **new rows of seen sites** (personalized accuracy)?

:func:`skfed.metrics.make_personalized_scorer` sends the test rows' groups to
``predict``; scikit-learn's own scorers would score the population prediction.
"""

# %%
import sklearn
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfed.baselines import LocalEstimator
from skfed.datasets import make_federated_regression
from skfed.metrics import make_personalized_scorer
from skfed.model_selection import WithinClientKFold

X, y, groups = make_federated_regression(n_clients=8, heterogeneity=1.0, random_state=0)
pipe = make_pipeline(StandardScaler(), LocalEstimator(Ridge()))

with sklearn.config_context(enable_metadata_routing=True):
    # new-site generalization: whole sites are held out
    search = GridSearchCV(
        pipe, {"localestimator__estimator__alpha": [0.1, 1.0, 10.0]}, cv=GroupKFold(4)
    ).fit(X, y, groups=groups)
    # personalized accuracy: held-out rows of every seen site
    personalized = cross_validate(
        pipe, X, y,
        cv=WithinClientKFold(5, shuffle=True, random_state=0),
        scoring={"personalized_r2": make_personalized_scorer("r2"), "population_r2": "r2"},
        params={"groups": groups},
    )

print("best alpha (new sites):", search.best_params_)
print("R^2 on held-out rows, personalized: %.3f" % personalized["test_personalized_r2"].mean())
print("R^2 on held-out rows, population:   %.3f" % personalized["test_population_r2"].mean())
# GridSearchCV.predict takes no groups: predict with the best estimator
print(search.best_estimator_.predict(X[:3], groups=groups[:3]))

# %%
# The two scores per fold: the same fitted pipelines, scored on the same
# held-out rows, once with each row's own site model (``groups`` routed to
# ``predict``) and once with the population model (scikit-learn's ``"r2"``,
# which calls ``predict(X)`` without metadata).
import matplotlib.pyplot as plt
import numpy as np

folds = np.arange(1, len(personalized["test_personalized_r2"]) + 1)
fig, ax = plt.subplots(figsize=(5.5, 3.2))
ax.bar(folds - 0.2, personalized["test_personalized_r2"], 0.4,
       label='make_personalized_scorer("r2")')
ax.bar(folds + 0.2, personalized["test_population_r2"], 0.4, label='scoring="r2"')
ax.set(xlabel="WithinClientKFold fold", ylabel="R^2 on held-out rows", xticks=folds)
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
