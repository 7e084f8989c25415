"""Real grouped data: skfed's estimators at default parameters beside the usual baselines.

One experiment per data set of :func:`skfed.datasets.load_multilevel`. Each
repetition (seed) runs two 5-fold protocols:

* ``seen-site``: :class:`skfed.model_selection.WithinClientKFold` (shuffled by
  the seed): every site is in every training fold, test rows are held-out rows
  of seen sites, predicted with their site's personalized model (sites with
  fewer rows than folds stay in training only);
* ``new-site``: :class:`sklearn.model_selection.GroupKFold` (shuffled by the
  seed; leave-one-site-out with fewer than 5 sites): whole sites are held out
  and predicted by the population model.

Every method runs at its defaults (the baselines around scikit-learn's
defaults), on the data in raw units; nothing is tuned here, but for the
mixed-effects anchors of ``--full`` runs (GPBoost, MERF: centralized, from
the ``bench`` extra), which tune themselves by an inner cross-validation on
each training fold only, of the protocol's kind (within-client folds for
seen-site, client-level folds for new-site).
"""

import logging
import warnings

import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import f1_score, log_loss
from sklearn.model_selection import GroupKFold

from ..metrics import gaussian_nll, interval_coverage
from ..model_selection import WithinClientKFold
from ._registry import Experiment, register, report_step
from ._timing import timed

__all__ = ["REGRESSION_SETS", "CLASSIFICATION_SETS", "regression_methods", "anchor_methods",
           "classification_methods", "evaluate"]

N_SPLITS = 5
# repetition ``seed`` uses split and model seed SEED_BASE + seed: the defaults were chosen
# by the committed selection scripts on split seeds 0-2, so reported seeds are disjoint
SEED_BASE = 100
#: total (epsilon, delta = 1e-6, the default delta) of the private DP-Fed DRO fit
PRIVATE_EPSILON = 4.0
# data set -> columns (by feature name) that get a random slope in the mixed model:
# the textbook specification of each data set (intercept-only where there is none)
RANDOM_SLOPES = {
    "exam": ["standLRT"],
    "hsb82": ["ses"],
    "sleepstudy": ["Days"],
    "chickweight": ["Time"],
    "produc": None,
}
REGRESSION_SETS = tuple(RANDOM_SLOPES)
CLASSIFICATION_SETS = ("wvs", "chile")
# run by the default (quick) benchmark; the others with --full
QUICK_SETS = ("sleepstudy", "wvs")
# pooled exact GPs are O(n^3): only where the pooled data are small
POOLED_GP_MAX_ROWS = 1000
# folds of the anchors' inner CV (inside each outer training fold): MERF's cost is
# (grid size x folds + 1) forest fits of max_iterations EM steps each
ANCHOR_INNER_FOLDS = 3

_log = logging.getLogger(__name__)
_NOTED = set()  # optional packages already reported missing in this process


def _importable(package):
    """Whether the anchor's package imports; if not, one logged note per process."""
    from ..baselines._gpboost import _gpboost
    from ..baselines._merf import _merf

    try:
        {"gpboost": _gpboost, "merf": _merf}[package]()
        return True
    except (ImportError, OSError) as exc:  # OSError: a compiled library that fails to load
        if package not in _NOTED:
            _NOTED.add(package)
            _log.warning("skfed benchmark: the %s anchor is left out of the real-data "
                         "regression tables: %s", package, exc)
        return False


def anchor_methods(slope_cols, setting, seed):
    """The mixed-effects anchors (GPBoost, MERF) whose packages import: ``[(label, est, False)]``.

    Their inner CV is of the outer protocol's kind, on the training fold only:
    within-client folds for ``"seen-site"`` (tuned for held-out rows of seen
    sites), ``GroupKFold`` for ``"new-site"`` (tuned for the population
    prediction of held-out sites). They get the data set's textbook random
    slopes, as MixedLM does.
    """
    from ..baselines import GPBoostRegressor, MERFRegressor

    cv = (ANCHOR_INNER_FOLDS if setting == "seen-site"
          else GroupKFold(ANCHOR_INNER_FOLDS, shuffle=True, random_state=seed))
    methods = []
    if _importable("gpboost"):
        methods += [
            ("GPBoost (trees)",
             GPBoostRegressor(random_slopes=slope_cols, cv=cv, random_state=seed), False),
            ("GPBoost (linear)", GPBoostRegressor("linear", random_slopes=slope_cols), False),
        ]
    if _importable("merf"):
        methods.append(("MERF", MERFRegressor(random_slopes=slope_cols, cv=cv,
                                              random_state=seed), False))
    return methods


def _gpr(n_features):
    kernel = (ConstantKernel(1.0) * RBF(length_scale=np.ones(n_features))
              + WhiteKernel(1.0))
    return GaussianProcessRegressor(kernel=kernel, normalize_y=True)


def regression_methods(name, n_samples, n_features, feature_names, seed, setting="seen-site",
                       anchors=False):
    """``[(label, estimator, is_gp)]`` compared on a regression data set.

    With ``anchors``, the mixed-effects anchors of :func:`anchor_methods` follow
    (tuned for ``setting``'s protocol), those whose packages import.
    """
    from ..baselines import LocalEstimator, MixedLMRegressor, PooledEstimator
    from ..gaussian_process import PFedHGPRegressor
    from ..linear_model import FedMixedLMRegressor
    from ..tensor import PersonalizedTensorRegressor

    slopes = RANDOM_SLOPES.get(name)
    slope_cols = None if slopes is None else [feature_names.index(f) for f in slopes]
    methods = [
        ("PFedHGP", PFedHGPRegressor(random_state=seed), True),
        ("PersonalizedTensor", PersonalizedTensorRegressor(random_state=seed), False),
        ("MixedLM", MixedLMRegressor(random_slopes=slope_cols), False),
        ("FedMixedLM", FedMixedLMRegressor(random_slopes=slope_cols), False),
        ("Local Ridge", LocalEstimator(Ridge()), False),
        ("Pooled Ridge", PooledEstimator(Ridge()), False),
        ("Local GPR", LocalEstimator(_gpr(n_features)), True),
    ]
    if n_samples <= POOLED_GP_MAX_ROWS:
        methods.append(("Pooled GPR", PooledEstimator(_gpr(n_features)), True))
    if anchors:
        methods += anchor_methods(slope_cols, setting, seed)
    return methods


def classification_methods(name, seed, classes=None):
    """``[(label, estimator, row_transform)]`` compared on a classification data set.

    ``row_transform`` (or None) maps X before fit and predict; it must be
    row-wise and learn nothing from the data. ``classes`` are the data set's
    class labels, public knowledge (the task's label set), given to the
    private fit so that no site releases which labels it holds.
    """
    from ..baselines import LocalEstimator, PooledEstimator
    from ..linear_model import DPFedDROClassifier

    return [
        ("DP-Fed DRO (non-private)", DPFedDROClassifier(epsilon=None, random_state=seed), None),
        ("DP-Fed DRO (non-private, shared model only)",
         DPFedDROClassifier(epsilon=None, personalize=False, random_state=seed), None),
        ("DP-Fed DRO (private, total eps 4)",
         DPFedDROClassifier(target_epsilon=PRIVATE_EPSILON, classes=classes,
                            random_state=seed), None),
        ("Local LogReg", LocalEstimator(LogisticRegression(max_iter=1000)), None),
        ("Pooled LogReg", PooledEstimator(LogisticRegression(max_iter=1000)), None),
    ]


def _splits(X, y, groups, seed):
    seen = WithinClientKFold(N_SPLITS, small_clients="train", shuffle=True, random_state=seed)
    # leave-one-site-out where there are fewer sites than folds (WVS: 4 countries)
    n_sites = np.unique(groups).size
    new = GroupKFold(min(N_SPLITS, n_sites), shuffle=True, random_state=seed)
    return {"seen-site": list(seen.split(X, y, groups)),
            "new-site": list(new.split(X, y, groups))}


def _fit(model, X, y, groups):
    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X, y, groups=groups)

    return timed(model, run)[0]


def _regression_fold(label, model, is_gp, X, y, groups, train, test, setting):
    fit_time = _fit(model, X[train], y[train], groups[train])
    pred_groups = groups[test] if setting == "seen-site" else None
    row = {"fit_time_s": fit_time}
    if is_gp:
        mean, std = model.predict(X[test], groups=pred_groups, return_std=True)
        std = np.maximum(std, 1e-12)
        row["coverage95"] = interval_coverage(y[test], mean, std)
        row["nll"] = gaussian_nll(y[test], mean, std)
    else:
        mean = model.predict(X[test], groups=pred_groups)
    row["sse"] = float(np.sum((y[test] - mean) ** 2))
    row["n"] = test.size
    return row


def _classification_fold(model, X, y, groups, train, test, setting):
    fit_time = _fit(model, X[train], y[train], groups[train])
    pred_groups = groups[test] if setting == "seen-site" else None
    pred = model.predict(X[test], groups=pred_groups)
    proba = model.predict_proba(X[test], groups=pred_groups)
    row = {"fit_time_s": fit_time,
           "macro_f1": f1_score(y[test], pred, average="macro"),
           "accuracy": float(np.mean(pred == y[test])),
           "log_loss": log_loss(y[test], proba, labels=model.classes_)}
    spent = getattr(model, "privacy_spent_", None)
    if spent is not None and spent["strict"]:  # a guarantee holds: report its epsilon
        row["epsilon"] = float(spent["epsilon"])
    return row


def evaluate(name, seed, anchors=False):
    """All methods on data set ``name``, both protocols, one seed: result dicts.

    ``anchors`` adds the mixed-effects anchors to the regression methods (the
    ``--full`` runs: they tune by an inner CV, which costs minutes on the
    larger data sets).
    """
    from ..datasets import load_multilevel

    data = load_multilevel(name)
    X, y, groups = data.data, data.target, data.groups
    seed = SEED_BASE + seed
    rows = []
    for setting, folds in _splits(X, y, groups, seed).items():
        if data.task == "regression":
            methods = regression_methods(name, len(y) * (N_SPLITS - 1) // N_SPLITS,
                                         X.shape[1], list(data.feature_names), seed,
                                         setting=setting, anchors=anchors)
            for label, model, is_gp in methods:
                parts = [_regression_fold(label, model, is_gp, X, y, groups, tr, te, setting)
                         for tr, te in folds]
                result = {"setting": setting, "method": label,
                          "rmse": float(np.sqrt(sum(p["sse"] for p in parts)
                                                / sum(p["n"] for p in parts))),
                          "fit_time_s": float(np.mean([p["fit_time_s"] for p in parts]))}
                if is_gp:
                    w = np.array([p["n"] for p in parts], dtype=float)
                    for metric in ("coverage95", "nll"):
                        result[metric] = float(np.average([p[metric] for p in parts],
                                                          weights=w))
                rows.append(result)
                report_step(f"{setting}: {label}")
        else:
            for label, model, transform in classification_methods(name, seed, np.unique(y)):
                Xm = X if transform is None else transform(X)
                parts = [_classification_fold(model, Xm, y, groups, tr, te, setting)
                         for tr, te in folds]
                result = {"setting": setting, "method": label}
                for metric in parts[0]:
                    result[metric] = float(np.mean([p[metric] for p in parts]))
                rows.append(result)
                report_step(f"{setting}: {label}")
    return rows


_DESCRIPTIONS = {
    "regression": (
        "RMSE of every method at its defaults, raw units, 5 folds per protocol: seen-site "
        "(WithinClientKFold, held-out rows of every site with at least 5 rows, personalized "
        "predictions; smaller sites only train) and "
        "new-site (GroupKFold, whole sites held out, population predictions); 95% coverage "
        "and NLL for the Gaussian processes; mean fit time per fold. MixedLM (statsmodels, "
        "REML, random intercept plus the data set's textbook random slopes) is the "
        "centralized, non-private reference; FedMixedLM is the same model fitted exactly from "
        "the statistics the sites send once (sites whose statistics would give rows back "
        "are left out of the estimate). With --full, the mixed-effects anchors (centralized, "
        "from the bench extra; left out with a logged note when gpboost or merf does not "
        "import): GPBoost (trees: tree boosting with the same random effects, independent of "
        "each other; linear: its linear mixed model, ML) and MERF (a random forest with them, "
        "by EM), tuned by a 3-fold inner cross-validation on each training fold only "
        "(within-client folds for seen-site, GroupKFold for new-site)."
    ),
    "classification": (
        "Macro-F1, accuracy and log loss of every method at its defaults on the raw "
        "features, 5 folds per protocol (seen-site: WithinClientKFold, each site's own "
        "adaptation; new-site: GroupKFold, the shared model); the private DP-Fed DRO fit "
        "(total epsilon 4, delta 1e-6, PLD accountant; features scaled inside the fit from "
        "noisy histograms) reports its epsilon. Mean fit time per fold."
    ),
}


def _register(name, task):
    metrics = ({"rmse": "lower", "coverage95": 0.95, "nll": "lower", "fit_time_s": "lower"}
               if task == "regression" else
               {"macro_f1": "higher", "accuracy": "higher", "log_loss": "lower",
                "epsilon": None, "fit_time_s": "lower"})
    register(Experiment(
        name=f"real_{name}",
        title=f"Real grouped data: {name}",
        run=lambda seed, mode, _name=name: evaluate(_name, seed, anchors=mode == "full"),
        metrics=metrics,
        n_seeds={"quick": 1, "full": 3},
        description=_DESCRIPTIONS[task],
        group="real",
        modes=("quick", "full") if name in QUICK_SETS else ("full",),
    ))


for _name in REGRESSION_SETS:
    _register(_name, "regression")
for _name in CLASSIFICATION_SETS:
    _register(_name, "classification")
