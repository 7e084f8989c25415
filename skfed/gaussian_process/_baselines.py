"""The paper's pFedGP baseline (adapted, Sec. 4.4): client GPs with FedAvg'd kernels."""

from sklearn.utils._param_validation import StrOptions

from ..utils._param_validation import (
    FEDERATION_CONSTRAINTS, positive_int, positive_real,
)
from ._elbo import ModelConfig
from ._ilmm import IlmmConfig
from ._covariance import KERNEL_KINDS
from ._pfedhgp import (
    DEFAULT_LOCAL_STEPS,
    OPTIMIZERS,
    POPULATION_LOCAL,
    PFedHGPRegressor,
    _check_input_bounds,
)

__all__ = ["PFedGPRegressor"]


class PFedGPRegressor(PFedHGPRegressor):
    """pFedGP as adapted in the pFedHGP paper: a sparse GP per client, shared kernel.

    Each client keeps its own sparse variational GP (its own inducing inputs
    and ``q(u)``); there is no global/deviation/local decomposition. Every
    round each client runs ``local_steps`` optimizer steps on its ELBO and
    sends only its kernel hyperparameters (softplus pre-images); the server
    averages them (FedAvg) and broadcasts the average, which every client
    adopts at the start of the next round (paper Sec. 4.2, 4.4). This is
    NOT the deep-kernel pFedGP of Achituve et al. (2021).

    Multi-output ``y`` (``Q >= 2`` columns) gives each client an ILMM of its
    own: ``R`` latent sparse GPs mixed by the client's loadings ``B_i`` (the
    local-only component of :class:`PFedHGPRegressor`); the per-latent
    lengthscales are averaged across clients.

    Parameters
    ----------
    kernel : {"rbf", "matern32", "matern52"}, default="rbf"
    ard : bool, default=False
        One lengthscale per feature. Unlike :class:`PFedHGPRegressor` (whose
        default became ``True`` by measurement), this baseline keeps one
        shared lengthscale, as in the paper's benchmark.
    n_latents : int, default=2
        Multi-output ``y`` only: latent GPs per client.
    n_inducing : int, default=25
        Inducing inputs per client, started at distinct rows of the client's
        ``X`` (each client needs at least that many distinct rows).
    init_lengthscale : float, default=0.35
    init_variance : float, default=1.0
    init_noise : float, default=0.0025
        Initial noise variance (shared, learned by the server).
    optimizer : {"paper", "cavi"}, default="paper"
        ``"paper"``: Adam on all client parameters; ``"cavi"``: closed-form
        ``q(u)`` and Adam on the kernel.
    n_rounds : int, default=20
    local_steps : int or None, default=None
        80 (``"paper"``) or 10 (``"cavi"``) when ``None``.
    local_lr, server_lr : float, default=0.1
    learn_inducing : bool, default=True
    normalize_y : bool, default=False
    input_bounds : array-like of shape (2,) or (2, n_features), default=None
        A public box of the inputs, ``(lower, upper)``: its width / 10 scales
        the Adam steps of the inducing inputs. ``None``: from the clients'
        pooled sums (centre +- sqrt(3) scale per feature; clients with fewer
        than 3 rows, or a column with one or two nonzero values, send none), see :class:`PFedHGPRegressor`.
    jitter : float, default=1e-6
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per round; as in :class:`PFedHGPRegressor`
        (the server sums every client's latest statistics).
    on_client_error : {"raise", "skip"}, default="raise"
        Policy for a failing client step; as in :class:`PFedHGPRegressor`.
    unknown_client : {"global", "error"}, default="global"
        Unseen clients get the population prediction: a GP prior.
    population_local : {"median", "none"}, default="median"
        The kernel of that prior. ``"median"``: the clients' median final
        kernel hyperparameters, which they send in the last round anyway
        (multi-output: their packed loading outer products ``b b^T`` too,
        released by the sites for this purpose, see
        :class:`PFedHGPRegressor`). ``"none"``: the server keeps nothing and
        the population prediction is the noise alone.
    random_state : int, RandomState instance or None, default=None
    n_jobs : int or None, default=None
    verbose : int, default=0

    Attributes
    ----------
    clients_ : ndarray of shape (n_clients,)
        Sorted client labels seen in ``fit``.
    n_outputs_ : int
        Number of outputs ``Q`` (1 for 1-D or single-column ``y``).
    lengthscales_local_ : ndarray of shape (n_clients, 1 or n_features)
        Each client's final lengthscale(s), in units of ``X`` (multi-output:
        shape ``(n_clients, n_latents, 1 or n_features)``).
    variances_local_ : ndarray of shape (n_clients,)
        Each client's output variance, in units of ``y`` squared
        (multi-output: the fixed latent variance ``init_variance``).
    loadings_local_ : ndarray of shape (n_clients, Q, n_latents) or None
        Multi-output only: each client's loadings ``B_i`` in units of ``y``
        (``None`` for 1-D ``y``).
    inducing_local_ : list of ndarray of shape (M_i, n_features)
        Each client's inducing inputs ``Z_i``, in units of ``X`` (``M_i`` is
        ``n_inducing``, or the client's number of distinct rows if fewer). These four
        are ``None`` when fitted on a distributed engine: the client GPs
        stay on the sites.
    noise_variance_ : float or ndarray of shape (Q,)
        Learned shared noise variance, in units of ``y`` (per output for
        multi-output ``y``).
    x_mean_, x_std_ : ndarray of shape (n_features,)
        Zeros and ones: the inputs are not standardized.
    y_mean_, y_std_ : float or ndarray of shape (Q,)
        The target standardization (``normalize_y``; 0 and 1 without it):
        the client GPs are fitted to ``(y - y_mean_) / y_std_``.
    mean_coef_ : ndarray of shape (n_features,) or (n_features, Q)
        Zeros: the prior mean is constant.
    mean_intercept_ : float or ndarray of shape (Q,)
        The constant prior mean, ``y_mean_``.
    phi_ : float
        0: there is no deviation component.
    n_iter_ : int
        Training rounds run (``n_rounds``).
    elbo_ : ndarray of shape (n_iter_,)
        The clients' summed ELBO (on the normalized scale) in each training
        round.
    jitter_ : float
        The largest diagonal jitter any Cholesky factorization needed.
    inference_ : str
        ``"variational"``.
    lengthscale_global_, variance_global_, loadings_global_, inducing_global_ : None
        Always ``None``: there is no global GP.
    loadings_deviation_, random_effects_cov_, slope_prior_variance_ : None
        Always ``None``: no deviation component, random effects or slopes.
    client_noise_variances_, noise_spread_ : None
        Always ``None``: one shared noise variance.
    log_marginal_likelihood_value_, n_restarts_ : None
        Always ``None``: collapsed inference only.
    communication_, n_features_in_, feature_names_in_ :
        As :class:`PFedHGPRegressor` (``feature_names_in_`` only when ``X``
        has string column names).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.gaussian_process import PFedGPRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, (40, 1))
    >>> y = np.sin(X[:, 0]) + 0.05 * rng.normal(size=40)
    >>> model = PFedGPRegressor(n_inducing=8, optimizer="cavi", n_rounds=3).fit(
    ...     X, y, groups=np.repeat([0, 1], 20))
    >>> model.predict(X[:2], groups=[0, 1]).shape
    (2,)
    """

    def __init__(
        self,
        *,
        kernel="rbf",
        ard=False,
        n_latents=2,
        n_inducing=25,
        init_lengthscale=0.35,
        init_variance=1.0,
        init_noise=0.05**2,
        optimizer="paper",
        n_rounds=20,
        local_steps=None,
        local_lr=0.1,
        server_lr=0.1,
        learn_inducing=True,
        normalize_y=False,
        input_bounds=None,
        jitter=1e-6,
        client_fraction=1.0,
        on_client_error="raise",
        unknown_client="global",
        population_local="median",
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        self.kernel = kernel
        self.ard = ard
        self.n_latents = n_latents
        self.n_inducing = n_inducing
        self.init_lengthscale = init_lengthscale
        self.init_variance = init_variance
        self.init_noise = init_noise
        self.optimizer = optimizer
        self.n_rounds = n_rounds
        self.local_steps = local_steps
        self.local_lr = local_lr
        self.server_lr = server_lr
        self.learn_inducing = learn_inducing
        self.normalize_y = normalize_y
        self.input_bounds = input_bounds
        self.jitter = jitter
        self.client_fraction = client_fraction
        self.on_client_error = on_client_error
        self.unknown_client = unknown_client
        self.population_local = population_local
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    # the paper's baseline: the variational fit of one GP per client, nothing more
    inference = "variational"
    random_effects = "none"
    site_trend = "none"

    @classmethod
    def _test_instances(cls):
        return [cls(n_inducing=10, ard=True, optimizer="cavi", n_rounds=10, local_steps=5,
                    init_lengthscale=3.0, normalize_y=True, random_state=0)]

    _parameter_constraints = {
        **FEDERATION_CONSTRAINTS,
        "kernel": [StrOptions(set(KERNEL_KINDS))],
        "ard": ["boolean"],
        "n_latents": [positive_int()],
        "n_inducing": [positive_int()],
        **{name: [positive_real()] for name in (
            "init_lengthscale", "init_variance", "init_noise", "local_lr", "server_lr",
            "jitter")},
        "optimizer": [StrOptions(set(OPTIMIZERS))],
        "local_steps": [positive_int(0), None],
        "learn_inducing": ["boolean"],
        "normalize_y": ["boolean"],
        "input_bounds": "no_validation",  # checked at set-up, against n_features
        "population_local": [StrOptions(set(POPULATION_LOCAL))],
    }

    def _check_params(self):
        """Every check is a constraint; the parent's hooks read ``_components``."""
        self._components = {"local"}

    def _steps_algorithm(self, n_features, n_outputs=None):
        local_steps = DEFAULT_LOCAL_STEPS[self.optimizer] if self.local_steps is None else \
            int(self.local_steps)
        fields = dict(kind=KERNEL_KINDS[self.kernel], ard=bool(self.ard), n_features=n_features,
                      use_global=False, use_deviation=False, use_local=True,
                      jitter=float(self.jitter), learn_inducing=bool(self.learn_inducing))
        if n_outputs is None:
            cfg = ModelConfig(**fields)
        else:
            cfg = IlmmConfig(**fields, n_outputs=n_outputs, rank_global=1,
                             rank_local=int(self.n_latents),
                             variance_local=float(self.init_variance))
        return self._make_steps_baseline(cfg, int(self.n_inducing), local_steps)

    def _make_steps_baseline(self, cfg, Mi, local_steps):
        from ._ilmm_steps import _IlmmSteps
        from ._steps import InitialValues, _PFedHGPSteps

        steps_class = _IlmmSteps if isinstance(cfg, IlmmConfig) else _PFedHGPSteps
        return steps_class(
            cfg, optimizer=self.optimizer, n_inducing_global=1, n_inducing_local=Mi,
            init=InitialValues(lengthscale_local=self.init_lengthscale,
                               variance_local=self.init_variance, noise=self.init_noise),
            local_steps=local_steps, local_lr=self.local_lr, server_lr=self.server_lr,
            normalize_y=bool(self.normalize_y), share_local_hypers=True,
            n_rounds=int(self.n_rounds),
            release_population=self.population_local == "median",
            input_bounds=_check_input_bounds(self.input_bounds, cfg.n_features),
        )

    _inducing_local_name = "n_inducing"  # the parameter named in the small-client warning
