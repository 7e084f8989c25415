import math
import warnings

import dp_accounting
import numpy as np
import pytest
from scipy import sparse
from scipy.optimize import minimize
from sklearn.preprocessing import Normalizer

from skfed import DPFedDROClassifier
from skfed.federated import Federation, Ledger, run_federation
from skfed.linear_model._admm import (
    DPFedDROAlgorithm,
    local_terms,
    phi,
    prox_linear_update,
    sensitivities,
    solve_binary_dro_local,
    solve_cs_dro_local,
    step_sizes,
)
from skfed.linear_model._privacy_plan import privacy_spent
from skfed.linear_model._kernels import dro_cs_pass
from skfed.privacy import dpfeddro_epsilon, dpfeddro_per_round_epsilon, split_round_budget

# tests about other things fit private models without the public classes=: each site's
# label set is then sent outside the guarantee, which fit warns about
# (tests/linear_model/test_known_classes.py)
pytestmark = pytest.mark.filterwarnings("ignore:.*set of class labels:UserWarning")


def _unit_rows(rng, n, p):
    X = rng.standard_normal((n, p))
    return X / np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(0.2, 1.0, (n, 1))


def _blobs(rng, n=240, k=3, p=4, noise=0.15):
    y = rng.integers(0, k, n)
    centers = np.eye(k, p) if k <= p else rng.standard_normal((k, p))
    X = centers[y] + noise * rng.standard_normal((n, p))
    return Normalizer().fit_transform(X), y


# ---------------------------------------------------------------- kernel


def dro_cs_pass_numpy(X, y, coef, lam, kappa):
    """Plain numpy reference of :func:`skfed.linear_model._kernels.dro_cs_pass` (same ties)."""
    n, k = X.shape[0], coef.shape[0]
    scores = X @ coef.T
    rows = np.arange(n)
    # l(j) = max(0, max_{c != j} s_c + 1 - s_j) for every label j
    order = np.argsort(-scores, axis=1, kind="stable")
    i1, i2 = order[:, 0], order[:, 1]
    top1, top2 = scores[rows, i1], scores[rows, i2]
    other = np.where(np.arange(k)[None, :] == i1[:, None], top2[:, None], top1[:, None])
    per_label = np.maximum(0.0, other + 1.0 - scores)
    loss_true = per_label[rows, y]
    flipped = per_label.copy()
    flipped[rows, y] = -np.inf
    j_flip = np.argmax(flipped, axis=1)
    best_flip = flipped[rows, j_flip]
    loss_flip = best_flip - kappa * lam
    use_true = loss_true >= loss_flip
    active = np.where(use_true, y, j_flip)
    active_loss = np.where(use_true, loss_true, best_flip)
    masked = scores.copy()
    masked[rows, active] = -np.inf
    c = np.argmax(masked, axis=1)
    on = active_loss > 0
    weights = np.zeros((n, k))
    np.add.at(weights, (rows[on], c[on]), 1.0)
    np.add.at(weights, (rows[on], active[on]), -1.0)
    grad = weights.T @ X
    loss_sum = float(np.where(use_true, loss_true, loss_flip).sum())
    grad_lam_sum = float(-kappa * np.count_nonzero(~use_true))
    return loss_sum, grad_lam_sum, grad


@pytest.mark.parametrize("k", [2, 3, 5])
def test_kernel_matches_numpy(k):
    rng = np.random.default_rng(k)
    X = rng.standard_normal((300, 6))
    y = rng.integers(0, k, 300)
    coef = 0.5 * rng.standard_normal((k, 6))
    for lam in (0.0, 0.4, 3.0):
        grad = np.empty_like(coef)
        loss, glam = dro_cs_pass(X, y, coef, lam, 0.7, grad)
        loss_ref, glam_ref, grad_ref = dro_cs_pass_numpy(X, y, coef, lam, 0.7)
        assert loss == pytest.approx(loss_ref, abs=1e-10)
        assert glam == pytest.approx(glam_ref, abs=1e-12)
        np.testing.assert_allclose(grad, grad_ref, atol=1e-12)


def test_kernel_ties_match_numpy():
    # integer scores create ties everywhere; both must follow the same rule
    rng = np.random.default_rng(0)
    X = rng.integers(-1, 2, (200, 3)).astype(float)
    y = rng.integers(0, 4, 200)
    coef = rng.integers(-1, 2, (4, 3)).astype(float)
    grad = np.empty_like(coef)
    loss, glam = dro_cs_pass(X, y, coef, 1.0, 1.0, grad)
    loss_ref, glam_ref, grad_ref = dro_cs_pass_numpy(X, y, coef, 1.0, 1.0)
    assert (loss, glam) == pytest.approx((loss_ref, glam_ref))
    np.testing.assert_array_equal(grad, grad_ref)


@pytest.mark.parametrize("seed", range(12))
def test_numpy_pass_gives_the_kernels_bits(seed):
    # the numpy pass sums in the kernel's order: a fit is the same whichever runs
    from skfed.linear_model._dro_pass import dro_cs_pass_numpy as numpy_pass

    rng = np.random.default_rng(seed)
    n, k, p = int(rng.integers(1, 120)), int(rng.integers(2, 7)), int(rng.integers(1, 30))
    if seed % 3 == 0:  # ties everywhere
        X = rng.integers(-1, 2, (n, p)).astype(float)
        coef = rng.integers(-1, 2, (k, p)).astype(float)
    else:
        X, coef = rng.standard_normal((n, p)), rng.uniform(0, 2) * rng.standard_normal((k, p))
    y = rng.integers(0, k, n)
    lam, kappa = [0.0, 0.3, 2.0, np.inf][seed % 4], float(rng.uniform(0, 2))
    grad, grad_np = np.empty_like(coef), np.full_like(coef, np.nan)
    out = numpy_pass(X, y, coef, lam, kappa, grad_np)
    assert out == dro_cs_pass(X, y, coef, lam, kappa, grad)
    np.testing.assert_array_equal(grad_np, grad)
    if np.isfinite(lam):  # and both are the loss (the plain reference, to rounding)
        loss_ref, glam_ref, grad_ref = dro_cs_pass_numpy(X, y, coef, lam, kappa)
        assert out == pytest.approx((loss_ref, glam_ref), abs=1e-10)
        np.testing.assert_allclose(grad_np, grad_ref, atol=1e-12)


def test_pass_takes_numpy_until_numba_pays(monkeypatch):
    from skfed.linear_model import _dro_pass

    rng = np.random.default_rng(0)
    X, y, coef = rng.standard_normal((50, 4)), rng.integers(0, 3, 50), rng.standard_normal((3, 4))
    grad = np.empty_like(coef)
    calls = []
    monkeypatch.setattr(_dro_pass, "dro_cs_pass_numpy",
                        lambda *a: calls.append("numpy") or (0.0, 0.0))
    monkeypatch.setattr(_dro_pass, "_kernel_loaded", lambda: False)
    monkeypatch.setattr(_dro_pass, "_spent", [0.0])
    _dro_pass.dro_cs_pass(X, y, coef, 0.0, 1.0, grad)
    assert calls == ["numpy"]
    monkeypatch.setattr(_dro_pass, "_spent", [_dro_pass.NUMPY_BUDGET_S])  # numpy took long
    assert _dro_pass.dro_cs_pass(X, y, coef, 0.0, 1.0, grad) == dro_cs_pass(
        X, y, coef, 0.0, 1.0, np.empty_like(coef))
    assert calls == ["numpy"]
    monkeypatch.setattr(_dro_pass, "_spent", [0.0])
    monkeypatch.setattr(_dro_pass, "LARGE_PASS", 50 * 3 * 4)  # one large pass
    _dro_pass.dro_cs_pass(X, y, coef, 0.0, 1.0, grad)
    assert calls == ["numpy"]
    monkeypatch.setattr(_dro_pass, "_kernel_loaded", lambda: True)  # numba's kernel is here
    monkeypatch.setattr(_dro_pass, "LARGE_PASS", 10**9)
    _dro_pass.dro_cs_pass(X, y, coef, 0.0, 1.0, grad)
    assert calls == ["numpy"]


def test_small_private_fit_does_not_load_numba():
    # a Flower site's process makes one pass per message: on small data it stays in numpy
    import subprocess
    import sys

    code = ("import sys, warnings; warnings.simplefilter('ignore')\n"
            "from skfed.datasets import make_federated_regression\n"
            "from skfed.linear_model import DPFedDROClassifier\n"
            "import numpy as np\n"
            "X, y, g = make_federated_regression(n_clients=3, n_samples=60, random_state=0)\n"
            "X /= np.linalg.norm(X, axis=1, keepdims=True)\n"
            "DPFedDROClassifier(epsilon=0.5, n_rounds=3, random_state=0).fit(\n"
            "    X, (y > 0).astype(int), groups=g)\n"
            "print('numba' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_subgradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    X = _unit_rows(rng, 40, 3)
    y = rng.integers(0, 3, 40)
    coef = rng.standard_normal((3, 3))
    lam, tau, kappa, gamma = 0.3, 0.2, 0.5, 0.1

    def f(c, lam):
        loss, pen, _, _ = local_terms(X, y, c.reshape(3, 3), lam, tau, kappa, gamma, "l1")
        return loss + pen

    _, _, g_coef, g_lam = local_terms(X, y, coef, lam, tau, kappa, gamma, "l1")
    h = 1e-7  # a generic point: f is differentiable there
    num = np.array([(f(coef.ravel() + h * e, lam) - f(coef.ravel() - h * e, lam)) / (2 * h)
                    for e in np.eye(9)])
    np.testing.assert_allclose(g_coef.ravel(), num, atol=1e-5)
    assert g_lam == pytest.approx((f(coef.ravel(), lam + h) - f(coef.ravel(), lam - h)) / (2 * h),
                                  abs=1e-5)


def test_closed_form_update_minimises_linearised_objective():
    rng = np.random.default_rng(2)
    k, p = 3, 4
    coef_t, center, mu, g_coef = (rng.standard_normal((k, p)) for _ in range(4))
    lam_t, g_lam = 0.4, -0.3
    rho, eta, nu, r = 0.8, 0.05, 0.3, 0.1

    def surrogate(z):
        m, lam = z[:-1].reshape(k, p), z[-1]
        return (lam * r + np.sum(g_coef * (m - coef_t)) + g_lam * (lam - lam_t)
                + rho / 2 * np.sum((m - center + mu) ** 2)
                + np.sum((m - coef_t) ** 2) / (2 * eta) + (lam - lam_t) ** 2 / (2 * nu))

    res = minimize(surrogate, np.zeros(k * p + 1), method="BFGS", options={"gtol": 1e-10})
    coef, lam = prox_linear_update(coef_t, lam_t, g_coef, g_lam, center, mu, rho=rho,
                                   eta=eta, nu=nu, radius=r)
    np.testing.assert_allclose(coef.ravel(), res.x[:-1], atol=1e-6)
    assert lam == pytest.approx(res.x[-1], abs=1e-6)


# ---------------------------------------------------------------- exact local solve


def _exact_objective(X, y, coef, *, radius, kappa, rho, center, dual):
    """min over lambda >= phi(M) of the Prop. 1 objective, by enumerating breakpoints."""
    coef = coef.reshape(center.shape)
    lo = phi(coef, dual)
    scores = X @ coef.T
    rows = np.arange(X.shape[0])
    k = coef.shape[0]
    per = np.empty_like(scores)
    for j in range(k):  # l(j) = max(0, max_{c != j} s_c + 1 - s_j)
        per[:, j] = np.maximum(0.0, np.delete(scores, j, axis=1).max(axis=1) + 1 - scores[:, j])
    a = per[rows, y]
    per[rows, y] = -np.inf
    b = per.max(axis=1)
    # L_n is piecewise linear in lambda with a kink where the flipped branch stops binding
    lams = np.maximum(lo, np.r_[lo, (b - a) / kappa])
    vals = lams * radius + np.maximum(a[None, :], b[None, :] - kappa * lams[:, None]).mean(1)
    return vals.min() + rho / 2 * np.sum((coef - center) ** 2)


@pytest.mark.parametrize("dual", ["l1", "linf"])
def test_lp_local_solve_matches_brute_force(dual):
    rng = np.random.default_rng(3)
    X = _unit_rows(rng, 12, 2)
    y = rng.integers(0, 3, 12)
    center = 0.3 * rng.standard_normal((3, 2))
    kw = dict(radius=0.05, kappa=0.5, rho=0.8)
    coef, lam = solve_cs_dro_local(X, y, 3, center, dual=dual, **kw)
    assert lam >= phi(coef, dual) - 1e-7
    ours = _exact_objective(X, y, coef, center=center, dual=dual, **kw)
    best = np.inf
    # the problem is convex: no descent from our solution means it is the optimum
    for start in [coef.ravel(), center.ravel(), coef.ravel() + 0.1 * rng.standard_normal(6)]:
        res = minimize(lambda m: _exact_objective(X, y, m, center=center, dual=dual, **kw),
                       start, method="Nelder-Mead",
                       options={"xatol": 1e-9, "fatol": 1e-11, "maxiter": 4000})
        best = min(best, res.fun)
    assert ours <= best + 1e-6
    assert ours == pytest.approx(best, abs=1e-4)


def test_binary_lp_local_solve_matches_brute_force():
    rng = np.random.default_rng(4)
    X = _unit_rows(rng, 15, 2)
    y = np.where(rng.random(15) < 0.5, -1.0, 1.0)
    center = np.array([0.2, -0.1])
    w, lam = solve_binary_dro_local(X, y, center, radius=0.05, kappa=0.5, rho=0.8, dual="l1")

    def obj(w):
        lo = np.abs(w).sum()
        m = y * (X @ w)
        cands = [lo] + [max(lo, (1 + mm - max(1 - mm, 0)) / 0.5) for mm in m]
        vals = [lam_ * 0.05 + np.mean(np.maximum.reduce([1 - m, 1 + m - 0.5 * lam_,
                                                         np.zeros_like(m)]))
                for lam_ in cands]
        return min(vals) + 0.4 * np.sum((w - center) ** 2)

    best = min(minimize(obj, s, method="Nelder-Mead",
                        options={"xatol": 1e-10, "fatol": 1e-12}).fun
               for s in [center, np.zeros(2), np.ones(2), -np.ones(2)])
    assert obj(w) <= best + 1e-6


# ---------------------------------------------------------------- step sizes, noise


def test_step_sizes_and_sigmas_match_worked_values():
    # spec 3.4 worked values for the pump setting (N_g=400, K=4, P=13, T=150)
    expected = {0.05: (0.0277, 0.322, 0.0209, 0.191), 0.10: (0.0479, 0.342, 0.0177, 0.101),
                0.20: (0.0676, 0.348, 0.0123, 0.0515)}
    for eps, (eta_ref, nu_ref, sM_ref, sl_ref) in expected.items():
        e_M, e_l = split_round_budget(eps)
        eta, nu = step_sizes(400, n_rounds=150, n_classes=4, n_features=13, norm_bound=1.0,
                             C=0.4, V=1.0, radius=0.1, kappa=0.5, epsilon_M=e_M,
                             epsilon_lambda=e_l, delta=1e-6, c_M=2.0, c_lambda=6.0)
        d_M, d_l = sensitivities(400, norm_bound=1.0, rho=0.8, eta=eta, kappa=0.5, nu=nu)
        z = math.sqrt(2 * math.log(1.25e6))
        assert eta == pytest.approx(eta_ref, rel=2e-2)
        assert nu == pytest.approx(nu_ref, rel=2e-2)
        assert d_M * z / e_M == pytest.approx(sM_ref, rel=2e-2)
        assert d_l * z / e_l == pytest.approx(sl_ref, rel=2e-2)


def test_noise_std_matches_sigma():
    rng = np.random.default_rng(5)
    X, y = _blobs(rng, n=40)
    data = Federation.from_arrays(X, y, None).clients[0]
    kw = dict(n_classes=3, n_features=4, alpha=np.ones(1), radius=np.array([0.1]), kappa=0.5,
              rho=0.8, gamma=0.1, dual="l1", private=True, eta=np.array([0.05]),
              nu=np.array([0.3]))
    noisy = DPFedDROAlgorithm(sigma_M=np.array([0.7]), sigma_lambda=np.array([0.2]), **kw)
    exact = DPFedDROAlgorithm(sigma_M=np.zeros(1), sigma_lambda=np.zeros(1), **kw)
    state = noisy.client_init(data, None)
    bc = {"coef": np.zeros((3, 4))}
    ref_state, ref = exact.client_step(data, state, bc, np.random.default_rng(0))
    diffs, lam_diffs = [], []
    for seed in range(1500):
        new, msg = noisy.client_step(data, state, bc, np.random.default_rng(seed))
        diffs.append(msg["coef"] - ref["coef"])
        lam_diffs.append(new["lam"] - ref_state["lam"])
    diffs = np.array(diffs)
    assert diffs.std() == pytest.approx(0.7, rel=0.02)
    assert abs(diffs.mean()) < 0.01
    assert np.std(lam_diffs) == pytest.approx(0.2, rel=0.06)


# ---------------------------------------------------------------- accountant


def test_paper_totals():
    assert dpfeddro_epsilon(50, *split_round_budget(0.5), 1e-6) == pytest.approx(3.7299, abs=1e-4)
    eps = dpfeddro_epsilon(120, *split_round_budget(0.2), 1e-8)
    assert eps == pytest.approx(2.2421, abs=1e-4)
    # the paper's own form of the second term
    e_M, e_l = split_round_budget(0.5)
    a = 50 * (e_M**2 + e_l**2)
    ref = a / (4 * math.log(1.25e6)) + math.sqrt(a * math.log(1e6) / math.log(1.25e6))
    assert dpfeddro_epsilon(50, e_M, e_l, 1e-6) == pytest.approx(ref, rel=1e-12)
    assert dpfeddro_per_round_epsilon(3.7299, 50, 1e-6) == pytest.approx(0.5, abs=1e-5)


@pytest.fixture(scope="module")
def small_problem():
    rng = np.random.default_rng(6)
    X, y = _blobs(rng, n=160)
    return X, y, rng.integers(0, 4, X.shape[0])


def test_estimator_reports_paper_total(small_problem):
    X, y, groups = small_problem
    clf = DPFedDROClassifier(epsilon=0.5, delta=1e-6, n_rounds=50, classes=[0, 1, 2],
                             accountant="paper", random_state=0)
    clf.fit(X, y, groups=groups)
    spent = clf.privacy_spent_
    assert (spent["epsilon"], spent["delta"]) == pytest.approx((3.7299, 1e-6), abs=1e-4)
    assert spent["strict"] and spent["n_releases"] == 100 and spent["outside"] == []
    assert spent["noise_multiplier"] == clf.noise_multiplier_
    assert clf.privacy_unit_ == "record"
    z = math.sqrt(2 * math.log(1.25e6))
    e_M, e_l = split_round_budget(0.5)
    assert clf.noise_multiplier_ == pytest.approx((z / e_M, z / e_l))
    np.testing.assert_allclose(clf.noise_sigma_M_, clf.sensitivity_M_ * z / e_M)
    np.testing.assert_allclose(clf.noise_sigma_lambda_, clf.sensitivity_lambda_ * z / e_l)
    np.testing.assert_allclose(
        clf.sensitivity_M_,
        2 * math.sqrt(2) / (np.bincount(groups) * (0.8 + 1 / clf.eta_)),
    )


def test_rdp_accountant_matches_dp_accounting(small_problem):
    X, y, groups = small_problem
    clf = DPFedDROClassifier(epsilon=0.5, delta=1e-6, n_rounds=20, accountant="rdp",
                             standardize=False, temperature_share=0, classes=[0, 1, 2],
                             random_state=0).fit(X, y, groups=groups)
    z_M, z_l = clf.noise_multiplier_
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(z_M), 20)
    acc.compose(dp_accounting.GaussianDpEvent(z_l), 20)
    assert clf.privacy_spent_["epsilon"] == pytest.approx(acc.get_epsilon(1e-6), rel=1e-9)
    paper = dpfeddro_epsilon(20, *split_round_budget(0.5), 1e-6)
    assert clf.privacy_spent_["epsilon"] < paper  # RDP is tighter than the closed form


@pytest.mark.parametrize("accountant", ["paper", "rdp", "pld"])
def test_target_epsilon_is_spent(small_problem, accountant):
    X, y, groups = small_problem
    clf = DPFedDROClassifier(target_epsilon=2.0, target_delta=1e-5, n_rounds=10,
                             accountant=accountant, classes=[0, 1, 2],
                             random_state=0).fit(X, y, groups=groups)
    assert clf.privacy_spent_["epsilon"] == pytest.approx(2.0, rel=1e-4)
    assert clf.privacy_spent_["epsilon"] <= 2.0 + 1e-9
    assert clf.privacy_spent_["delta"] == 1e-5
    if accountant != "paper":  # direct dp-accounting computation of what was released
        acc = (dp_accounting.rdp.RdpAccountant() if accountant == "rdp"
               else dp_accounting.pld.PLDAccountant())
        scale = math.sqrt(2 * math.log(1.25e5))
        for e in clf._privacy_plan()[0]:
            acc.compose(dp_accounting.GaussianDpEvent(scale / e), 10)
        assert acc.get_epsilon(1e-5) <= 2.0


def test_unreachable_target_is_a_clear_error(small_problem):
    X, y, groups = small_problem
    clf = DPFedDROClassifier(target_epsilon=1e7, target_delta=1e-5, n_rounds=2,
                             accountant="rdp")
    with pytest.raises(ValueError, match="target_epsilon=.*cannot be calibrated in 2 rounds"):
        clf.fit(X, y, groups=groups)


def test_pld_target_calibration_of_the_paper_budget():
    # the case: 50 rounds at the paper's total 3.7299 (calibrated in about a second)
    clf = DPFedDROClassifier(accountant="pld", target_epsilon=3.7299, target_delta=1e-6,
                             standardize=False, temperature_share=0)
    eps_M, eps_l = clf._privacy_plan()[0]
    rdp = DPFedDROClassifier(accountant="rdp", target_epsilon=3.7299, target_delta=1e-6,
                             standardize=False, temperature_share=0)
    # PLD is tighter than RDP, which is tighter than the paper's 0.5 per round
    assert math.hypot(eps_M, eps_l) > math.hypot(*rdp._privacy_plan()[0]) > 0.5
    assert privacy_spent(50, (eps_M, eps_l), 1e-6, 1e-6, "pld") == pytest.approx(
        3.7299, rel=1e-4)


# ---------------------------------------------------------------- protocol, ledger


def test_only_noisy_models_cross(small_problem):
    X, y, groups = small_problem
    clf = DPFedDROClassifier(epsilon=0.5, n_rounds=5, random_state=0).fit(X, y, groups=groups)
    ups = [r for r in clf.communication_.records if r.direction == "up" and r.round >= 0]
    # round 0: the private scaling's noisy histograms (4 features x 83 public bins);
    # the last: the noisy summed log losses of the temperature (8 public temperatures)
    assert len(ups) == 7 * 4
    assert all(r.names == ("histogram",) and r.shapes == ((4, 83),) for r in ups[:4])
    assert all(r.names == ("coef",) and r.shapes == ((3, 4),) for r in ups[4:-4])
    assert all(r.names == ("log_loss",) and r.shapes == ((8,),) for r in ups[-4:])
    # set-up (round -1): row and feature counts and the class labels a site holds
    setup = [r for r in clf.communication_.records if r.round == -1 and r.direction == "up"]
    assert {r.names for r in setup} == {("n_samples", "n_features", "classes")}
    # the payloads are the noisy models, not the noiseless updates or any rows
    fed = Federation.from_arrays(X, y, groups, min_samples=2)
    ledger = Ledger(keep_payloads=True)
    kw = dict(n_classes=3, n_features=4, alpha=np.full(4, 0.25), radius=np.full(4, 0.1),
              kappa=0.5, rho=0.8, gamma=0.1, dual="l1", private=True, eta=clf.eta_,
              nu=clf.nu_)
    noisy = DPFedDROAlgorithm(sigma_M=clf.noise_sigma_M_, sigma_lambda=clf.noise_sigma_lambda_,
                              **kw)
    result = run_federation(noisy, fed, n_rounds=3, random_state=0, ledger=ledger)
    last_up = {rec.client: pay for rec, pay in zip(ledger.records, ledger.payloads)
               if rec.direction == "up" and rec.round == 2}
    for state, label in zip(result.client_states, fed.labels):
        np.testing.assert_array_equal(last_up[label]["coef"], state["coef"])
    exact = DPFedDROAlgorithm(sigma_M=np.zeros(4), sigma_lambda=np.zeros(4), **kw)
    _, msg = exact.client_step(fed.clients[0], exact.client_init(fed.clients[0], None),
                               {"coef": np.zeros((3, 4))}, np.random.default_rng(0))
    first_up = next(p for r, p in zip(ledger.records, ledger.payloads) if r.direction == "up")
    assert not np.allclose(first_up["coef"], msg["coef"])


def test_reproducible_and_independent_of_n_jobs(small_problem):
    X, y, groups = small_problem
    a = DPFedDROClassifier(n_rounds=5, random_state=3).fit(X, y, groups=groups)
    b = DPFedDROClassifier(n_rounds=5, random_state=3, n_jobs=2).fit(X, y, groups=groups)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    c = DPFedDROClassifier(n_rounds=5, random_state=4).fit(X, y, groups=groups)
    assert not np.array_equal(a.coef_, c.coef_)


# ---------------------------------------------------------------- learning


def test_separable_data_is_separated():
    rng = np.random.default_rng(7)
    X, y = _blobs(rng, n=400, noise=0.05)
    groups = rng.integers(0, 2, 400)
    private = DPFedDROClassifier(epsilon=0.9, delta=1e-5, c_M=2.0, n_rounds=40,
                                 random_state=0).fit(X, y, groups=groups)
    assert private.score(X, y) == 1.0
    exact = DPFedDROClassifier(epsilon=None, n_rounds=8, rho=0.5, radius=1e-3,
                               kappa=0.5).fit(X[:120], y[:120], groups=groups[:120])
    assert exact.score(X, y) == 1.0
    assert exact.privacy_spent_["epsilon"] == math.inf and not exact.privacy_spent_["strict"]
    assert exact.history_["objective"].shape == (8,)


def test_non_private_admm_reaches_consensus():
    rng = np.random.default_rng(8)
    X, y = _blobs(rng, n=36, noise=0.4)
    groups = np.repeat([0, 1, 2], 12)
    clf = DPFedDROClassifier(epsilon=None, n_rounds=8, rho=0.5, radius=1e-2, kappa=0.5,
                             fit_intercept=False)
    clf.fit(X, y, groups=groups)
    spread = np.abs(clf.client_coefs_ - clf.coef_[None]).max()
    assert spread < 0.05 * max(1.0, np.abs(clf.coef_).max())


def test_history_shapes_and_output_models(small_problem):
    X, y, groups = small_problem
    last = DPFedDROClassifier(n_rounds=6, random_state=0).fit(X, y, groups=groups)
    avg = DPFedDROClassifier(n_rounds=6, random_state=0, output_model="average").fit(
        X, y, groups=groups)
    assert last.n_iter_ == 6
    for key in ("objective", "consensus_violation", "convergence_metric"):
        assert last.history_[key].shape == (6,)
    assert last.history_["lambda"].shape == last.history_["tau"].shape == (4, 6)
    assert last.client_coefs_.shape == (4, 3, 4)
    assert not np.allclose(last.coef_, avg.coef_)


def test_string_labels_binary_and_intercept():
    rng = np.random.default_rng(9)
    X, y = _blobs(rng, n=200, k=2, p=3, noise=0.1)
    X *= 0.7  # leave room for the constant feature below the bound
    labels = np.array(["no", "yes"])[y]
    clf = DPFedDROClassifier(epsilon=None, n_rounds=4, fit_intercept=True).fit(X, labels)
    assert clf.classes_.tolist() == ["no", "yes"]
    assert clf.decision_function(X).shape == (200,)
    assert clf.intercept_.shape == (2,)
    assert set(clf.predict(X)) <= {"no", "yes"}
    assert clf.score(X, labels) > 0.95
    dp = DPFedDROClassifier(fit_intercept=True, n_rounds=3, random_state=0).fit(X, labels)
    z = math.sqrt(2 * math.log(1.25e6)) / split_round_budget(0.5)[0]
    n = 200
    expected = 2 * math.sqrt(2) * math.sqrt(2.0) / (n * (0.8 + 1 / dp.eta_[0])) * z
    assert dp.noise_sigma_M_[0] == pytest.approx(expected)


def test_normalizer_rows_pass_the_norm_check():
    rng = np.random.default_rng(10)
    X = Normalizer().fit_transform(rng.uniform(0, 1e3, (50, 7)))
    y = rng.integers(0, 3, 50)
    DPFedDROClassifier(n_rounds=2).fit(X, y)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(epsilon=0.0), "epsilon"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(delta=0.0), "delta"),
        (dict(delta=1.0), "delta"),
        (dict(target_epsilon=-1.0, target_delta=1e-5), "target_epsilon"),
        (dict(accountant="moments"), "accountant"),
        (dict(feature_norm="l3"), "feature_norm"),
        (dict(budget_split=1.0), "budget_split"),
        (dict(radius=[0.1, 0.2]), "radius"),
        (dict(alpha=[0.5, 0.6, 0.0, 0.0]), "alpha"),
        (dict(n_rounds=0), "n_rounds"),
    ],
)
def test_bad_parameters(small_problem, params, match):
    X, y, groups = small_problem
    with pytest.raises(ValueError, match=match):
        DPFedDROClassifier(**params).fit(X, y, groups=groups)


def test_bad_data():
    rng = np.random.default_rng(11)
    X, y = _blobs(rng, n=30)
    clf = DPFedDROClassifier(n_rounds=2, standardize=False)  # the rows as given
    with pytest.raises(ValueError, match="1 class"):
        clf.fit(X, np.zeros(30))
    with pytest.raises(ValueError, match="norm_bound"):
        clf.fit(X * 1.01, y)
    groups = np.r_[np.zeros(29), 1]
    with pytest.raises(ValueError, match="at least 2"):
        clf.fit(X, y, groups=groups)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.fit(Xn, y)
    with pytest.raises(ValueError):
        clf.fit(np.array([["a", "b"]] * 30), y)
    with pytest.raises(ValueError, match="l2"):
        DPFedDROClassifier(epsilon=None, feature_norm="l2").fit(X, y)


def test_failed_fit_keeps_previous_model():
    rng = np.random.default_rng(12)
    X, y = _blobs(rng, n=30)
    clf = DPFedDROClassifier(n_rounds=2, random_state=0).fit(X, y)
    coef = clf.coef_.copy()
    with pytest.raises(ValueError):
        clf.fit(X[:, :2], y, groups=np.r_[np.zeros(29), 1])
    np.testing.assert_array_equal(clf.coef_, coef)


def test_predict_uses_global_model_and_checks_groups(small_problem):
    X, y, groups = small_problem
    clf = DPFedDROClassifier(n_rounds=3, random_state=0, unknown_client="error",
                             personalize=False)
    clf.fit(X, y, groups=groups)
    np.testing.assert_array_equal(clf.predict(X, groups=groups), clf.predict(X))
    with pytest.raises(ValueError, match="not seen"):
        clf.predict(X[:2], groups=[99, 99])


def _random_local_problem(rng):
    n, p, k = int(rng.integers(3, 40)), int(rng.integers(1, 6)), int(rng.integers(2, 5))
    X = rng.standard_normal((n, p)) * 10.0 ** rng.uniform(-2, 3, p)  # mixed feature units
    y = rng.integers(0, k, n)
    center = rng.standard_normal((k, p)) * 10.0 ** rng.uniform(-3, 1)
    kw = dict(radius=float(rng.choice([0.0, 1e-3, 0.1])), kappa=float(rng.uniform(0.1, 2)),
              rho=float(10.0 ** rng.uniform(-3, 1)), dual=str(rng.choice(["l1", "linf"])))
    return X, y, k, center, kw


def test_exact_local_solve_never_fails_and_matches_a_reference():
    from skfed.linear_model._admm import cs_dro_local_lp

    try:
        import clarabel
    except ImportError:  # the reference solver is optional; the KKT-free checks still run
        clarabel = None
    rng = np.random.default_rng(13)
    for _ in range(300):
        X, y, k, center, kw = _random_local_problem(rng)
        coef, lam = solve_cs_dro_local(X, y, k, center, **kw)
        assert lam >= phi(coef, kw["dual"]) - 1e-6 * max(1.0, lam)
        ours = _exact_objective(X, y, coef, center=center, radius=kw["radius"],
                                kappa=kw["kappa"], rho=kw["rho"], dual=kw["dual"])
        if clarabel is None:
            continue
        # an independent interior-point solver on the same QP
        c, A, b, bounds, quad, _ = cs_dro_local_lp(X, y, k, radius=kw["radius"],
                                                   kappa=kw["kappa"], dual=kw["dual"])
        n_vars = c.size
        lower = np.array([-np.inf if lo is None else lo for lo, _ in bounds])
        bound_rows = np.flatnonzero(np.isfinite(lower))
        G = sparse.vstack([A, sparse.csc_matrix(
            (-np.ones(bound_rows.size), (np.arange(bound_rows.size), bound_rows)),
            shape=(bound_rows.size, n_vars))]).tocsc()
        h = np.concatenate([b, -lower[bound_rows]])
        P = sparse.diags(np.isin(np.arange(n_vars), quad) * kw["rho"], format="csc")
        q = c.copy()
        q[quad] -= kw["rho"] * center.ravel()
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        sol = clarabel.DefaultSolver(P, q, G, h, [clarabel.NonnegativeConeT(G.shape[0])],
                                     settings).solve()
        z = np.array(sol.x)
        ref = c @ z + kw["rho"] / 2 * np.sum((z[quad] - center.ravel()) ** 2)
        assert ours == pytest.approx(ref, rel=1e-6, abs=1e-6)


def test_prox_qp_survives_a_spurious_dual_infeasibility_report():
    # a one-vs-all client QP of the UCI Wine benchmark (seed 1, round 17) that PIQP
    # declares dual infeasible with and without its scaling; it is bounded below
    from pathlib import Path

    from skfed.linear_model._admm import solve_prox_qp

    d = np.load(Path(__file__).parent / "data" / "piqp_dual_infeasible.npz")
    bounds = [(None if np.isinf(lo) else lo, None if np.isinf(up) else up)
              for lo, up in zip(d["lower"], d["upper"])]
    rho = float(d["rho"])
    z = solve_prox_qp(d["c"], sparse.csr_matrix(d["A"]), d["b"], bounds, d["quad_cols"],
                      d["center"], rho)
    assert np.all(d["A"] @ z <= d["b"] + 1e-6) and np.all(z >= d["lower"] - 1e-6)
    objective = d["c"] @ z + rho / 2 * np.sum((z[d["quad_cols"]] - d["center"]) ** 2)
    # PIQP with its infeasibility test off and with a smaller initial regularization
    # agree on this value (the constant term rho/2 ||center||^2 included)
    ref = -0.566576520810743 + rho / 2 * np.sum(d["center"] ** 2)
    assert objective == pytest.approx(ref, abs=1e-6)


def test_local_solve_failure_names_client_and_round(monkeypatch):
    from skfed.linear_model import _admm

    def fail(*args, **kwargs):
        raise _admm.LocalSolveError("local QP solver (PIQP) status PIQP_MAX_ITER_REACHED")

    monkeypatch.setattr(_admm, "solve_prox_qp", fail)
    rng = np.random.default_rng(14)
    X, y = _blobs(rng, n=40)
    groups = np.where(np.arange(40) < 20, "a", "b")
    with pytest.raises(RuntimeError, match=r"client 'a', round 1: .*PIQP.*larger rho"):
        DPFedDROClassifier(epsilon=None, n_rounds=2).fit(X, y, groups=groups)


def test_grouped_rows_are_not_copied_and_give_the_same_model(small_problem):
    from skfed.federated import Federation

    X, y, groups = small_problem
    order = np.argsort(groups, kind="stable")
    Xs, ys, gs = X[order], y[order], groups[order]
    fed = Federation.from_arrays(Xs, ys, gs)
    assert all(np.shares_memory(c.X, Xs) for c in fed.clients)
    a = DPFedDROClassifier(n_rounds=4, random_state=0).fit(X, y, groups=groups)
    b = DPFedDROClassifier(n_rounds=4, random_state=0).fit(Xs, ys, groups=gs)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-10)


# ---------------------------------------------------------------- raw units, probabilities


def test_non_private_mode_standardizes_raw_units_from_site_moments():
    rng = np.random.default_rng(15)
    X, y = _blobs(rng, n=120)
    groups = rng.integers(0, 3, 120)
    units = np.array([1e3, 1.0, 1e-2, 50.0])
    shift = np.array([5e4, -3.0, 0.0, 10.0])
    raw = DPFedDROClassifier(epsilon=None, n_rounds=10).fit(X * units + shift, y,
                                                            groups=groups)
    std = DPFedDROClassifier(epsilon=None, n_rounds=10).fit(X, y, groups=groups)
    # the same standardized problem: identical predictions, scores in raw units
    np.testing.assert_allclose(raw.decision_function(X * units + shift),
                               std.decision_function(X), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(raw.feature_mean_, (X * units + shift).mean(axis=0))
    np.testing.assert_allclose(raw.feature_scale_, (X * units).std(axis=0))
    # only aggregates of rows cross in the set-up exchange
    setup = [r for r in raw.communication_.records if r.round == -1 and r.direction == "up"]
    assert all(set(r.names) == {"n_samples", "n_features", "classes", "feature_sum",
                                "feature_m2"} for r in setup)


@pytest.mark.parametrize("standardize", [True, "auto"])
def test_private_fit_never_sends_feature_moments(standardize):
    # was: standardize=True in a private fit sent each site's exact feature sums and squared
    # deviations in the set-up (outside the guarantee, while privacy_spent_ said strict) and
    # the pooled standardization made every site's scaling depend on the others' rows
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    X = 5.0 * np.eye(3)[y] + rng.standard_normal((300, 3))
    groups = rng.integers(0, 3, 300)
    clf = DPFedDROClassifier(n_rounds=3, classes=[0, 1, 2], standardize=standardize,
                             random_state=0).fit(X, y, groups=groups)
    sent = {name for r in clf.communication_.records if r.direction == "up"
            for name in r.names}
    assert not sent & {"feature_sum", "feature_m2"}
    assert clf.feature_mean_ is None and clf.feature_range_ is not None  # private scaling
    assert clf.privacy_spent_["strict"] and not clf.privacy_spent_["outside"]
    assert "scaling" in [r["name"] for r in clf.privacy_spent_["releases"]]


def test_numpy_false_turns_standardization_off(small_problem):
    # "boolean" admits np.False_, which is not False: it standardized as True did
    X, y, groups = small_problem
    kw = dict(epsilon=None, n_rounds=5)
    Xs = X * np.array([1.0, 100.0, 0.01, 1.0])[:X.shape[1]]
    off = DPFedDROClassifier(standardize=False, **kw).fit(Xs, y, groups=groups)
    npoff = DPFedDROClassifier(standardize=np.False_, **kw).fit(Xs, y, groups=groups)
    np.testing.assert_array_equal(npoff.coef_, off.coef_)
    assert npoff.feature_mean_ is None


def test_predict_proba_is_calibrated_softmax(small_problem):
    from scipy.special import softmax
    from sklearn.metrics import log_loss

    X, y, groups = small_problem
    clf = DPFedDROClassifier(epsilon=None, n_rounds=10).fit(X, y, groups=groups)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba, softmax(clf.decision_function(X) / clf.temperature_,
                                              axis=1))
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X)), proba)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], clf.predict(X))
    assert clf.n_iter_ == 10
    # the fitted temperature is the best of a fine grid on the training rows
    best = min(log_loss(y, softmax(clf.decision_function(X) / t, axis=1))
               for t in np.logspace(-3, 3, 601))
    assert log_loss(y, proba) <= best + 1e-3
    # the extra round sends only the clients' summed log losses on the fixed grid
    last = [r for r in clf.communication_.records if r.round == 10 and r.direction == "up"]
    assert len(last) == 4 and all(r.names == ("log_loss",) for r in last)
    # private: a noisy release of the summed losses (tests/linear_model/
    # test_dro_private_defaults.py), or nothing more and temperature 1
    dp = DPFedDROClassifier(n_rounds=3, temperature_share=0, random_state=0).fit(
        X, y, groups=groups)
    assert dp.temperature_ == 1.0 and dp.n_iter_ == 3
    np.testing.assert_allclose(dp.predict_proba(X), softmax(dp.decision_function(X), axis=1))


def test_two_rows_log_loss_sums_give_their_margins():
    # why a two-row site sends no calibration sums: its 61 summed log losses (binary)
    # are a function of its two score margins, which least squares recovers
    from scipy.optimize import least_squares

    from skfed.linear_model._admm import TEMPERATURE_GRID, softmax_log_loss_grid

    scores, y = np.random.default_rng(0).normal(size=(2, 2)), np.array([0, 1])
    curve = softmax_log_loss_grid(scores, y)
    margins = scores[[0, 1], [1, 0]] - scores[[0, 1], y]

    def residual(m):
        return np.logaddexp(0.0, TEMPERATURE_GRID[:, None] * m[None]).sum(axis=1) - curve

    fits = [least_squares(residual, np.array(start), xtol=1e-15, ftol=1e-15, gtol=1e-15)
            for start in [(0.3, -0.2), (1.0, 1.0), (-1.0, -1.0), (1.0, -1.0)]]
    best = min(fits, key=lambda f: f.cost)
    np.testing.assert_allclose(np.sort(best.x), np.sort(margins), atol=1e-6)


def test_small_sites_send_no_calibration_sums():
    from skfed.federated._ledger import keeping_payloads
    from skfed.linear_model._admm import (TEMPERATURE_GRID, pick_temperature,
                                          softmax_log_loss_grid)

    rng = np.random.default_rng(3)
    X, y = _blobs(rng, n=122)  # 3 classes, 4 features: 2 margins per row
    groups = np.repeat([0, 1, 2, 3], [2, 40, 40, 40])
    with keeping_payloads():
        clf = DPFedDROClassifier(epsilon=None, n_rounds=4).fit(X, y, groups=groups)
    ledger = clf.communication_
    last = {r.client: p for r, p in zip(ledger.records, ledger.payloads)
            if r.round == 4 and r.direction == "up"}
    # the two-row site's 61 sums would hold its 4 score margins: its row count only
    assert set(last[0]) == {"n_samples"} and int(last[0]["n_samples"]) == 2
    assert all(set(last[k]) == {"log_loss"} for k in (1, 2, 3))
    # the temperature is the best on the rows of the sites that sent their sums
    codes = np.searchsorted(clf.classes_, y)
    total = sum(softmax_log_loss_grid(clf.decision_function(X[groups == k]), codes[groups == k])
                for k in (1, 2, 3))
    assert clf.temperature_ == pytest.approx(pick_temperature(total), rel=1e-6)
    # a site needs more than 61 // 2 = 30 rows here; with none: temperature 1, warned
    assert TEMPERATURE_GRID.size == 61
    few = np.repeat([0, 1, 2, 3], 30)
    with pytest.warns(UserWarning, match="no site has more than 30 rows"):
        flat = DPFedDROClassifier(epsilon=None, n_rounds=2).fit(X[:120], y[:120], groups=few)
    assert flat.temperature_ == 1.0


def test_neg_log_loss_in_cross_validate_with_routing():
    import sklearn
    from sklearn.model_selection import GroupKFold, cross_validate

    rng = np.random.default_rng(16)
    X, y = _blobs(rng, n=120)
    g = rng.integers(0, 4, 120)
    clf = DPFedDROClassifier(epsilon=None, n_rounds=5)
    with sklearn.config_context(enable_metadata_routing=True):
        res = cross_validate(clf, X, y, cv=GroupKFold(2), scoring=["neg_log_loss", "roc_auc_ovr"],
                             params={"groups": g})
    assert np.all(np.isfinite(res["test_neg_log_loss"]))
    assert np.all(res["test_roc_auc_ovr"] > 0.9)
    assert clf.get_metadata_routing().decision_function.requests["groups"] is True


# ---------------------------------------------------------------- "auto" kappa and radius


def _overlapping_classes(seed=0, n=200):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = np.eye(3)[y] @ rng.standard_normal((3, 5)) * 0.7 + rng.standard_normal((n, 5))
    return X, y, rng.integers(0, 3, n)


def test_auto_kappa_radius_resolve_by_privacy():
    X, y, groups = _overlapping_classes()
    npv = DPFedDROClassifier(epsilon=None, n_rounds=3).fit(X, y, groups=groups)
    assert npv.kappa_ == 2.0 and np.array_equal(npv.radius_, np.full(3, 1e-3))
    assert npv.client_intercepts_.shape == (3, 3) and np.any(npv.intercept_ != 0)
    Xs = X / np.linalg.norm(X, axis=1).max()
    dp = DPFedDROClassifier(n_rounds=3, random_state=0).fit(Xs, y, groups=groups)
    assert dp.kappa_ == 0.5 and np.array_equal(dp.radius_, np.full(3, 0.1))
    assert np.array_equal(dp.client_intercepts_, np.zeros((3, 3)))
    # the private default is the paper's DP-Fed DRO setting, bit for bit
    ref = DPFedDROClassifier(n_rounds=3, random_state=0, kappa=0.5, radius=0.1,
                             fit_intercept=False).fit(Xs, y, groups=groups)
    assert np.array_equal(dp.coef_, ref.coef_)
    assert dp.noise_sigma_lambda_.tolist() == ref.noise_sigma_lambda_.tolist()
    # explicit values win over "auto"
    own = DPFedDROClassifier(epsilon=None, kappa=1.0, radius=[0.0, 0.1, 0.2], n_rounds=2)
    own.fit(X, y, groups=groups)
    assert own.kappa_ == 1.0 and own.radius_.tolist() == [0.0, 0.1, 0.2]


def test_non_private_default_is_not_the_zero_model():
    # with the private values (kappa 0.5, r 0.1) the exact problem's solution is M = 0 on
    # overlapping classes (coef ~ 1e-8: predictions from solver round-off)
    X, y, groups = _overlapping_classes()
    old = DPFedDROClassifier(epsilon=None, kappa=0.5, radius=0.1, n_rounds=5)
    with pytest.warns(UserWarning, match="numerically zero"):
        old.fit(X, y, groups=groups)
    assert np.linalg.norm(old.coef_ * old.feature_scale_) < 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        new = DPFedDROClassifier(epsilon=None, n_rounds=5).fit(X, y, groups=groups)
    assert np.linalg.norm(new.coef_ * new.feature_scale_) > 0.1
    assert new.score(X, y) > 0.6


@pytest.mark.parametrize("name, value", [("kappa", "big"), ("radius", "large"),
                                         ("kappa", None), ("fit_intercept", "yes")])
def test_bad_auto_parameters(name, value):
    X, y, groups = _overlapping_classes()
    with pytest.raises(ValueError, match=name):
        DPFedDROClassifier(epsilon=None, n_rounds=2, **{name: value}).fit(X, y, groups=groups)


# ---------------------------------------------------------------- class_weight


def test_weighted_local_solve_equals_replicated_rows():
    # integer weights are row copies: the same (strictly convex in M) local problem
    from skfed.linear_model._admm import cs_dro_objective

    rng = np.random.default_rng(20)
    X = _unit_rows(rng, 30, 3)
    y = rng.integers(0, 3, 30)
    w = rng.integers(1, 4, 30)
    center = 0.2 * rng.standard_normal((3, 3))
    kw = dict(radius=0.01, kappa=2.0, rho=0.8, dual="linf")
    coef_w, lam_w = solve_cs_dro_local(X, y, 3, center, sample_weight=w, **kw)
    Xr, yr = np.repeat(X, w, axis=0), np.repeat(y, w)
    coef_r, lam_r = solve_cs_dro_local(Xr, yr, 3, center, **kw)
    np.testing.assert_allclose(coef_w, coef_r, atol=1e-5)
    obj = dict(radius=0.01, kappa=2.0)
    assert cs_dro_objective(X, y, coef_r, lam_r, sample_weight=w, **obj) == pytest.approx(
        cs_dro_objective(Xr, yr, coef_r, lam_r, **obj), rel=1e-10)
    # the weights' scale does not matter (normalised per client)
    coef_s, _ = solve_cs_dro_local(X, y, 3, center, sample_weight=5.0 * w, **kw)
    np.testing.assert_allclose(coef_s, coef_w, atol=1e-5)


def _imbalanced(seed=0, n=400):
    # a rare class (about 8%) that the unweighted hinge never predicts
    rng = np.random.default_rng(seed)
    y = rng.choice(3, n, p=[0.5, 0.42, 0.08])
    X = np.eye(3)[y] @ rng.standard_normal((3, 4)) * 0.5 + rng.standard_normal((n, 4))
    return X * [1e3, 1.0, 10.0, 1e-2], y, rng.integers(0, 3, n)


def test_balanced_class_weight_predicts_the_rare_class():
    from sklearn.metrics import balanced_accuracy_score
    from sklearn.utils.class_weight import compute_class_weight

    X, y, groups = _imbalanced()
    plain = DPFedDROClassifier(epsilon=None, n_rounds=15).fit(X, y, groups=groups)
    bal = DPFedDROClassifier(epsilon=None, n_rounds=15, class_weight="balanced")
    bal.fit(X, y, groups=groups)
    assert plain.class_weight_ is None
    np.testing.assert_allclose(bal.class_weight_,
                               compute_class_weight("balanced", classes=np.arange(3), y=y))
    assert np.sum(bal.predict(X) == 2) > np.sum(plain.predict(X) == 2)
    # the balanced loss is the hinge on equal class shares: balanced accuracy goes up
    assert balanced_accuracy_score(y, bal.predict(X)) > balanced_accuracy_score(
        y, plain.predict(X)) + 0.05
    # only aggregates cross in the set-up exchange: the sites' class histograms
    setup = [r for r in bal.communication_.records if r.round == -1 and r.direction == "up"]
    assert all(set(r.names) == {"n_samples", "n_features", "classes", "class_counts",
                                "feature_sum", "feature_m2"} for r in setup)
    # the default is unchanged by the option
    ref = DPFedDROClassifier(epsilon=None, n_rounds=15, class_weight=None)
    np.testing.assert_array_equal(ref.fit(X, y, groups=groups).coef_, plain.coef_)


def test_dict_class_weight():
    X, y, groups = _imbalanced(seed=2, n=300)
    labels = np.array(["a", "b", "c"])[y]
    clf = DPFedDROClassifier(epsilon=None, n_rounds=10, class_weight={"a": 1e3})
    clf.fit(X, labels, groups=groups)
    np.testing.assert_array_equal(clf.class_weight_, [1e3, 1.0, 1.0])
    assert np.mean(clf.predict(X) == "a") > 0.9
    # no class histogram crosses for given weights
    setup = [r for r in clf.communication_.records if r.round == -1 and r.direction == "up"]
    assert not any("class_counts" in r.names for r in setup)


def test_balanced_class_weight_with_string_labels_and_missing_classes():
    X, y, groups = _imbalanced(seed=1, n=300)
    labels = np.array(["a", "b", "c"])[y]
    groups = np.where(y == 2, 0, groups)  # only site 0 holds class "c"
    clf = DPFedDROClassifier(epsilon=None, n_rounds=5, class_weight="balanced")
    clf.fit(X, labels, groups=groups)
    counts = np.array([np.sum(labels == c) for c in "abc"])
    np.testing.assert_allclose(clf.class_weight_, labels.size / (3 * counts))


@pytest.mark.parametrize("params, match", [
    (dict(class_weight="balanced"), "sensitivities"),  # with privacy
    (dict(epsilon=None, class_weight="auto"), "class_weight"),
    (dict(epsilon=None, class_weight={0: -1.0}), "class_weight"),
    (dict(epsilon=None, class_weight={0: True, 1: 1.0}), "class_weight"),  # a bool
    # keys of the wrong kind (ignored before) or not classes, with classes left unweighted
    (dict(epsilon=None, class_weight={"0": 1.0, "1": 10.0}), r"class_weight has keys"),
    (dict(epsilon=None, class_weight={0: 2.0, 7: 5.0}), r"class_weight has keys.*\[7\]"),
    (dict(class_weight={0: 2.0}), "sensitivities"),  # with privacy
])
def test_bad_class_weight(params, match):
    X, y, groups = _overlapping_classes()
    with pytest.raises(ValueError, match=match):
        DPFedDROClassifier(n_rounds=2, **params).fit(X / 100.0, y, groups=groups)


def test_dict_class_weight_keys_follow_scikit_learns_rule():
    # every class weighted: other keys are allowed (a class absent here), as compute_class_weight
    from sklearn.utils.class_weight import compute_class_weight

    X, y, groups = _overlapping_classes()
    cw = {0: 2.0, 1: 1.0, 2: 3.0, 7: 5.0}
    clf = DPFedDROClassifier(epsilon=None, n_rounds=2, class_weight=cw).fit(X, y, groups=groups)
    np.testing.assert_array_equal(clf.class_weight_,
                                  compute_class_weight(cw, classes=np.arange(3), y=y))
    with pytest.raises(ValueError, match="are not in class_weight"):  # scikit-learn's refusal
        compute_class_weight({0: 2.0, 7: 5.0}, classes=np.arange(3), y=y)


def test_balanced_weights_on_pure_noise_give_the_zero_model_and_warn():
    # with a class holding over half the rows the unweighted hinge leaves M = 0 through the
    # intercept; balanced, no class can win on noise features: M = 0 solves it (WVS's case)
    rng = np.random.default_rng(21)
    y = rng.choice(3, 300, p=[0.6, 0.3, 0.1])
    X = rng.standard_normal((300, 3))
    groups = rng.integers(0, 3, 300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        plain = DPFedDROClassifier(epsilon=None, n_rounds=5).fit(X, y, groups=groups)
    assert np.all(plain.predict(X) == 0)
    bal = DPFedDROClassifier(epsilon=None, class_weight="balanced")  # 50 rounds: < 1e-6
    with pytest.warns(UserWarning, match="class_weight=None"):
        bal.fit(X, y, groups=groups)
    assert bal.history_["objective"][-1] == pytest.approx(1.0, abs=1e-6)  # the hinge at M = 0
