"""PersonalizedTensorRegressor calibrated by a tight accountant (``accountant=``).

With ``accountant="rdp"`` or ``"pld"`` the noise multiplier of the ``n_releases``
Gaussian releases (sensitivity ``2 tau_e tau_x / n_k``) is the smallest one whose
releases cost ``(epsilon, delta)`` under that accountant; the spent epsilon is
recomputed here directly with dp-accounting. ``"paper"`` (the default) keeps the
paper's basic composition (pinned fits: ``test_pinned_fit.py``).
"""

import math
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from skfed.datasets import make_tensor_regression
from skfed.privacy import pftr_noise_multiplier, pftr_noise_std, pftr_privacy_spent
from skfed.tensor import PersonalizedTensorRegressor

SHAPE = dict(tensor_shape=(4, 3), output_shape=(2,))
TAUS = dict(tau_x=3.0, tau_e=1.5)
PRIVATE = dict(epsilon=20.0, delta=0.1, fit_intercept=False, n_rounds=4, step_size=0.5,
               random_state=0)


def _direct_epsilon(z, count, delta, accountant):
    """Epsilon of ``count`` Gaussian releases of multiplier ``z``, by dp-accounting itself."""
    acc = RdpAccountant() if accountant == "rdp" else PLDAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), count))
    return acc.get_epsilon(delta)


@pytest.fixture(scope="module")
def data():
    return make_tensor_regression(n_clients=3, n_samples=[30, 40, 50], rank=(2, 2, 2),
                                  n_nonzero=2, random_state=0, **SHAPE)


def test_tight_multiplier_below_paper_at_paper_setting():
    # the paper's experiments: epsilon=20, delta=0.1, T_g=20
    paper = pftr_noise_multiplier(20.0, 0.1, 20)
    rdp = pftr_noise_multiplier(20.0, 0.1, 20, accountant="rdp")
    pld = pftr_noise_multiplier(20.0, 0.1, 20, accountant="pld")
    assert pld < rdp < paper
    assert paper == pftr_noise_multiplier(20.0, 0.1, 20, accountant="paper")


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibrated_multiplier_spends_the_target(accountant):
    z = pftr_noise_multiplier(20.0, 0.1, 20, accountant=accountant)
    eps = _direct_epsilon(z, 20, 0.1, accountant)
    assert eps <= 20.0 * (1 + 1e-12)
    assert eps == pytest.approx(20.0, rel=1e-4)
    spent = pftr_privacy_spent(20.0, 0.1, 20, calibration=accountant)
    assert spent["noise_multiplier"] == z and spent["calibration"] == accountant
    assert spent["epsilon"] == pytest.approx(eps, rel=1e-12)
    assert spent["classical_valid"] is None
    assert spent["epsilon_rdp"] == pytest.approx(_direct_epsilon(z, 20, 0.1, "rdp"))
    assert pftr_noise_std(1.0, 2.0, 50, 20, 20.0, 0.1, accountant) == 2 * 2.0 / 50 * z


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_fit_calibrated_by_accountant(data, accountant):
    X, y, groups = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # strict: no warning
        model = PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), accountant=accountant,
                                            **PRIVATE, **TAUS).fit(X, y, groups=groups)
    spent = model.privacy_spent_
    n_releases = PRIVATE["n_rounds"] + 1  # the private moment initializer, then Stage I
    assert spent["strict"] and spent["n_releases"] == n_releases
    assert spent["calibration"] == accountant and spent["delta"] == 0.1
    z = spent["noise_multiplier"]
    assert z == pftr_noise_multiplier(20.0, 0.1, n_releases, accountant=accountant)
    assert z < pftr_noise_multiplier(20.0, 0.1, n_releases)
    # the noise actually added: sigma_k = 2 tau_e tau_x / n_k * z, every client and round
    sens = 2 * TAUS["tau_e"] * TAUS["tau_x"] / np.array([30, 40, 50])
    np.testing.assert_allclose(model.noise_std_, np.outer(sens, np.ones(4)) * z, rtol=1e-12)
    # the reported epsilon is the target, recomputed directly by dp-accounting
    eps = _direct_epsilon(z, n_releases, 0.1, accountant)
    assert spent["epsilon"] == pytest.approx(eps, rel=1e-9)
    assert eps == pytest.approx(20.0, rel=1e-4) and eps <= 20.0 * (1 + 1e-12)
    assert spent["epsilon_rdp"] == pytest.approx(_direct_epsilon(z, n_releases, 0.1, "rdp"))
    assert np.all(np.isfinite(model.coef_))


def test_privacy_report_is_shared_across_fits_but_not_aliased(data):
    """The (seconds-long) PLD recomputation is cached per budget; each fit owns its dict."""
    X, y, groups = data
    params = dict(**SHAPE, rank=(2, 2, 2), accountant="pld", **PRIVATE, **TAUS)
    a = PersonalizedTensorRegressor(**params).fit(X, y, groups=groups)
    b = PersonalizedTensorRegressor(**params).fit(X, y, groups=groups)
    assert a.privacy_spent_ == b.privacy_spent_ and a.privacy_spent_ is not b.privacy_spent_
    expected = pftr_privacy_spent(20.0, 0.1, PRIVATE["n_rounds"] + 1, calibration="pld")
    assert {k: a.privacy_spent_[k] for k in expected} == expected
    a.privacy_spent_["epsilon"] = -1.0
    c = PersonalizedTensorRegressor(**params).fit(X, y, groups=groups)
    assert c.privacy_spent_["epsilon"] == expected["epsilon"]


def test_paper_accountant_is_the_default_and_unchanged(data):
    X, y, groups = data
    a = PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), **PRIVATE, **TAUS)
    b = PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), accountant="paper",
                                    **PRIVATE, **TAUS)
    # "auto": the paper's accountant in every fit but a strict one in the scaled space
    assert a.get_params()["accountant"] == "auto"
    a.fit(X, y, groups=groups)
    b.fit(X, y, groups=groups)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.privacy_spent_["epsilon"] == 20.0 and a.privacy_spent_["calibration"] == "paper"
    assert a.privacy_spent_["noise_multiplier"] == pftr_noise_multiplier(20.0, 0.1, 5)


def test_paper_mode_reports_nominal_accountant_epsilon(data):
    X, y, groups = data
    model = PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), accountant="rdp",
                                        privacy_mode="paper", **PRIVATE)  # data-driven taus
    with pytest.warns(UserWarning, match="no differential-privacy guarantee"):
        model.fit(X, y, groups=groups)
    spent = model.privacy_spent_
    assert spent["epsilon"] == math.inf and spent["epsilon_rdp"] == math.inf
    assert spent["epsilon_nominal"] == pytest.approx(20.0, rel=1e-4)
    assert spent["noise_multiplier"] == pftr_noise_multiplier(
        20.0, 0.1, spent["n_releases"], accountant="rdp")


@pytest.mark.parametrize("bad", ["moments", "RDP", None, 1])
def test_bad_accountant_is_refused(data, bad):
    X, y, groups = data
    with pytest.raises(ValueError, match="accountant must be one of"):
        PersonalizedTensorRegressor(**SHAPE, accountant=bad, **PRIVATE, **TAUS).fit(
            X, y, groups=groups)
    with pytest.raises(ValueError, match="accountant must be one of"):
        pftr_noise_multiplier(20.0, 0.1, 20, accountant=bad)


def test_bad_accountant_refused_without_privacy_too(data):
    X, y, groups = data
    with pytest.raises(ValueError, match="accountant"):
        PersonalizedTensorRegressor(**SHAPE, accountant="bogus").fit(X, y, groups=groups)


def test_unreachable_budget_is_a_clear_error(data):
    X, y, groups = data
    model = PersonalizedTensorRegressor(**SHAPE, rank=(2, 2, 2), accountant="rdp",
                                        **{**PRIVATE, "epsilon": 1e9}, **TAUS)
    with pytest.raises(ValueError, match=r"epsilon=1000000000.0.*accountant='rdp'"):
        model.fit(X, y, groups=groups)
    assert not hasattr(model, "coef_")
