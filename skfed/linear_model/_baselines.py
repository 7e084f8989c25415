"""The baselines of the DP-Fed DRO paper, with the API of DPFedDROClassifier.

* :class:`DPFedERMClassifier`: DP-ADMM of Huang et al. (2019) with the
  Crammer-Singer hinge loss and a Frobenius regulariser.
* :class:`DPFedSGDClassifier`: federated full-batch DP gradient descent.
* :class:`FedOvADROClassifier`: non-private one-vs-all federated Wasserstein
  DRO SVMs (exact local solves).
* :class:`CentralizedDROClassifier`: the non-private multiclass Wasserstein DRO
  SVM on pooled rows (not federated).

The paper names these baselines (Sec. 7) but leaves most of their details
open; every choice made here is stated in the class docstrings.
"""

import math
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.multiclass import check_classification_targets

from ..base import FederatedEstimatorMixin, checked_fit, keyword_init
from ..federated import FederatedAlgorithm
from ..utils._docstrings import fill_doc
from ..utils._param_validation import (
    FEDERATION_DEFAULTS, UNKNOWN_CLIENT, nonnegative_real, positive_real,
)
from ..utils._validation import check_groups, check_scale, validate_data
from ._admm import (
    DUAL_NORM,
    _ConsensusADMM,
    _noise,
    exact_local_step,
    solve_binary_dro_local,
    solve_cs_dro_local,
)
from ._base import LinearPredictionMixin, _LinearFederatedClassifier
from ._client import LinearClientMixin
from ._checks import per_client
from ._privacy_plan import classical_multiplier

__all__ = [
    "CentralizedDROClassifier",
    "DPFedERMClassifier",
    "DPFedSGDClassifier",
    "FedOvADROClassifier",
]


def cs_gradient(X, y, coef):
    """Mean Crammer-Singer hinge subgradient (the DRO kernel with no label flips)."""
    from ._kernels import dro_cs_pass  # numba: loaded by the first fit, not on import

    grad = np.empty_like(coef)
    loss_sum, _ = dro_cs_pass(X, y, coef, math.inf, 1.0, grad)
    return loss_sum / X.shape[0], grad / X.shape[0]


# --------------------------------------------------------------------------
# algorithms
# --------------------------------------------------------------------------


# Hyperparameters only (FederatedAlgorithm): dataclasses, ``coef_shape`` is
# (n_classes, n_features) and the arrays hold one value per client.
@dataclass(eq=False, kw_only=True)
class _DPFedERMAlgorithm(LinearClientMixin, _ConsensusADMM, FederatedAlgorithm):
    """Linearized proximal ADMM on the regularised CS loss, Gaussian noise on M_g."""

    min_samples_per_client = 2
    coef_shape: tuple
    alpha: np.ndarray
    rho: float
    reg: float
    eta: np.ndarray
    sigma: np.ndarray

    def client_init(self, data, rng):
        return dict(super().client_init(data, rng), objective=[])

    def client_step(self, data, state, broadcast, rng):
        g = data.index
        center = np.asarray(broadcast["coef"], dtype=float)
        mu = self.dual_step(state, center)
        loss, grad = cs_gradient(data.X, data.y, state["coef"])
        grad = grad + self.reg * state["coef"]
        eta = self.eta[g]
        coef = (state["coef"] / eta + self.rho * (center - mu) - grad) / (self.rho + 1.0 / eta)
        coef = coef + _noise(self.coef_shape, self.sigma[g], rng)
        objective = loss + 0.5 * self.reg * np.sum(state["coef"] ** 2)
        return (dict(state, coef=coef, mu=mu, round=state["round"] + 1,
                     objective=state["objective"] + [objective]), {"coef": coef})


@dataclass(eq=False, kw_only=True)
class _DPFedSGDAlgorithm(LinearClientMixin, FederatedAlgorithm):
    """One noisy full-batch gradient step per client per round, then FedAvg."""

    min_samples_per_client = 2
    coef_shape: tuple
    alpha: np.ndarray
    reg: float
    learning_rate: float
    sigma: np.ndarray

    def server_init(self, rng):
        coef = np.zeros(self.coef_shape)
        return {"coef": coef, "round": 0, "sum_coef": np.zeros(self.coef_shape)}, {
            "coef": coef, "round": np.int64(1)}

    def client_step(self, data, state, broadcast, rng):
        coef = np.asarray(broadcast["coef"], dtype=float)
        _, grad = cs_gradient(data.X, data.y, coef)
        grad = grad + self.reg * coef
        noisy = grad + _noise(self.coef_shape, self.sigma[data.index], rng)
        step = self.learning_rate / math.sqrt(int(broadcast["round"]))
        new = coef - step * noisy
        return new, {"coef": new}

    def server_step(self, state, messages, rng):
        alpha = np.asarray(self.alpha, dtype=float)
        w = np.array([alpha[k] for k in messages])
        coef = sum(wk * m["coef"] for wk, m in zip(w / w.sum(), messages.values()))
        t = state["round"] + 1
        return ({"coef": coef, "round": t, "sum_coef": state["sum_coef"] + coef},
                {"coef": coef, "round": np.int64(t + 1)})


@dataclass(eq=False, kw_only=True)
class _FedOvAAlgorithm(LinearClientMixin, _ConsensusADMM, FederatedAlgorithm):
    """K binary federated DRO SVMs by ADMM with exact local solves (row k of coef)."""

    min_samples_per_client = 2
    coef_shape: tuple
    alpha: np.ndarray
    radius: np.ndarray
    kappa: float
    rho: float
    dual: str

    def client_step(self, data, state, broadcast, rng):
        center = np.asarray(broadcast["coef"], dtype=float)
        mu = self.dual_step(state, center)
        coef = np.empty(self.coef_shape)
        for k in range(self.coef_shape[0]):
            y_pm = np.where(data.y == k, 1.0, -1.0)
            coef[k], _ = exact_local_step(
                data, state["round"] + 1, solve_binary_dro_local, data.X, y_pm,
                center[k] - mu[k], radius=float(self.radius[data.index]), kappa=self.kappa,
                rho=self.rho, dual=self.dual)
        return dict(state, coef=coef, mu=mu, round=state["round"] + 1), {"coef": coef}


# --------------------------------------------------------------------------
# estimators
# --------------------------------------------------------------------------


_PRIVATE_BASELINE = {
    **_LinearFederatedClassifier._parameter_constraints,
    # the privacy budget, checked with the privacy plan (_privacy_plan.privacy_plan)
    **dict.fromkeys(("epsilon", "delta", "target_epsilon", "target_delta", "accountant"),
                    "no_validation"),
    "reg": [nonnegative_real()],
    "norm_bound": [positive_real()],
    "alpha": [StrOptions({"uniform", "size"}), "array-like"],
    "fit_intercept": ["boolean"],
    "intercept_scaling": [positive_real()],
}

#: The defaults of the parameters the baselines share (constraints above): the paper's
#: budget (``epsilon`` per round) and rounds, and the model options
_BUDGET_DEFAULTS = dict(epsilon=0.5, delta=1e-6, target_epsilon=None, target_delta=None,
                        accountant="paper", n_rounds=50)
_MODEL_DEFAULTS = dict(alpha="uniform", fit_intercept=False, intercept_scaling=1.0,
                       classes=None)


class _FederatedBaseline(_LinearFederatedClassifier):
    """The federated baselines: fit() is FederatedEstimator's; subclasses build the algorithm."""


@fill_doc
class DPFedERMClassifier(_FederatedBaseline):
    """DP-Fed ERM: differentially private federated Crammer-Singer SVM by DP-ADMM.

    The "DP-Fed ERM" baseline of the DP-Fed DRO paper, after Huang et al.
    (2019, DP-ADMM): the linearized proximal ADMM of Algorithm 2 on the
    regularised empirical loss ``(1/N) sum_n l_CS(M; x_n, y_n) +
    (reg/2)||M||_F^2`` (no DRO variable), with Gaussian noise on the sent
    local model only, sensitivity ``2 sqrt(2) L / (N_g (rho + 1/eta_g))`` and
    the full per-round budget (no split). Step size
    ``eta_g = c_w / sqrt(T (2 L^2 + 16 K P L^2 ln(1.25/delta) / (N_g^2 eps^2)))``,
    the paper's formula with ``c_w`` the Frobenius norm of a non-private
    solution (the paper computes it non-privately: outside the guarantee).
    Privacy API as :class:`skfed.DPFedDROClassifier` (one release per round).

    Parameters
    ----------
    %(round_budget)s
    rho : float, default=0.8
        ADMM penalty.
    reg : float, default=1e-4
        Frobenius regularisation weight.
    c_w : float, default=1.0
        Step-size constant.
    %(baseline_model)s
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per round: ``ceil(client_fraction * n_clients)``, drawn
        uniformly without replacement from the ``random_state`` stream
        (:func:`skfed.federated.run_federation`). A client not asked keeps its last model
        and dual variable in the consensus (the server's ADMM mirror moves a client's dual
        only when it answers, as the client does). Privacy: a client releases at most
        ``n_rounds`` noisy models either way, so ``privacy_spent_`` is the full-
        participation guarantee; no amplification by sampling is claimed.
    %(baseline_options)s

    Attributes
    ----------
    coef_, intercept_, classes_, clients_, n_iter_, communication_ :
        As :class:`skfed.DPFedDROClassifier`.
    privacy_spent_ : dict
        As :class:`skfed.DPFedDROClassifier`'s: total ``"epsilon"``,
        ``"delta"`` and what they cover (``"outside"``: the sites' label sets
        without ``classes``); ``"epsilon"`` is ``inf`` without privacy
        (``epsilon=None`` or ``inf``).
    noise_sigma_ : ndarray of shape (n_clients,)
        Noise standard deviation per client (zeros without privacy).
    eta_ : ndarray of shape (n_clients,)
        Step sizes.
    %(baseline_attributes)s

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.linear_model import DPFedERMClassifier
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 300)
    >>> X = np.eye(3)[y] + 0.1 * rng.standard_normal((300, 3))
    >>> X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> clf = DPFedERMClassifier(c_w=5.0, classes=[0, 1, 2], random_state=0)
    >>> clf = clf.fit(X, y, groups=y % 2)
    >>> round(clf.privacy_spent_["epsilon"], 3)
    3.73
    """

    __init__ = keyword_init(_BUDGET_DEFAULTS, dict(rho=0.8, reg=1e-4, c_w=1.0, norm_bound=1.0),
                            _MODEL_DEFAULTS, FEDERATION_DEFAULTS)

    @classmethod
    def _test_instances(cls):
        return [cls(epsilon=None, c_w=20.0, n_rounds=30, random_state=0)]

    _parameter_constraints = {**_PRIVATE_BASELINE, "rho": [positive_real()],
                              "c_w": [positive_real()]}

    def _algorithm(self, plan, n_g, shape, L, alpha):
        k, p = shape
        T = self.n_rounds
        if plan is None:
            eta = self.c_w / np.sqrt(T * 2 * L * L) * np.ones_like(n_g)
            sigma = np.zeros_like(n_g)
        else:
            (eps,), delta = plan.epsilons, plan.delta
            log_term = math.log(1.25 / delta)
            eta = self.c_w / np.sqrt(T * (2 * L * L + 16 * k * p * L * L * log_term
                                          / (n_g ** 2 * eps ** 2)))
            sens = 2 * math.sqrt(2) * L / (n_g * (self.rho + 1 / eta))
            sigma = sens * classical_multiplier(eps, delta)
        algorithm = _DPFedERMAlgorithm(coef_shape=shape, alpha=alpha, rho=float(self.rho),
                                       reg=float(self.reg), eta=eta, sigma=sigma)
        return algorithm, {"eta_": eta, "noise_sigma_": sigma}


@fill_doc
class DPFedSGDClassifier(_FederatedBaseline):
    """DP-Fed SGD: federated differentially private gradient descent, CS hinge loss.

    The "DP-Fed SGD" baseline of the DP-Fed DRO paper (a federated adaptation
    of Abadi et al., 2016). The paper gives no batch size, clipping or local
    steps; here every round each client computes the full-batch mean
    subgradient of ``l_CS + (reg/2)||M||_F^2`` at the broadcast model, adds
    Gaussian noise of sensitivity ``2 sqrt(2) L / N_g`` (replace-one; rows
    have ``||x|| <= L``, so no clipping is needed) and takes one step of size
    ``learning_rate / sqrt(t)``; the server averages the models (weights
    ``alpha``). One Gaussian release per round, full per-round budget.

    Parameters
    ----------
    %(round_budget)s
    learning_rate : float, default=0.1
        ``eta_0`` of the step ``eta_0 / sqrt(t)``.
    reg : float, default=1e-6
        Frobenius regularisation weight.
    %(baseline_model)s
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per round: ``ceil(client_fraction * n_clients)``, drawn
        uniformly without replacement from the ``random_state`` stream
        (:func:`skfed.federated.run_federation`). The server averages the asked clients'
        models. Privacy: a client releases at most ``n_rounds`` noisy models either way, so
        ``privacy_spent_`` is the full-participation guarantee; no amplification by sampling
        is claimed.
    %(baseline_options)s

    Attributes
    ----------
    coef_, intercept_, classes_, clients_, n_iter_, communication_, privacy_spent_ :
        As :class:`skfed.DPFedDROClassifier`.
    noise_sigma_ : ndarray of shape (n_clients,)
        Gradient noise standard deviation per client (zeros without privacy).
    %(baseline_attributes)s

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.linear_model import DPFedSGDClassifier
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 300)
    >>> X = np.eye(3)[y] + 0.1 * rng.standard_normal((300, 3))
    >>> X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> clf = DPFedSGDClassifier(learning_rate=2.0, classes=[0, 1, 2], random_state=0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    __init__ = keyword_init(_BUDGET_DEFAULTS, dict(learning_rate=0.1, reg=1e-6, norm_bound=1.0),
                            _MODEL_DEFAULTS, FEDERATION_DEFAULTS)

    @classmethod
    def _test_instances(cls):
        return [cls(epsilon=None, learning_rate=1.0, n_rounds=30, random_state=0)]

    _parameter_constraints = {**_PRIVATE_BASELINE, "learning_rate": [positive_real()]}

    def _algorithm(self, plan, n_g, shape, L, alpha):
        if plan is None:
            sigma = np.zeros_like(n_g)
        else:
            (eps,), delta = plan.epsilons, plan.delta
            sigma = 2 * math.sqrt(2) * L / n_g * classical_multiplier(eps, delta)
        algorithm = _DPFedSGDAlgorithm(coef_shape=shape, alpha=alpha, reg=float(self.reg),
                                       learning_rate=float(self.learning_rate), sigma=sigma)
        return algorithm, {"noise_sigma_": sigma}


@fill_doc
class FedOvADROClassifier(_FederatedBaseline):
    """Non-private federated one-vs-all Wasserstein DRO SVMs (exact local solves).

    The "Non-Private Fed OvA DRO" baseline of the DP-Fed DRO paper (the
    FDR-SVM / mixture-of-Wasserstein-balls model of Ibrahim et al., 2024b):
    one binary hinge-loss DRO SVM per class, each trained by consensus ADMM
    whose client problem

    ``min lambda r + (1/N) sum s_n + (rho/2)||w - w_bar + mu||^2`` s.t.
    ``s_n >= 1 - y_n w.x_n``, ``s_n >= 1 + y_n w.x_n - kappa lambda``,
    ``s_n >= 0``, ``||w||_* <= lambda``

    is solved exactly (linear programs by scipy's HiGHS plus tangent cuts of
    the quadratic). Prediction is the argmax of the K decision values.

    Parameters
    ----------
    n_rounds : int, default=50
        ADMM rounds.
    rho : float, default=0.5
        ADMM penalty.
    kappa : float, default=0.5
        Label transport cost.
    radius : float or array-like of shape (n_clients,), default=1e-3
        Wasserstein radius.
    feature_norm : {"l1", "linf"}, default="l1"
        Transport norm (its dual bounds ``w``); see
        :class:`skfed.DPFedDROClassifier` for the default.
    alpha : {"uniform", "size"} or array-like, default="uniform"
        Client weights.
    fit_intercept : bool, default=False
        Append a constant feature.
    intercept_scaling : float, default=1.0
        Its value.
    classes : array-like of shape (n_classes,) or None, default=None
        The class labels, when they are public knowledge. Every site encodes
        its labels against them and sends nothing about which labels it
        holds; a site whose ``y`` holds a label outside ``classes`` is
        refused with a ``ValueError``. ``None``: each site sends the set of
        labels it holds in the set-up exchange and ``classes_`` is their
        union.
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per round: ``ceil(client_fraction *
        n_clients)``, drawn uniformly without replacement. A client not asked
        keeps its last model and dual variable in the consensus (the server's
        ADMM mirror moves a client's dual only when it answers, as the client
        does).
    %(on_client_error)s
    unknown_client : {"global", "error"}, default="global"
        Unseen clients at predict time.
    n_jobs : int or None, default=None
        Threads.
    random_state : int, RandomState instance or None, default=None
        Seed of client sampling (``client_fraction < 1``); the fit is
        otherwise deterministic.
    verbose : int, default=0
        Verbosity.

    Attributes
    ----------
    coef_, intercept_, classes_, clients_, n_iter_, communication_ :
        As :class:`skfed.DPFedDROClassifier`.
    client_weights_ : ndarray of shape (n_clients,)
        The client weights ``alpha`` (``"uniform"`` or ``"size"`` resolved),
        summing to 1, in the order of ``clients_``.
    privacy_spent_ : dict
        No guarantee (the fit adds no noise): the report of a non-private
        :class:`skfed.DPFedDROClassifier`, with ``"epsilon"`` ``inf``,
        ``"delta"`` 0, ``"n_releases"`` 0, ``"strict"`` false and no
        ``"releases"`` key.
    epsilon_round_, noise_multiplier_, privacy_unit_ : None
        Always ``None`` (not private), as for a non-private
        :class:`skfed.DPFedDROClassifier`.
    %(features_in_)s

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.linear_model import FedOvADROClassifier
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 60)
    >>> X = np.eye(3)[y] + 0.1 * rng.standard_normal((60, 3))
    >>> clf = FedOvADROClassifier(n_rounds=3).fit(X, y, groups=y % 2)
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    _private = False

    __init__ = keyword_init(
        dict(n_rounds=50, rho=0.5, kappa=0.5, radius=1e-3, feature_norm="l1"),
        _MODEL_DEFAULTS, FEDERATION_DEFAULTS)

    @classmethod
    def _test_instances(cls):
        return [cls(n_rounds=2, rho=0.05)]

    _parameter_constraints = {
        **_LinearFederatedClassifier._parameter_constraints,
        "rho": [positive_real()],
        "kappa": [positive_real()],
        "radius": [nonnegative_real(), "array-like"],
        "feature_norm": [StrOptions({"linf", "l1"})],  # linear programs
        "alpha": [StrOptions({"uniform", "size"}), "array-like"],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [positive_real()],
    }

    def _algorithm(self, plan, n_g, shape, L, alpha):
        radius = per_client(self.radius, n_g.size, "radius")
        algorithm = _FedOvAAlgorithm(coef_shape=shape, alpha=alpha, radius=radius,
                                     kappa=float(self.kappa), rho=float(self.rho),
                                     dual=DUAL_NORM[self.feature_norm])
        return algorithm, {}


class CentralizedDROClassifier(LinearPredictionMixin, FederatedEstimatorMixin, ClassifierMixin,
                               BaseEstimator):
    """Multiclass Wasserstein DRO SVM on pooled rows (not federated, not private).

    The "Centralized DRO" reference of the DP-Fed DRO paper (Ibrahim et al.,
    2024a): the problem of its Proposition 1 without the consensus term,

    ``min lambda r + (1/N) sum_n L_n(M, lambda)`` s.t. ``lambda >= phi(M)``,

    one linear program solved by scipy's HiGHS. ``groups`` is checked and
    recorded, but the rows are pooled.

    Parameters
    ----------
    kappa : float, default=0.5
        Label transport cost.
    radius : float, default=1e-3
        Wasserstein radius.
    feature_norm : {"l1", "linf"}, default="l1"
        Transport norm (see :class:`skfed.DPFedDROClassifier`).
    fit_intercept : bool, default=False
        Append a constant feature.
    intercept_scaling : float, default=1.0
        Its value.
    unknown_client : {"global", "error"}, default="global"
        Unseen clients at predict time.

    Attributes
    ----------
    coef_, intercept_, classes_, clients_ :
        As :class:`skfed.DPFedDROClassifier`.
    dro_lambda_ : float
        The optimal DRO dual variable.
    n_features_in_ : int
        Number of features seen in ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in ``fit``, when ``X`` has string column names.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.linear_model import CentralizedDROClassifier
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 60)
    >>> X = np.eye(3)[y] + 0.1 * rng.standard_normal((60, 3))
    >>> bool(CentralizedDROClassifier().fit(X, y).score(X, y) > 0.9)
    True
    """

    #: the rows are pooled: no distributed engine can run it (skfed.federated.flower)
    _pools_rows = True

    def __init__(self, *, kappa=0.5, radius=1e-3, feature_norm="l1", fit_intercept=False,
                 intercept_scaling=1.0, unknown_client="global"):
        self.kappa = kappa
        self.radius = radius
        self.feature_norm = feature_norm
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.unknown_client = unknown_client

    _parameter_constraints = {
        "kappa": [positive_real()],
        "radius": [nonnegative_real()],
        "feature_norm": [StrOptions({"linf", "l1"})],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [positive_real()],
        **UNKNOWN_CLIENT,
    }

    @checked_fit
    def fit(self, X, y, groups=None):
        """Solve the pooled DRO problem.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows of all clients.
        y : array-like of shape (n_samples,)
            Class labels.
        groups : array-like of shape (n_samples,), default=None
            Client labels; checked and recorded in ``clients_``.

        Returns
        -------
        self : CentralizedDROClassifier
            The fitted estimator.
        """
        X, y = validate_data(self, X, y, reset=True, dtype=np.float64)
        check_scale(X, "X")  # else the QP solver fails deep inside (LocalSolveError)
        check_classification_targets(y)
        radius = float(self.radius)
        clients, _ = check_groups(groups, X.shape[0])
        classes, y_enc = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                f"y has 1 class ({classes[0]!r}); CentralizedDROClassifier needs at least "
                "2 classes."
            )
        Xa = X
        if self.fit_intercept:
            b = float(self.intercept_scaling)
            Xa = np.hstack([X, np.full((X.shape[0], 1), b)])
        coef, lam = solve_cs_dro_local(
            Xa, y_enc.astype(np.int64), classes.size, np.zeros((classes.size, Xa.shape[1])),
            radius=radius, kappa=float(self.kappa), rho=0.0,
            dual=DUAL_NORM[self.feature_norm],
        )
        self._set_model(coef)
        self.dro_lambda_ = lam
        self.classes_ = classes
        self.clients_ = clients
        return self
