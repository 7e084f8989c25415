"""DPFedDROClassifier: differentially private, distributionally robust federated
multiclass classification (linearized proximal ADMM, Crammer-Singer loss)."""

import numbers
import warnings
from collections.abc import Mapping

import numpy as np
from scipy.special import log_softmax

from ..federated._release import MIN_ROWS_MOMENTS, sends_moments, too_few_rows_warning
from sklearn.utils._param_validation import StrOptions

from ..privacy._scaling import PrivateScaling
from ..utils._docstrings import fill_doc
from ..utils._param_validation import Number, nonnegative_real, positive_real
from ._admm import DUAL_NORM, TEMPERATURE_GRID, DPFedDROAlgorithm, sensitivities, step_sizes
from ._base import _LinearFederatedClassifier
from ._checks import per_client
from ._privacy_plan import classical_multiplier, privacy_plan

__all__ = ["DPFedDROClassifier"]

FEATURE_NORMS = tuple(DUAL_NORM)
CLASS_WEIGHTS = (None, "balanced")
OUTPUT_MODELS = ("last", "average")
BETA = 0.4  # weight of the consensus violation in the paper's convergence metric
# "auto" values: (private, non-private). Private: the paper's DP-Fed DRO values (Sec. 7.1);
# non-private: chosen by benchmarks/defaults/dro_nonprivate_defaults.py
# (doc/results/real_data_defaults.md)
AUTO_PARAMS = {"kappa": (0.5, 2.0), "radius": (0.1, 1e-3), "fit_intercept": (False, True)}
# a non-private released model below this Frobenius norm is the zero model plus round-off
ZERO_MODEL = 1e-6


def _check_class_weight_keys(class_weight, classes):
    """Refuse a ``class_weight`` dict whose keys miss classes and name other labels.

    scikit-learn's rule (``compute_class_weight``): classes not listed weigh 1,
    and keys that are no class are allowed when every class has a weight (a
    fold or a federation may lack a class); both at once (``{"0": 1, "1": 10}``
    for integer classes) mean keys of the wrong kind, which would be ignored.
    """
    labels = [c.item() for c in classes]
    unweighted = [c for c in labels if c not in class_weight]
    known = set(labels)
    extra = [k for k in class_weight if k not in known]
    if unweighted and extra:
        raise ValueError(
            f"class_weight has keys that are not classes, {extra!r}, and no weight for the "
            f"classes {unweighted!r}; its keys must be class labels (classes: {labels!r})."
        )


@fill_doc
class DPFedDROClassifier(_LinearFederatedClassifier):
    """Differentially private, distributionally robust federated multiclass classifier.

    The DP-Fed DRO method ("Private and Distributionally Robust Federated
    Multiclass Classification" [1]_, Algorithm 2). Each client holds the rows of
    one ``groups`` label and minimises the worst-case expected Crammer-Singer
    loss of a linear model ``M`` (``K x P``) over a type-1 Wasserstein ball of
    radius ``radius`` around its data, with transport cost
    ``||x - x'|| + kappa * 1{y != y'}``; the clients agree on one model by
    consensus ADMM. Every round each client

    1. takes the closed-form minimiser of the linearized proximal augmented
       Lagrangian (step sizes ``eta_g``, ``nu_g`` of the paper's Theorem 3,
       from ``c_M`` and ``c_lambda``);
    2. adds Gaussian noise to the local model and to the DRO variable,
       calibrated to the sensitivities of the paper's Lemmas 1-2;
    3. sends only the noisy local model to the server, which forms the
       consensus ``M^t = sum_g alpha_g (M~_g^t + mu_g^{t-1})`` and broadcasts
       it; clients then update ``mu_g`` and the penalty multiplier ``tau_g``.

    With ``epsilon=None`` (or its alias ``inf``) and ``target_epsilon=None`` no noise is added and
    the clients solve the exact local problem of the paper's Proposition 1
    (Algorithm 1, the "Non-Private Fed DRO" model); with the ``"linf"``/``"l1"``
    feature norms that problem is a linear program plus the ADMM proximal
    term, one convex QP solved by PIQP (see
    :func:`skfed.linear_model._admm.solve_prox_qp`). Non-private mode
    standardizes the features by default (``standardize="auto"``): each site
    sends its feature means and sums of squared deviations in the set-up
    exchange (aggregates, not rows), the server pools them, the sites train
    on standardized rows and ``coef_``/``intercept_`` are mapped back to raw
    units. One extra round after training fits the temperature of
    :meth:`predict_proba`. The defaults of ``kappa``, ``radius`` and
    ``fit_intercept`` are ``"auto"``: the paper's DP-Fed DRO values with
    privacy, ``kappa=2``, ``radius=1e-3`` and an intercept without it.

    **Privacy.** Record-level ("replace one row of one client") differential
    privacy of everything a client sends, per client, composed over
    ``n_rounds`` rounds. Give either a total ``target_epsilon`` (at
    ``delta``), to which the noise is calibrated by the chosen accountant (PLD
    by default), or the paper's per-round budget ``(epsilon, delta)``, split as
    ``eps_M^2 = budget_split * eps^2`` (model) and ``eps_lambda^2 = (1 -
    budget_split) * eps^2`` (DRO variable). The sensitivities assume
    ``||x||_2 <= norm_bound`` for every row. By default a private fit makes
    its rows so itself (``standardize="auto"``): before the first round each
    site releases, once, the histograms of its features on a fixed public grid
    with Gaussian noise (a ``scaling_share`` of the budget, accounted with the
    rounds), the server reads a range per feature from their sum, and each
    site maps every feature into ``[-1, 1]`` by it, clips there and scales the
    row by ``norm_bound / sqrt(n_features)`` (:mod:`skfed.privacy._scaling`);
    public ``feature_bounds`` skip the release. With ``standardize=False``
    (the paper's protocol, also the ``"auto"`` choice with
    ``accountant="paper"``) ``fit`` refuses rows whose norm exceeds
    ``norm_bound`` (scale them first, e.g. with
    :class:`skfed.preprocessing.NormClipper`). The guarantee does **not**
    cover data-dependent preprocessing outside the fit (e.g. min-max statistics computed on
    the training rows), hyperparameter search on the private data, the
    set-up exchange (each client's row count, public under replace-one, and,
    without ``classes``, the set of class labels it holds, from which
    ``classes_`` is formed: ``fit`` then warns and ``privacy_spent_["outside"]``
    lists it; pass the public ``classes`` to keep it on the sites), or
    ``history_["objective"]`` (client-local diagnostics that are never sent;
    do not publish them).

    **Site adaptation.** With ``personalize=True`` (the default) each site
    fits, after the rounds and on its own rows only, a multinomial logistic
    model on the released model's scores and its own standardized features:
    ``t_g * s(x) + W_g x + c_g``, the deviation ``W_g`` shrunk by a ridge
    penalty the site picks by 3-fold cross-validation of the log loss
    (:mod:`skfed.linear_model._personalize`). Nothing of it is sent, so the
    releases and their guarantee are unchanged; ``predict(X, groups)`` scores
    a seen site's rows with it and every other row with the shared model.
    The adaptation is a model of the site's rows kept by the site: it is not
    covered by the privacy guarantee (in-process, ``personal_coef_`` holds it).

    Parameters
    ----------
    epsilon : float or None, default=0.5
        Per-round budget (the paper's quadratic budget
        ``eps_M^2 + eps_lambda^2 = epsilon^2``). ``None`` (with
        ``target_epsilon=None``) trains without privacy (Algorithm 1);
        ``float("inf")`` is an alias of ``None`` (the same fit, and
        ``privacy_spent_["epsilon"]`` is ``inf``: no guarantee), as for every
        private estimator of skfed (:func:`skfed.privacy.check_epsilon`). 0,
        negative, NaN or non-numbers are refused. Ignored when ``target_epsilon`` is given.
    delta : float, default=1e-6
        Per-round delta of each Gaussian release, in (0, 1); also the total
        delta reported in ``privacy_spent_`` (the paper's ``delta_bar = delta``).
    target_epsilon : float or None, default=None
        Total budget over all rounds; overrides ``epsilon``.
    target_delta : float or None, default=None
        Total delta with ``target_epsilon`` (also used as per-round delta);
        ``None``: ``delta``.
    budget_split : float in (0, 1), default=0.95
        Share of ``epsilon^2`` spent on the model release.
    accountant : {"pld", "rdp", "paper"}, default="pld"
        ``"pld"``/``"rdp"``: dp-accounting's privacy-loss-distribution or
        Renyi-DP accountant on the Gaussian releases (PLD is the tightest;
        calibrating a total takes about a second). ``"paper"``: the
        closed-form moments-accountant bound of the paper's Theorem 2
        (reproduces its totals: 3.7299 for 50 rounds at ``epsilon=0.5``, where
        PLD gives about 3.1 for the same noise); it covers the rounds only, so
        ``"auto"`` scaling is off with it. A ``target_epsilon`` is calibrated by
        :func:`skfed.privacy.calibrate_noise_multiplier` with the same
        accountant, on all the fit's releases.
    n_rounds : int, default=50
        Number of rounds ``T`` (fixed: the budget is tied to it).
    rho : float, default=0.8
        ADMM consensus penalty.
    gamma : float, default=0.1
        Penalty parameter of the norm constraint ``phi(M_g) <= lambda_g``.
    kappa : float or "auto", default="auto"
        Label transport cost. ``"auto"``: 0.5 with privacy (the paper's DP-Fed
        DRO value, Sec. 7.1), 2.0 without (its non-private Fed DRO value).
        The non-private ``"auto"`` values of ``kappa``, ``radius`` and
        ``fit_intercept`` were chosen by
        ``benchmarks/defaults/dro_nonprivate_defaults.py`` (``doc/results/real_data_defaults.md``):
        with the private values, and on WVS with any ``kappa`` and ``radius``
        but no intercept, the exact non-private problem is solved by the zero
        model (``fit`` then warns: ``predict`` would rest on solver round-off).
    radius : float, array-like of shape (n_clients,) or "auto", default="auto"
        Wasserstein radius, one value or one per client (in the order of
        ``clients_``). ``"auto"``: 0.1 with privacy (the paper's Sec. 7.1
        value), 1e-3 without (see ``kappa``; the paper's App. B.4 grid value).
    c_M, c_lambda : float, default=1.0
        Step-size constants of Theorem 3 (``c_M >= ||M*||_F``,
        ``c_lambda >= lambda*`` in theory; tuned in practice).
    C, V : float, default=0.4, 1.0
        Bounds on the penalty's subgradients used in the step sizes.
    norm_bound : float, default=1.0
        ``L``, the bound on ``||x||_2`` the sensitivities assume.
    feature_norm : {"l1", "linf", "l2"}, default="l1"
        The norm ``||.||`` of the transport cost; its dual norm ``||.||_*``
        enters ``phi(M) = max_{i,j} ||M_i - M_j||_*``. The paper says "we use
        the l_inf-norm" without saying which of the two norms it means. Its
        analysis bounds the penalty subgradient by ``sqrt(2) C`` with a fixed
        ``C = 0.4`` for every data set, which holds when the dual norm is
        ``l_inf`` (transport norm ``l1``), not when it is ``l1`` (its subgradient
        grows like ``sqrt(P)``); with ``feature_norm="linf"`` the PHR penalty
        diverged in our runs at P = 50. Hence the default ``"l1"`` (dual
        ``l_inf``). Non-private mode needs ``"l1"`` or ``"linf"``.
    alpha : {"uniform", "size"} or array-like of shape (n_clients,), default="uniform"
        Client weights ``alpha_g`` (the paper: uniform).
    output_model : {"last", "average"}, default="last"
        The released model: the last consensus ``M^T`` or the average of the
        consensus iterates (both are post-processing of private releases;
        the paper does not say which it evaluates).
    project_lambda : bool, default=False
        Project ``lambda_g`` on ``[0, inf)`` before adding noise (1-Lipschitz,
        so the sensitivity is unchanged). The paper does not project.
    fit_intercept : bool or "auto", default="auto"
        Append the constant feature ``intercept_scaling`` (the paper has no
        intercept). The constant counts towards the norm bound: the
        sensitivities use ``sqrt(norm_bound^2 + intercept_scaling^2)``.
        ``"auto"``: ``False`` with privacy (the paper), ``True`` without (see
        ``kappa``).
    intercept_scaling : float, default=1.0
        Value of the constant feature.
    standardize : {"auto", True, False}, default="auto"
        How the rows are scaled inside the fit. Without privacy: by the pooled
        mean and standard deviation of the rows of the sites with 3 rows or
        more, formed from their per-site sums and sums of squared deviations
        (a smaller site, or one with a feature nonzero on only one or two
        rows, sends none: they would give those values; these aggregates are
        not covered by any privacy guarantee). With privacy: into the norm
        bound by per-feature ranges, read from noisy histograms the sites
        release once (``scaling_share`` of the budget) or from the public
        ``feature_bounds``; rows are then never refused for their norm.
        ``False``: the rows as given (the paper's protocol; a private fit
        refuses rows above ``norm_bound``). ``"auto"``: ``True``, but
        ``False`` for a private fit with ``accountant="paper"`` and no
        ``feature_bounds``.
    feature_bounds : array-like of shape (2, n_features) or None, default=None
        Public lowest and highest value of each feature (e.g. the range of a
        questionnaire's answers), for a private fit's scaling: rows are
        clipped to them and nothing is released for the scaling. Must not be
        computed from the private rows. Ignored without privacy.
    scaling_share : float in (0, 1), default=0.1
        Share of the privacy budget spent on the scaling histograms, in
        zero-concentrated DP terms (``rho = 1 / (2 z^2)`` per Gaussian release
        of noise multiplier ``z``): with ``target_epsilon`` the rounds get the
        rest; with a per-round ``epsilon`` the histograms add
        ``scaling_share / (1 - scaling_share)`` of the rounds' cost, and
        ``privacy_spent_`` reports the composed total.
    temperature_share : float in [0, 1), default=0.05
        Share of a private fit's budget (zCDP terms, as ``scaling_share``)
        spent on the temperature of :meth:`predict_proba`; 0: no release and
        ``temperature_ = 1`` (the paper's hinge scores are then nearly
        uniform probabilities). Ignored without privacy (the temperature is
        fitted without noise) and with ``accountant="paper"`` (the paper's
        protocol releases its rounds only).
    personalize : bool, default=True
        Fit each site's own adaptation of the shared model on its rows after
        the rounds (see "Site adaptation" above); ``predict(X, groups)`` uses
        it for seen sites. ``False``: one shared model for every row.
    class_weight : dict, "balanced" or None, default=None
        ``None``: every row weighs 1 (the paper). Non-private only: a dict
        ``{class label: weight}`` (classes not listed weigh 1; as in
        scikit-learn, keys that are no class are refused unless every class
        has a weight) or
        ``"balanced"``: row ``n`` of class ``c`` weighs ``N / (K N_c)`` with
        the pooled class counts ``N_c``, as scikit-learn's
        ``class_weight="balanced"``; each client's Wasserstein ball is then
        centred at its reweighted empirical distribution (weights normalised
        per client). With ``"balanced"`` each site sends its class histogram
        in the set-up exchange (aggregates, outside any privacy guarantee).
        With ``epsilon`` set any class weight is an error. The unweighted
        Crammer-Singer hinge predicts almost only the large classes
        when no class is well separated (Chile: ``doc/results/real_data.md``);
        balancing helps macro-F1 there, but where no linear model lowers the
        balanced hinge below its value at ``M = 0`` (WVS) the fit is the zero
        model and ``fit`` warns.
    %(classes_public)s
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per round: ``ceil(client_fraction * n_clients)``, drawn
        uniformly without replacement from the ``random_state`` stream
        (:func:`skfed.federated.run_federation`). A client not asked keeps its last model
        and dual variable in the consensus (the server's ADMM mirror moves a client's dual
        only when it answers, as the client does); the extra calibration round of
        ``predict_proba`` asks every client. Privacy: a client releases at most ``n_rounds``
        noisy models either way, so ``privacy_spent_`` is the full-participation guarantee;
        no amplification by sampling is claimed.
    %(on_client_error)s
    unknown_client : {"global", "error"}, default="global"
        Prediction for unseen clients (the global model is used for every row).
    n_jobs : int or None, default=None
        Client steps of a round run on this many threads.
    random_state : int, RandomState instance or None, default=None
        Seed of all noise.
    verbose : int, default=0
        Print one line per round if positive.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    coef_ : ndarray of shape (n_classes, n_features)
        The released model ``M`` (rows: classes).
    intercept_ : ndarray of shape (n_classes,)
        Intercepts (zeros if ``fit_intercept=False``).
    client_coefs_ : ndarray of shape (n_clients, n_classes, n_features) or None
        Each client's last sent (noisy) local model (``None`` on a
        distributed run: the local models stay on the sites).
    client_intercepts_ : ndarray of shape (n_clients, n_classes) or None
        Their intercepts.
    clients_ : ndarray of shape (n_clients,)
        Client labels.
    n_iter_ : int
        Training rounds run (without the calibration round of non-private mode).
    temperature_ : float
        Temperature of :meth:`predict_proba` for the shared model: fitted on
        the clients' summed log losses (see :meth:`predict_proba`); with
        privacy from their noisy release (``temperature_share``), 1 if
        ``temperature_share=0``.
    feature_mean_, feature_scale_ : ndarray of shape (n_features,) or None
        The pooled standardization (``None`` when not standardizing).
    feature_range_ : ndarray of shape (2, n_features) or None
        The low and high value of each feature of a private scaling (from the
        noisy histograms or ``feature_bounds``): rows are clipped to them in
        training and in prediction, ``coef_`` and ``intercept_`` act on the
        clipped rows in raw units. ``None`` without private scaling.
    personal_scale_ : ndarray of shape (n_clients,) or None
        Each site's weight ``t_g`` of the shared scores in its adaptation
        (``None`` with ``personalize=False`` or on a distributed run, where
        the adaptations stay on the sites).
    personal_coef_ : ndarray of shape (n_clients, n_classes, n_features) or None
        Each site's deviation ``W_g``, raw units.
    personal_intercept_ : ndarray of shape (n_clients, n_classes) or None
        Each site's intercepts ``c_g``, raw units.
    personal_penalty_ : ndarray of shape (n_clients,) or None
        The ridge strength each site's cross-validation chose.
    history_ : dict of ndarray
        Per round: ``"objective"`` (``sum_g alpha_g h_g^t`` at the iterate the
        clients linearize at, or the exact local objective in non-private mode;
        client-local, not private), ``"consensus_violation"``
        (``sum_g alpha_g ||mean_t M~_g - mean_t M||_F``), ``"convergence_metric"``
        (running mean of the objective + 0.4 x violation, the paper's Fig. 2),
        ``"lambda"`` and ``"tau"`` (shape ``(n_clients, n_rounds)``; ``"tau"``
        has shape ``(n_clients, 0)`` without privacy, where the exact local
        problem has no penalty multiplier). On a distributed run only the
        server's ``"consensus_violation"``.
    privacy_spent_ : dict
        The guarantee of everything a client released, with the keys of
        :class:`skfed.tensor.PersonalizedTensorRegressor`'s: ``"epsilon"``,
        ``"delta"`` (total per client, by the chosen accountant),
        ``"n_releases"``, ``"noise_multiplier"``, ``"calibration"``,
        ``"strict"``, ``"covers"``, ``"outside"``, and, with privacy only,
        ``"releases"`` (as
        :class:`~skfed.tensor.PersonalizedTensorRegressor`'s): one dict per
        kind of release, ``name`` among ``"model"``, ``"dro_variable"``,
        ``"scaling"`` (the histograms) and ``"temperature"``, with its
        ``count``, ``noise_multiplier``, ``share`` of the zCDP cost and
        ``epsilon``, what those releases alone spend at ``delta``. Without ``classes`` a
        private fit lists each site's label set under ``"outside"``
        (``"strict"`` is then false; ``"epsilon"`` still bounds the noisy
        releases). Without privacy (``epsilon=None`` or ``inf``) the dict
        has the first eight keys only (no ``"releases"``), with ``"epsilon"``
        ``inf`` (no guarantee), ``"delta"`` 0, ``"n_releases"`` 0 and
        ``"outside"`` empty.
    privacy_unit_ : str or None
        ``"record"``: one row of one client (replace-one); ``None`` without
        privacy.
    epsilon_round_ : tuple of float or None
        ``(epsilon_M, epsilon_lambda)`` per round; ``None`` without privacy.
    noise_multiplier_ : tuple of float or None
        ``(z_M, z_lambda)``: noise standard deviation over sensitivity;
        ``None`` without privacy.
    noise_sigma_M_, noise_sigma_lambda_ : ndarray of shape (n_clients,)
        Noise standard deviations per client (zeros without privacy).
    sensitivity_M_, sensitivity_lambda_ : ndarray of shape (n_clients,) or None
        L2 sensitivities (Lemmas 1 and 2); ``None`` without privacy.
    eta_, nu_ : ndarray of shape (n_clients,) or None
        Step sizes of Theorem 3; ``None`` without privacy (the clients solve
        the exact local problem).
    client_weights_ : ndarray of shape (n_clients,)
        ``alpha``.
    communication_ : Ledger
        Every message sent: only ``coef`` (the noisy local model) goes up;
        without privacy also the set-up moments (and class histograms with
        ``class_weight="balanced"``) and the last round's ``log_loss`` sums.
    class_weight_ : ndarray of shape (n_classes,) or None
        The per-class row weights used (``None`` when ``class_weight=None``).
    kappa_ : float
        The label transport cost used (``kappa`` with ``"auto"`` resolved).
    radius_ : ndarray of shape (n_clients,)
        The Wasserstein radius of each client (``"auto"`` resolved).
    %(features_in_)s

    References
    ----------
    .. [1] "Private and Distributionally Robust Federated Multiclass
       Classification", arXiv:2610.13631. Algorithm, theorem and equation
       numbers in this documentation ("the paper's") are this paper's.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.linear_model import DPFedDROClassifier
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 600)
    >>> X = 50.0 * np.eye(3)[y] + 10.0 * rng.standard_normal((600, 3))  # raw units
    >>> groups = rng.integers(0, 3, 600)
    >>> clf = DPFedDROClassifier(target_epsilon=4.0, classes=[0, 1, 2],
    ...                          random_state=0).fit(X, y, groups=groups)
    >>> round(clf.privacy_spent_["epsilon"], 2)
    4.0
    >>> [r["name"] for r in clf.privacy_spent_["releases"]]
    ['model', 'dro_variable', 'scaling', 'temperature']
    >>> bool(clf.score(X, y, groups=groups) > 0.9)
    True

    The paper's protocol (rows scaled beforehand, its per-round budget and
    closed-form total):

    >>> Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    >>> paper = DPFedDROClassifier(epsilon=0.5, accountant="paper", c_M=2.0,
    ...                            classes=[0, 1, 2], random_state=0).fit(Xn, y, groups=groups)
    >>> round(paper.privacy_spent_["epsilon"], 4)
    3.7299
    """

    def __init__(self, *, epsilon=0.5, delta=1e-6, target_epsilon=None, target_delta=None,
                 budget_split=0.95, accountant="pld", n_rounds=50, rho=0.8, gamma=0.1,
                 kappa="auto", radius="auto", c_M=1.0, c_lambda=1.0, C=0.4, V=1.0,
                 norm_bound=1.0, feature_norm="l1", alpha="uniform", output_model="last",
                 project_lambda=False, fit_intercept="auto", intercept_scaling=1.0,
                 standardize="auto", feature_bounds=None, scaling_share=0.1,
                 temperature_share=0.05, personalize=True, class_weight=None, classes=None,
                 client_fraction=1.0,
                 on_client_error="raise",
                 unknown_client="global", n_jobs=None, random_state=None,
                 verbose=0):
        self.epsilon = epsilon
        self.delta = delta
        self.target_epsilon = target_epsilon
        self.target_delta = target_delta
        self.budget_split = budget_split
        self.accountant = accountant
        self.n_rounds = n_rounds
        self.rho = rho
        self.gamma = gamma
        self.kappa = kappa
        self.radius = radius
        self.c_M = c_M
        self.c_lambda = c_lambda
        self.C = C
        self.V = V
        self.norm_bound = norm_bound
        self.feature_norm = feature_norm
        self.alpha = alpha
        self.output_model = output_model
        self.project_lambda = project_lambda
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.standardize = standardize
        self.feature_bounds = feature_bounds
        self.scaling_share = scaling_share
        self.temperature_share = temperature_share
        self.personalize = personalize
        self.class_weight = class_weight
        self.classes = classes
        self.client_fraction = client_fraction
        self.on_client_error = on_client_error
        self.unknown_client = unknown_client
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    @classmethod
    def _test_instances(cls):
        """The non-private default (every check passes) and the private default
        (its noise keeps the training-accuracy check below its threshold; an
        expected failure in tests/test_common.py)."""
        return [cls(epsilon=None), cls(random_state=0)]

    # ------------------------------------------------------------------
    # validation
    # ------------------------------------------------------------------

    _parameter_constraints = {
        **_LinearFederatedClassifier._parameter_constraints,
        # the privacy budget, checked with the privacy plan (_privacy_plan.privacy_plan)
        **dict.fromkeys(("epsilon", "delta", "target_epsilon", "target_delta", "accountant"),
                        "no_validation"),
        "budget_split": [Number(numbers.Real, 0, 1, closed="neither")],
        **{name: [positive_real()] for name in (
            "rho", "gamma", "c_M", "c_lambda", "norm_bound", "intercept_scaling")},
        "C": [nonnegative_real()],
        "V": [nonnegative_real()],
        "kappa": [StrOptions({"auto"}), positive_real()],
        "radius": [StrOptions({"auto"}), nonnegative_real(), "array-like"],
        "feature_norm": [StrOptions(set(FEATURE_NORMS))],
        "alpha": [StrOptions({"uniform", "size"}), "array-like"],
        "output_model": [StrOptions(set(OUTPUT_MODELS))],
        "project_lambda": ["boolean"],
        "personalize": ["boolean"],
        "fit_intercept": [StrOptions({"auto"}), "boolean"],
        "standardize": [StrOptions({"auto"}), "boolean"],
        "feature_bounds": ["array-like", None],
        "scaling_share": [Number(numbers.Real, 0, 1, closed="neither")],
        "temperature_share": [Number(numbers.Real, 0, 1, closed="left")],
        "class_weight": [StrOptions({"balanced"}), Mapping, None],
    }

    def _check_params(self):
        """The checks of several parameters together; then the privacy plan."""
        cw = self.class_weight
        if isinstance(cw, Mapping):
            bad = {k: v for k, v in cw.items()
                   if not isinstance(v, numbers.Real) or isinstance(v, bool)
                   or not np.isfinite(v) or v <= 0}
            if bad:
                raise ValueError(
                    f"class_weight values must be finite numbers > 0 (not bools), got {bad!r}."
                )
        if cw is not None and self._is_private():
            raise ValueError(
                "class_weight weights the rows unequally, which the sensitivities of "
                "Lemmas 1-2 do not allow ('balanced' also needs the clients' class counts, "
                "outside the guarantee); use it with epsilon=None."
            )
        if not self._is_private() and self.feature_norm == "l2":
            raise ValueError(
                "feature_norm='l2' makes the exact local problem a second-order cone "
                "program; non-private mode (epsilon=None) supports 'linf' and 'l1'."
            )
        super()._check_params()

    # ------------------------------------------------------------------
    # the federated fit (fit() itself is shared, see _LinearFederatedClassifier)
    # ------------------------------------------------------------------

    def _resolved(self, name):
        """``kappa``, ``radius`` or ``fit_intercept`` with ``"auto"`` resolved."""
        value = getattr(self, name)
        if isinstance(value, str) and value == "auto":
            private, non_private = AUTO_PARAMS[name]
            return private if self._is_private() else non_private
        return value

    def _fits_intercept(self):
        return bool(self._resolved("fit_intercept"))

    def _private_scaling(self):
        """How a private fit scales its rows: ``"histogram"`` (noisy histograms,
        ``scaling_share`` of the budget), ``"bounds"`` (the public
        ``feature_bounds``, no release) or ``None`` (the rows as given)."""
        if not self._is_private() or self._standardize_off():
            return None
        if self.feature_bounds is not None:
            return "bounds"
        if self.standardize == "auto" and self.accountant == "paper":
            return None  # the paper's protocol: rows scaled beforehand
        return "histogram"

    def _fits_private_temperature(self):
        # the paper's protocol (its accountant) releases the rounds only
        return (self._is_private() and self.temperature_share > 0
                and self.accountant != "paper")

    def _rows_bounded_by_fit(self):
        return self._private_scaling() is not None

    def _one_off_shares(self):
        """``(name, share)`` of each one-off release of a private fit (privacy_plan)."""
        shares = []
        if self._private_scaling() == "histogram":
            shares.append(("scaling", float(self.scaling_share)))
        if self._fits_private_temperature():
            shares.append(("temperature", float(self.temperature_share)))
        if sum(share for _, share in shares) >= 1:
            raise ValueError(
                f"scaling_share + temperature_share must be < 1 (the rounds need a share of "
                f"the budget), got {' + '.join(str(v) for _, v in shares)}."
            )
        return tuple(shares)

    def _privacy_plan(self):
        return privacy_plan(self, float(self.budget_split), self._one_off_shares())

    def _federated_algorithm(self, setup):
        plan = self._plan
        if plan is not None and self.accountant == "paper" and max(plan[0]) >= 1:
            warnings.warn(
                f"per-round epsilon_M={plan[0][0]:.3g} >= 1: the classical Gaussian "
                "calibration (Dwork & Roth, Thm 3.22) is proven only for epsilon < 1.",
                UserWarning,
            )
        algorithm = super()._federated_algorithm(setup)
        mode = self._private_scaling()
        if mode is not None:
            n_cols = int(setup["n_features"])
            bounds = self._feature_bounds(n_cols) if mode == "bounds" else None
            algorithm.scaling = PrivateScaling(n_cols, float(self.norm_bound),
                                               plan.multiplier("scaling"), bounds)
        if "feature_mean" in setup:  # the sites standardize their rows (prepare_client)
            algorithm.feature_mean = np.asarray(setup["feature_mean"], dtype=float)
            algorithm.feature_scale = np.asarray(setup["feature_scale"], dtype=float)
        if "class_weight" in setup:
            algorithm.class_weight = np.asarray(setup["class_weight"], dtype=float)
        return algorithm

    def _feature_bounds(self, n_features):
        """The public ``feature_bounds`` as ``(low, high)`` rows, checked."""
        try:
            bounds = np.asarray(self.feature_bounds, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"feature_bounds must be numbers, got {self.feature_bounds!r}.") \
                from exc
        if bounds.shape != (2, n_features):
            raise ValueError(
                f"feature_bounds must have shape (2, n_features) = (2, {n_features}): a row "
                f"of lows and a row of highs; got shape {bounds.shape}."
            )
        if not np.isfinite(bounds).all() or not (bounds[1] > bounds[0]).all():
            raise ValueError("feature_bounds must be finite with low < high for every feature.")
        return bounds

    def _algorithm(self, plan, sizes, shape, L, alpha):
        """Algorithm 2 (private) or 1 with the paper's step sizes and noise per client."""
        n_clients = sizes.size
        n_classes, n_cols = shape
        radius = per_client(self._resolved("radius"), n_clients, "radius")
        kappa = float(self._resolved("kappa"))
        kwargs = dict(n_classes=n_classes, n_features=n_cols, alpha=alpha, radius=radius,
                      kappa=kappa, rho=float(self.rho), gamma=float(self.gamma),
                      dual=DUAL_NORM[self.feature_norm], project_lambda=bool(self.project_lambda),
                      n_rounds=int(self.n_rounds), personalize=bool(self.personalize))
        if plan is None:
            zeros = np.zeros(n_clients)
            attrs = dict(kappa_=kappa, radius_=radius, noise_sigma_M_=zeros,
                         noise_sigma_lambda_=zeros.copy(), sensitivity_M_=None,
                         sensitivity_lambda_=None, eta_=None, nu_=None)
            algorithm = DPFedDROAlgorithm(private=False, calibrate_round=int(self.n_rounds),
                                          output_model=self.output_model, **kwargs)
            return algorithm, attrs
        (eps_M, eps_l), delta = plan.epsilons, plan.delta
        eta, nu = np.empty(n_clients), np.empty(n_clients)
        sens_M, sens_l = np.empty(n_clients), np.empty(n_clients)
        for g, n_g in enumerate(sizes):
            eta[g], nu[g] = step_sizes(
                n_g, n_rounds=self.n_rounds, n_classes=n_classes, n_features=n_cols,
                norm_bound=L, C=float(self.C), V=float(self.V), radius=radius[g],
                kappa=kappa, epsilon_M=eps_M, epsilon_lambda=eps_l,
                delta=delta, c_M=float(self.c_M), c_lambda=float(self.c_lambda),
            )
            sens_M[g], sens_l[g] = sensitivities(
                n_g, norm_bound=L, rho=float(self.rho), eta=eta[g],
                kappa=kappa, nu=nu[g],
            )
        sigma_M = sens_M * classical_multiplier(eps_M, delta)
        sigma_l = sens_l * classical_multiplier(eps_l, delta)
        z_temperature = plan.multiplier("temperature")
        algorithm = DPFedDROAlgorithm(
            private=True, eta=eta, nu=nu, sigma_M=sigma_M, sigma_lambda=sigma_l,
            calibrate_round=None if z_temperature is None else int(self.n_rounds),
            temperature_multiplier=z_temperature, row_bound=L, **kwargs)
        attrs = dict(kappa_=kappa, radius_=radius, noise_sigma_M_=sigma_M,
                     noise_sigma_lambda_=sigma_l,
                     sensitivity_M_=sens_M, sensitivity_lambda_=sens_l, eta_=eta, nu_=nu)
        return algorithm, attrs

    def _standardize_off(self):
        # False or numpy's False_ ("boolean" admits both; np.False_ is not False)
        return not isinstance(self.standardize, str) and not self.standardize

    def _standardizes(self):
        """Whether the sites standardize by pooled moments: without privacy only (their
        sums are not private; a private fit scales by ranges, :meth:`_private_scaling`)."""
        return not self._standardize_off() and not self._is_private()

    def _site_summary(self, X, y):
        """Class labels; when standardizing, also the site's feature sums and
        sums of squared deviations from its mean (aggregates of its rows, sent
        in the clear: non-private mode only). Sums, not means, and only when
        every feature has no or at least ``MIN_ROWS_MOMENTS`` nonzero values
        (and the site that many rows): two numbers follow from their sum and
        squared deviation (:mod:`skfed.federated._release`)."""
        summary = super()._site_summary(X, y)
        if self.class_weight == "balanced":
            # the site's class histogram, in the order of summary["classes"] (or of the
            # public classes, zeros included)
            if self._classes is None:
                counts = np.unique(y, return_counts=True)[1]
            else:
                counts = np.bincount(np.searchsorted(self._classes, y),
                                     minlength=self._classes.size)
            summary["class_counts"] = counts.astype(np.int64)
        if self._standardizes() and sends_moments(X):
            mean = X.mean(axis=0)
            summary["feature_sum"] = X.sum(axis=0)
            summary["feature_m2"] = ((X - mean) ** 2).sum(axis=0)
        return summary

    def _combine_site_summaries(self, labels, summaries):
        setup = super()._combine_site_summaries(labels, summaries)
        if self.class_weight == "balanced":
            # pooled class counts from the sites' histograms; scikit-learn's "balanced"
            # weights N / (K N_c), so the pooled weighted class shares are equal
            classes = setup["classes"]
            counts = np.zeros(classes.size)
            for s in summaries:
                held = slice(None) if self._classes is not None else np.searchsorted(
                    classes, s["classes"])
                counts[held] += s["class_counts"]
            # a public class no site holds has no rows to weigh: weight 1, not counted in K
            present = counts > 0
            weight = np.ones(classes.size)
            weight[present] = counts.sum() / (present.sum() * counts[present])
            setup["class_weight"] = weight
        elif isinstance(self.class_weight, Mapping):  # given weights; classes not listed: 1
            _check_class_weight_keys(self.class_weight, setup["classes"])
            setup["class_weight"] = np.array(
                [float(self.class_weight.get(c.item(), 1.0)) for c in setup["classes"]])
        if self._standardizes():
            sent = [s for s in summaries if "feature_sum" in s]
            if not sent:
                too_few_rows_warning("standardize", MIN_ROWS_MOMENTS,
                                     "the features are not standardized")
                return setup
            # pooled mean and standard deviation from per-site moments (Chan et al.)
            n = np.array([float(s["n_samples"]) for s in sent])
            means = np.stack([np.asarray(s["feature_sum"], dtype=float) for s in sent]) \
                / n[:, None]
            mean = n @ means / n.sum()
            m2 = sum(np.asarray(s["feature_m2"], dtype=float) for s in sent)
            scale = np.sqrt((m2 + n @ (means - mean) ** 2) / n.sum())
            scale[scale <= 1e-12 * np.maximum(1.0, np.abs(mean))] = 1.0  # constant columns
            setup["feature_mean"], setup["feature_scale"] = mean, scale
        return setup


    def _engine_params(self):
        params = super()._engine_params()
        if not self._is_private():
            params["n_rounds"] += 1  # the calibration round of predict_proba
        if self._private_scaling() == "histogram":
            params["n_rounds"] += 1  # the sites' histograms, before the first round
        if self._fits_private_temperature():
            params["n_rounds"] += 1  # the private calibration round of predict_proba
        return params

    def _set_fitted(self, fit):
        super()._set_fitted(fit)
        server, setup, algorithm = fit.result.server_state, fit.setup, fit.algorithm
        self.n_iter_ = int(server["round"])
        self.temperature_ = float(server.get("temperature", 1.0))
        if not self._is_private() and "temperature" not in server:
            n_classes = np.asarray(setup["classes"]).size
            per_row = max(1, min(n_classes - 1, int(setup["n_features"])))
            warnings.warn(
                f"no site has more than {TEMPERATURE_GRID.size // per_row} rows, so none sent "
                f"its summed log losses at the {TEMPERATURE_GRID.size} calibration "
                "temperatures (fewer rows' score margins follow from those sums); "
                "temperature_ is 1 (predict_proba is the softmax of the raw scores).",
                UserWarning,
            )
        norm = float(np.linalg.norm(self._server_model(server)))
        if not self._is_private() and norm < ZERO_MODEL:
            # the exact problem's solution is M = 0: predictions would rest on round-off
            warnings.warn(
                f"the fitted model is numerically zero (||M||_F = {norm:.2g} in the units "
                "the clients trained in): the zero model solves this DRO problem, so "
                "predict() is arbitrary. Lower radius, raise kappa or set "
                "fit_intercept=True" + (
                    "; with class weights no linear model may beat it (try "
                    "class_weight=None)" if self.class_weight is not None else "")
                + ".", UserWarning,
            )
        self.feature_mean_ = self.feature_scale_ = self.feature_range_ = None
        if "feature_mean" in setup:  # standardized: x' = (x - m) / s
            mean = np.asarray(setup["feature_mean"], dtype=float)
            scale = np.asarray(setup["feature_scale"], dtype=float)
            self._to_raw_units(mean, 1.0 / scale)
            self.feature_mean_, self.feature_scale_ = mean.copy(), scale.copy()
        elif algorithm.scaling is not None:
            # privately scaled: x' = (clip(x) - c) * norm_bound / (h sqrt(p)), the rows
            # clipped to [c - h, c + h] (in training and in predict)
            center, half = algorithm.scaling.ranges(server.get("ranges"))
            self._to_raw_units(center, float(self.norm_bound) / (half * np.sqrt(center.size)))
            self.feature_range_ = np.stack([center - half, center + half])
        self.class_weight_ = (np.asarray(setup["class_weight"], dtype=float).copy()
                              if "class_weight" in setup else None)

    def _to_raw_units(self, mean, factor):
        """Map every fitted linear model from the sites' feature space ``x' = (x - mean) *
        factor`` back to raw units: ``W x' + b = (W factor) x + (b - (W factor) mean)``."""
        for coef, intercept in (("coef_", "intercept_"),
                                ("client_coefs_", "client_intercepts_"),
                                ("personal_coef_", "personal_intercept_")):
            W = getattr(self, coef)
            if W is None:
                continue
            W = W * factor
            setattr(self, coef, W)
            setattr(self, intercept, getattr(self, intercept) - W @ mean)

    def _n_training_rounds(self, result):
        return int(result.server_state["round"])

    def _client_scores(self, scores, X, index):
        """A seen site's rows: ``t_g * scores + W_g x + c_g`` (its adaptation)."""
        if getattr(self, "personal_coef_", None) is None:
            return scores
        out = scores.copy()
        for g in np.unique(index[index >= 0]):
            rows = index == g
            out[rows] = (self.personal_scale_[g] * scores[rows]
                         + X[rows] @ self.personal_coef_[g].T + self.personal_intercept_[g])
        return out

    def _model_rows(self, X):
        if getattr(self, "feature_range_", None) is None:
            return X
        return np.clip(X, self.feature_range_[0], self.feature_range_[1])

    __metadata_request__predict_proba = {"groups": True}
    __metadata_request__predict_log_proba = {"groups": True}

    def predict_log_proba(self, X, groups=None):
        """Log of :meth:`predict_proba`.

        Parameters
        ----------
        %(rows_adapted)s

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        scores, index = self._scores_by_client(X, groups)
        if getattr(self, "personal_coef_", None) is not None:
            # a site's adaptation is fitted on the log loss: its scores are log-odds
            # already; the global model's are calibrated by temperature_
            scores[index < 0] /= self.temperature_
            return log_softmax(scores, axis=1)
        return log_softmax(scores / self.temperature_, axis=1)

    def predict_proba(self, X, groups=None):
        """Class probabilities ``softmax((M x + b) / temperature_)``.

        The Crammer-Singer model gives scores, not probabilities; they are
        calibrated by one temperature. Without privacy it minimises the log
        loss over all clients' training rows, fitted in one extra round after
        the ``n_rounds`` training rounds: the server broadcasts the released
        model and every client returns only the sum of its log losses at 61
        fixed temperatures (``1e-3`` to ``1e3``, log-spaced); the server
        picks the best (refined by a parabola in log scale). A client sends
        those sums only if it has more than ``61 // min(K - 1, n_features)``
        rows (``K`` classes): each row's losses are a function of its
        ``min(K - 1, n_features)`` score margins, which fewer rows' 61 sums
        give back (``doc/releases.md``); if no client has, ``fit`` warns and
        ``temperature_ = 1``. With privacy (``temperature_share > 0``) every
        client sends, once, its summed log losses at 8 temperatures
        ``D / r``, ``r`` log-spaced in ``[0.1, 30]``, where ``D`` is the
        largest gap between two class scores the released model gives a row
        within the norm bound (public); each row's loss there is at most
        ``log K + r``, so the sums, divided by these bounds, change by at most
        1 each when a row is replaced, and Gaussian noise of
        ``temperature_share`` of the budget covers them (in
        ``privacy_spent_``). A seen site's rows (``personalize=True``) are
        scored by its own adaptation, fitted on the log loss, instead.

        Parameters
        ----------
        %(rows_adapted)s

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        return np.exp(self.predict_log_proba(X, groups))

    def _server_model(self, server):
        if self.output_model == "last":
            return server["coef"]
        return server["sum_coef"] / server["round"]

    def _set_personal(self, states):
        """Each site's adaptation (model units; :meth:`_to_raw_units` maps it), or None."""
        if not self.personalize or states is None:
            self.personal_scale_ = self.personal_coef_ = None
            self.personal_intercept_ = self.personal_penalty_ = None
            return
        self.personal_scale_ = np.array([s["adapt_scale"] for s in states])
        self.personal_coef_ = np.stack([s["adapt_coef"] for s in states])
        self.personal_intercept_ = np.stack([s["adapt_intercept"] for s in states])
        self.personal_penalty_ = np.array([s["adapt_penalty"] for s in states])

    def _set_client_results(self, result, algorithm):
        """Client models and the per-round history; on a distributed run they stay on the sites.

        There ``client_coefs_`` and ``client_intercepts_`` are ``None`` and
        the history holds only the server-side ``"consensus_violation"``.
        """
        violation = np.asarray(result.server_state["consensus"])
        states = result.client_states
        self._set_personal(states)
        if states is None:
            self.client_coefs_ = self.client_intercepts_ = None
            self.history_ = {"consensus_violation": violation}
            return
        client_M = np.stack([s["coef"] for s in states])
        if self._fits_intercept():
            self.client_coefs_ = client_M[:, :, :-1].copy()
            self.client_intercepts_ = client_M[:, :, -1] * float(self.intercept_scaling)
        else:
            self.client_coefs_ = client_M
            self.client_intercepts_ = np.zeros(client_M.shape[:2])
        # each client's values in the rounds it answered (NaN in the others);
        # its objective carries over the rounds it was not asked (its iterate
        # did not move), so the weighted objective is NaN only before every
        # client has answered once
        # the training rounds (after the private scaling's histogram round, if any)
        first = int(algorithm.scaling is not None and algorithm.scaling.releases)
        asked = np.asarray(result.participation, dtype=bool)[first:first + violation.size]
        objective, lam, tau = (np.full((len(states), violation.size), np.nan) for _ in range(3))
        for k, s in enumerate(states):
            rounds = np.flatnonzero(asked[:, k])[:len(s["objective"])]
            objective[k, rounds] = s["objective"]
            lam[k, rounds] = s["lam_history"]
            if s["tau_history"]:
                tau[k, rounds] = s["tau_history"]
        carried = objective.copy()
        for t in range(1, violation.size):
            carried[:, t] = np.where(asked[t], carried[:, t], carried[:, t - 1])
        obj = self.client_weights_ @ carried
        t = np.arange(1, obj.size + 1)
        self.history_ = {
            "objective": obj,
            "consensus_violation": violation,
            "convergence_metric": np.cumsum(obj) / t + BETA * violation,
            "lambda": lam,
            "tau": tau if any(s["tau_history"] for s in states) else tau[:, :0],
        }
