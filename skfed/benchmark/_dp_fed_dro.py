"""Experiments of the DP-Fed DRO paper: Table 1 (UCI), Table 4 (correlated faults),
and the accountant's totals.

Quick mode is a smoke-size run (seconds); full mode uses the paper's sizes and
protocol where the paper states them. Every deviation is listed in the
experiment descriptions and in ``doc/results/dp_fed_dro.md``.
"""

import numpy as np
from sklearn.metrics import balanced_accuracy_score, f1_score, recall_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from ..datasets import (
    available_uci,
    dirichlet_client_split,
    flip_labels,
    load_uci,
    make_correlated_faults,
)
from ..linear_model import (
    CentralizedDROClassifier,
    DPFedDROClassifier,
    DPFedERMClassifier,
    DPFedSGDClassifier,
    FedOvADROClassifier,
)
from ..model_selection import WithinClientKFold
from ..preprocessing import make_minmax_l2_pipeline
from ..privacy import dpfeddro_epsilon, split_round_budget
from ._registry import Experiment, register, report_step

# ---------------------------------------------------------------------------
# Table 1: UCI benchmark
# ---------------------------------------------------------------------------

TABLE1 = {  # paper's Table 1, macro-F1 means
    "iris": {"Centralized DRO": 0.919, "DP-Fed DRO": 0.564, "DP-Fed ERM": 0.519,
             "DP-Fed SGD": 0.559, "Non-Private Fed DRO": 0.943,
             "Non-Private Fed OvA DRO": 0.862},
    "wine": {"Centralized DRO": 0.943, "DP-Fed DRO": 0.640, "DP-Fed ERM": 0.590,
             "DP-Fed SGD": 0.606, "Non-Private Fed DRO": 0.924,
             "Non-Private Fed OvA DRO": 0.932},
    "penguins": {"Centralized DRO": 0.996, "DP-Fed DRO": 0.689, "DP-Fed ERM": 0.774,
                 "DP-Fed SGD": 0.637, "Non-Private Fed DRO": 0.993,
                 "Non-Private Fed OvA DRO": 0.992},
}
UCI_PRIVACY = dict(epsilon=0.5, delta=1e-6)
# the paper's total guarantee of that budget (Thm 2 closed form, T=50): the PLD rows
# calibrate their noise to it with the tighter PLD accountant
UCI_TOTAL = dict(target_epsilon=3.7299, target_delta=1e-6, accountant="pld")
# the paper's ADMM values (Sec. 7.1: rho 0.8, gamma 0.1, l_inf dual norm), passed explicitly
# so that the estimator's defaults can change without changing these rows
UCI_ADMM = dict(rho=0.8, gamma=0.1, feature_norm="l1", fit_intercept=False)
# fixed hyperparameters (quick mode): the paper's grids' middle values
FIXED = {
    "DP-Fed DRO": dict(kappa=0.5, radius=0.02, c_M=1.0, c_lambda=1.0),
    "DP-Fed ERM": dict(reg=1e-4),
    "DP-Fed SGD": dict(learning_rate=0.1),
    "NP": dict(kappa=0.5, radius=1e-3),
}
# the paper's DP-Fed DRO grid (Sec. 7.2): kappa x seven r in [0, 0.06] x c_M x c_lambda,
# 3 x 7 x 3 x 4 = 252 points
DPFEDDRO_PAPER_GRID = [dict(kappa=k, radius=r, c_M=cm, c_lambda=cl)
                       for k in (0.5, 1.0, 2.0) for r in np.round(np.linspace(0, 0.06, 7), 3)
                       for cm in (0.5, 1.0, 2.0) for cl in (0.5, 1.0, 2.0, 6.0)]
GRIDS = {  # 5-fold CV grids (full mode)
    # 54 of the paper's 252 DP-Fed DRO points (every kappa and c_M, r in {0, 0.02,
    # 0.06}, c_lambda in {1, 6}): the full grid costs 4.7x as much (25,200 fits of
    # ~0.18 s per accountant for Iris + Wine x 10 seeds; doc/results/dp_fed_dro.md)
    "DP-Fed DRO": [p for p in DPFEDDRO_PAPER_GRID
                   if p["radius"] in (0.0, 0.02, 0.06) and p["c_lambda"] in (1.0, 6.0)],
    "DP-Fed ERM": [dict(reg=r) for r in (1e-8, 1e-6, 1e-4)],
    "DP-Fed SGD": [dict(learning_rate=e) for e in (0.05, 0.1, 0.2)],
    # the paper's grid of the centralized and non-private DRO models (Sec. 7.2)
    "NP": [dict(kappa=k, radius=r) for k in (0.25, 0.5, 0.75, 1.0)
           for r in (1e-5, 1e-4, 1e-3, 1e-2)],
}
# rho and T of the non-private ADMM models: the paper does not state them for UCI; chosen
# so that Algorithm 1 converges from M = 0 (benchmarks/papers/dro_admm_convergence.py, Iris and
# Wine seeds 0-1: at rho = 0.01 the relative objective gap is 0.3-1.3% after 100 rounds,
# 1.4-4.1% after 50; rho 0.001-0.003 and 0.1 are slower)
UCI_ROUNDS = {"quick": {"private": 50, "np": 15, "np_rho": 0.01},
              "full": {"private": 50, "np": 100, "np_rho": 0.01}}


def _uci_split(name, seed):
    """The paper's protocol: 80/20 split, min-max + l2 (fit on train), Dirichlet
    class-imbalanced split over 4 clients, 10% training labels flipped."""
    X, y = load_uci(name)
    _, y = np.unique(y, return_inverse=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y,
                                              random_state=seed)
    prep = make_minmax_l2_pipeline().fit(X_tr)
    X_tr, X_te = prep.transform(X_tr), prep.transform(X_te)
    groups = dirichlet_client_split(y_tr, 4, concentration=0.5, random_state=seed)
    y_tr, _ = flip_labels(y_tr, 0.1, random_state=seed)
    return X_tr, y_tr, groups, X_te, y_te


def _c_w(X, y, groups):
    """DP-Fed ERM's step constant: ||M*||_F of a non-private solution (as the paper;
    outside the privacy guarantee)."""
    ref = DPFedERMClassifier(epsilon=None, n_rounds=50, c_w=10.0).fit(X, y, groups=groups)
    return max(float(np.linalg.norm(ref.coef_)), 1e-3)


def _cv_select(make, grid, X, y, groups, seed):
    """5-fold CV on the training rows by macro-F1, folds within each client
    (``WithinClientKFold``: every client keeps 4/5 of its rows for training);
    outside the privacy guarantee, as in the paper."""
    folds = list(WithinClientKFold(5, small_clients="train", shuffle=True,
                                   random_state=seed).split(X, y, groups))
    best, best_score = grid[0], -np.inf
    for params in grid:
        scores = []
        for tr, va in folds:
            try:
                est = make(params).fit(X[tr], y[tr], groups=groups[tr])
            except ValueError:  # a fold left a client with < 2 rows
                scores.append(0.0)
                continue
            scores.append(f1_score(y[va], est.predict(X[va]), average="macro"))
        if np.mean(scores) > best_score:
            best, best_score = params, float(np.mean(scores))
    return best


def _uci_methods(mode, X, y, groups, seed):
    """``{method: (estimator, selected hyperparameters)}`` of one training set."""
    rounds = UCI_ROUNDS[mode]
    T, T_np, rho_np = rounds["private"], rounds["np"], rounds["np_rho"]
    c_w = _c_w(X, y, groups)
    models = {
        "DP-Fed DRO": lambda p: DPFedDROClassifier(n_rounds=T, random_state=seed,
                                                   **UCI_PRIVACY, **UCI_ADMM, **p),
        "DP-Fed DRO (PLD, eps_total 3.73)": lambda p: DPFedDROClassifier(
            n_rounds=T, random_state=seed, **UCI_TOTAL, **UCI_ADMM, **p),
        "DP-Fed ERM": lambda p: DPFedERMClassifier(n_rounds=T, c_w=c_w, random_state=seed,
                                                   **UCI_PRIVACY, **p),
        "DP-Fed SGD": lambda p: DPFedSGDClassifier(n_rounds=T, reg=1e-6, random_state=seed,
                                                   **UCI_PRIVACY, **p),
        "Centralized DRO": lambda p: CentralizedDROClassifier(**p),
        # the paper's protocol: the rows are already min-max + l2 scaled (no standardization)
        "Non-Private Fed DRO": lambda p: DPFedDROClassifier(
            epsilon=None, standardize=False, n_rounds=T_np, rho=rho_np, gamma=0.1,
            feature_norm="l1", fit_intercept=False, **p),
    }
    grids = {**GRIDS, "DP-Fed DRO (PLD, eps_total 3.73)": GRIDS["DP-Fed DRO"],
             "Centralized DRO": GRIDS["NP"]}
    fixed = {**FIXED, "DP-Fed DRO (PLD, eps_total 3.73)": FIXED["DP-Fed DRO"],
             "Centralized DRO": FIXED["NP"], "Non-Private Fed DRO": FIXED["NP"]}
    out = {}
    for name, make in models.items():
        if name == "Non-Private Fed DRO" and mode == "full":
            # the federated models take the (kappa, r) that the centralized model's CV
            # selects on the same within-client folds: a CV of the federated ADMM itself
            # (16 points x 5 folds x T = 100 rounds of exact QPs) costs ~80x a fit; the
            # converged Fed DRO solves nearly the centralized problem (its objective
            # weights clients uniformly)
            params = out["Centralized DRO"][1]
        else:
            params = (_cv_select(make, grids[name], X, y, groups, seed) if mode == "full"
                      else fixed[name])
        out[name] = (make(params), params)
    out["Non-Private Fed OvA DRO"] = (
        FedOvADROClassifier(n_rounds=T_np, rho=rho_np, **out["Non-Private Fed DRO"][1]),
        out["Non-Private Fed DRO"][1])
    return out


def run_uci(seed, mode, datasets=None):
    """One seed of Table 1 on every UCI set available offline (or on ``datasets``)."""
    rows = []
    names = [n for n in available_uci() if n in TABLE1]
    if mode == "quick":
        names = names[:1]
    if datasets is not None:
        names = [n for n in datasets if n in names]
    for name in names:
        X, y, groups, X_te, y_te = _uci_split(name, seed)
        for method, (est, params) in _uci_methods(mode, X, y, groups, seed).items():
            est.fit(X, y, groups=groups)
            pred = est.predict(X_te)
            rows.append({"setting": name, "method": method, "params": params,
                         "macro_f1": float(f1_score(y_te, pred, average="macro")),
                         "mccr": float(balanced_accuracy_score(y_te, pred))})
            report_step(f"{name}: {method}")
    return rows


register(Experiment(
    name="dp_fed_dro_uci",
    title="DP-Fed DRO, Table 1: macro-F1 on UCI data (G=4, eps=0.5/round, delta=1e-6, T=50)",
    run=run_uci,
    metrics={"macro_f1": "higher", "mccr": "higher"},
    n_seeds={"quick": 1, "full": 10},
    # the PLD rows are compared with the paper's DP-Fed DRO (the same total guarantee)
    paper={**{(d, m, "macro_f1"): v for d, row in TABLE1.items() for m, v in row.items()},
           **{(d, "DP-Fed DRO (PLD, eps_total 3.73)", "macro_f1"): row["DP-Fed DRO"]
              for d, row in TABLE1.items()}},
    description=(
        "Protocol of the paper's Sec. 7.2: 80/20 stratified split redrawn per seed, min-max "
        "(training statistics) then l2 clipping to norm <= 1, Dirichlet(0.5) class-imbalanced "
        "split over 4 clients with every class on every client, 10% of training labels "
        "flipped. Private models: eps=0.5 per round (0.95/0.05 split), delta=1e-6, T=50 "
        "(eps_bar=3.73 by the paper's closed form); 'DP-Fed DRO (PLD, eps_total 3.73)': "
        "noise calibrated by the PLD accountant to the total (3.7299, 1e-6). Full mode "
        "selects every model's hyperparameters by 5-fold CV (macro-F1, folds within each "
        "client) on the training rows of each seed over the paper's grids (DP-Fed DRO: 54 "
        "of its 252 points; centralized and non-private Fed DRO: kappa in {0.25, 0.5, "
        "0.75, 1}, r in {1e-5, 1e-4, 1e-3, 1e-2}, selected by the centralized model's CV and "
        "used by the non-private Fed DRO and Fed OvA DRO too (a CV of the federated ADMM "
        "costs 80 fits per seed); "
        "non-private ADMM: rho=0.01, T=100 (UCI values not stated in the paper; chosen for "
        "convergence from M = 0). Quick mode: Iris only, one seed, fixed hyperparameters, "
        "non-private federated models with T=15. Penguins needs the palmerpenguins "
        "package; Dermatology and Seeds are not available offline."
    ),
    reference="Private and Distributionally Robust Federated Multiclass Classification, "
              "Table 1",
))

# ---------------------------------------------------------------------------
# Table 4: correlated faults, multiclass vs one-vs-all
# ---------------------------------------------------------------------------

TABLE4 = {  # (overlap, method) -> metrics, paper's Table 4 means
    ("strong", "Non-Private Fed DRO"): dict(mccr=0.8366, macro_f1=0.8140, worst_recall=0.4074,
                                            ab_confusion=0.2185, ab_to_normal=0.0843),
    ("strong", "Non-Private Fed OvA DRO"): dict(mccr=0.7894, macro_f1=0.7559,
                                                worst_recall=0.3000, ab_confusion=0.2185,
                                                ab_to_normal=0.1481),
    ("moderate", "Non-Private Fed DRO"): dict(mccr=0.9292, macro_f1=0.9259,
                                              worst_recall=0.7444, ab_confusion=0.0620,
                                              ab_to_normal=0.0630),
    ("moderate", "Non-Private Fed OvA DRO"): dict(mccr=0.8301, macro_f1=0.8040,
                                                  worst_recall=0.3759, ab_confusion=0.1657,
                                                  ab_to_normal=0.1222),
    ("low", "Non-Private Fed DRO"): dict(mccr=0.9514, macro_f1=0.9503, worst_recall=0.8333,
                                         ab_confusion=0.0176, ab_to_normal=0.0630),
    ("low", "Non-Private Fed OvA DRO"): dict(mccr=0.8653, macro_f1=0.8535,
                                             worst_recall=0.5259, ab_confusion=0.0528,
                                             ab_to_normal=0.1556),
}
FAULT_SIZES = {"quick": dict(n_train=(125, 30, 30, 30), n_test=216, n_rounds=10, rho=0.01),
               "full": dict(n_train=(500, 120, 120, 120), n_test=216, n_rounds=50, rho=0.01)}


def fault_metrics(y_true, y_pred):
    """mCCR, macro-F1, worst-class recall and the fault A/B confusion rates (classes
    0 normal, 1 fault A, 2 fault B, 3 fault C)."""
    recall = recall_score(y_true, y_pred, labels=[0, 1, 2, 3], average=None, zero_division=0)
    ab = np.isin(y_true, (1, 2))
    swapped = ((y_true == 1) & (y_pred == 2)) | ((y_true == 2) & (y_pred == 1))
    return {
        "mccr": float(balanced_accuracy_score(y_true, y_pred)),
        "macro_f1": float(f1_score(y_true, y_pred, average="macro")),
        "worst_recall": float(recall.min()),
        "ab_confusion": float(swapped[ab].mean()),
        "ab_to_normal": float((y_pred[ab] == 0).mean()),
    }


def run_faults(seed, mode):
    """One seed of Table 4: Fed DRO vs Fed OvA DRO at three overlaps."""
    size = FAULT_SIZES[mode]
    rows = []
    for overlap in ("strong", "moderate", "low"):
        X, y, groups, X_te, y_te = make_correlated_faults(
            overlap, n_train=size["n_train"], n_test=size["n_test"], random_state=seed)
        # non-private study: standardised features (the paper does not say), no
        # norm bound needed
        prep = StandardScaler().fit(X)
        X, X_te = prep.transform(X), prep.transform(X_te)
        kw = dict(kappa=0.5, radius=1e-3, rho=size["rho"], n_rounds=size["n_rounds"])
        for method, est in (("Non-Private Fed DRO", DPFedDROClassifier(epsilon=None, standardize=False,
                                                                   feature_norm="l1",
                                                                   fit_intercept=False, **kw)),
                            ("Non-Private Fed OvA DRO", FedOvADROClassifier(**kw))):
            est.fit(X, y, groups=groups)
            rows.append({"setting": overlap, "method": method,
                         **fault_metrics(y_te, est.predict(X_te))})
    return rows


register(Experiment(
    name="dp_fed_dro_faults",
    title="DP-Fed DRO, Table 4: native multiclass vs one-vs-all Fed DRO, correlated faults",
    run=run_faults,
    metrics={"mccr": "higher", "macro_f1": "higher", "worst_recall": "higher",
             "ab_confusion": "lower", "ab_to_normal": "lower"},
    n_seeds={"quick": 1, "full": 10},
    paper={(o, m, k): v for (o, m), d in TABLE4.items() for k, v in d.items()},
    description=(
        "make_correlated_faults (a documented proxy: the paper gives no means or "
        "covariances), standardised features, 4 clients, 10% training label noise, balanced "
        "test set of 216 rows. kappa=0.5, r=1e-3 fixed (the paper selects them by 3-fold CV "
        "over r in {1e-4,1e-3,1e-2}, kappa in {0.25,0.5,0.75}); rho=0.01 (the paper: 0.5, "
        "too slow for our ADMM in 50 rounds). Full: 860 training rows, T=50. Quick: 215 "
        "training rows, T=10."
    ),
    reference="Private and Distributionally Robust Federated Multiclass Classification, "
              "Table 4 (App. B.4)",
))

# ---------------------------------------------------------------------------
# the accountant's totals
# ---------------------------------------------------------------------------

ACCOUNTANT_SETTINGS = {  # setting -> (per-round eps, delta, T, paper's eps_bar)
    "UCI (eps=0.5, delta=1e-6, T=50)": (0.5, 1e-6, 50, 3.7),
    "scalability (eps=0.2, delta=1e-8, T=120)": (0.2, 1e-8, 120, 2.2),
}


def run_accountant(seed, mode):
    """Total epsilon of the paper's settings by the closed form, RDP and PLD."""
    from ..linear_model._privacy_plan import privacy_spent

    rows = []
    for setting, (eps, delta, T, _) in ACCOUNTANT_SETTINGS.items():
        e_M, e_l = split_round_budget(eps)
        row = {"setting": setting, "method": "paper closed form (Thm 2)",
               "eps_bar": dpfeddro_epsilon(T, e_M, e_l, delta)}
        rows.append(row)
        for acc in ("rdp", "pld"):
            rows.append({"setting": setting, "method": f"dp-accounting {acc.upper()}",
                         "eps_bar": privacy_spent(T, (e_M, e_l), delta, delta, acc)})
    return rows


register(Experiment(
    name="dp_fed_dro_accountant",
    title="DP-Fed DRO: total privacy budget eps_bar of the paper's settings",
    run=run_accountant,
    metrics={"eps_bar": "lower"},
    n_seeds={"quick": 1, "full": 1},
    paper_modes=("quick", "full"),  # deterministic: the paper's settings in both modes
    paper={(s, "paper closed form (Thm 2)", "eps_bar"): v
           for s, (*_, v) in ACCOUNTANT_SETTINGS.items()},
    description=(
        "Deterministic. The paper reports eps_bar ~ 3.7 and ~ 2.2; its Theorem 2 formula "
        "gives 3.7299 and 2.2421. dp-accounting's RDP and PLD accountants compose the same "
        "Gaussian releases (noise multipliers sqrt(2 ln(1.25/delta))/eps_M and /eps_lambda) "
        "and give tighter totals."
    ),
    reference="Private and Distributionally Robust Federated Multiclass Classification, "
              "Thm 2, Secs. 7.2-7.3",
))
