"""PFedHGPRegressor: personalized federated hierarchical sparse Gaussian processes."""

import copy
import inspect
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..base import FederatedEstimator, check_on_site
from ..federated._engine import blas_threads
from ..federated._release import MIN_ROWS_MOMENTS
from ..utils._param_validation import (
    FEDERATION_CONSTRAINTS, nonnegative_real, positive_int, positive_real,
)
from ..utils._validation import (
    check_groups, check_positive_int, check_scale, user_stacklevel, validate_data,
)
from ._elbo import ModelConfig, softplus
from ._ilmm import IlmmConfig
from ._predict import gaussian_draws, ilmm_moments, scalar_moments
from ._ilmm_steps import _IlmmSteps
from ._random_effects import RANDOM_EFFECTS
from ._covariance import KERNEL_KINDS
from ._collapsed import Layout, PFedHGPCollapsed, posterior_moments
from ._random_effects import INITIAL_VARIANCE
from ._steps import InitialValues, _PFedHGPSteps

__all__ = ["PFedHGPRegressor"]

COMPONENTS = ("global", "deviation", "local")
OPTIMIZERS = ("paper", "cavi")
MEAN_UPDATES = ("joint", "blockwise")
DEFAULT_LOCAL_STEPS = {"paper": 80, "cavi": 10}
DEFAULT_SERVER_LR = {"paper": 0.1, "cavi": 0.3}
POPULATION_LOCAL = ("median", "none")
MEAN_FUNCTIONS = ("constant", "linear")
SLOPE_PRIORS = ("auto", "flat", "learned")
INFERENCES = ("auto", "variational", "collapsed")
SITE_TRENDS = ("none", "linear")
# init_variance_local=None for 1-D y (benchmarks/defaults/pfedhgp_start.py)
SCALAR_INIT_VARIANCE_LOCAL = 0.1


def _n_outputs(y):
    """``Q`` of a validated 2-D ``y``; ``None`` for 1-D ``y`` (the scalar model)."""
    return y.shape[1] if y.ndim == 2 else None


def _check_components(components):
    if isinstance(components, str):
        components = (components,)
    try:
        comps = tuple(components)
    except TypeError:
        raise ValueError(
            f"components must be a tuple of names from {COMPONENTS}, got {components!r}.") from None
    bad = [c for c in comps if c not in COMPONENTS]
    if bad or not comps or len(set(comps)) != len(comps):
        raise ValueError(
            f"components must be a non-empty tuple of distinct names from {COMPONENTS}, "
            f"got {components!r}."
        )
    return set(comps)


def _check_input_bounds(input_bounds, n_features):
    """``input_bounds`` as ``(lower, upper)``, each of shape ``(n_features,)``, or None."""
    if input_bounds is None:
        return None
    try:
        b = np.asarray(input_bounds, dtype=float)
    except (TypeError, ValueError):
        b = np.empty(0)
    if b.ndim == 1 and b.shape[0] == 2:
        b = np.repeat(b[:, None], n_features, axis=1)
    if b.shape != (2, n_features) or not np.all(np.isfinite(b)) or not np.all(b[0] <= b[1]):
        raise ValueError(
            "input_bounds must be None, (lower, upper) or an array of shape (2, n_features) "
            f"= (2, {n_features}) of finite values with lower <= upper per feature, got "
            f"{input_bounds!r}."
        )
    return b[0].copy(), b[1].copy()


def _check_n_latents(n_latents):
    """``(R_g, R_l)`` from ``n_latents``: an int, or ``(R_g, R_delta, R_l)`` with
    ``R_delta = R_g``."""
    def ok(v):
        return not isinstance(v, bool) and isinstance(v, numbers.Integral) and v >= 1

    if ok(n_latents):
        return int(n_latents), int(n_latents)
    if isinstance(n_latents, (tuple, list)) and len(n_latents) == 3 and all(map(ok, n_latents)):
        r_g, r_d, r_l = (int(v) for v in n_latents)
        if r_d != r_g:
            raise ValueError(
                "n_latents: the deviation latent r has kernel phi * k_g^(r), so R_delta must "
                f"equal R_g; got (R_g, R_delta, R_l) = {tuple(n_latents)!r}."
            )
        return r_g, r_l
    raise ValueError(
        "n_latents must be an integer >= 1 or a tuple (R_g, R_delta, R_l) of integers >= 1, "
        f"got {n_latents!r}."
    )


class PFedHGPRegressor(FederatedEstimator, RegressorMixin, BaseEstimator):
    """Personalized federated hierarchical sparse Gaussian process regression (pFedHGP).

    Client ``i``'s targets are modelled as a shared global GP, a client
    deviation GP with kernel ``phi * k_g`` on the shared inducing inputs
    ``Z_g``, and a local GP with its own kernel and inducing inputs ``Z_i``,
    plus Gaussian noise (eqs. 3-4 of the pFedHGP paper [1]_)::

        y = f_g(x) + f_delta_i(x) + f_l_i(x) + eps

    At the defaults (``inference="auto"``, 1-D ``y``) the fit is the
    collapsed one: each client's blocks, a random intercept
    (``random_effects="auto"``) and the linear fixed effects (``slope_prior``)
    are integrated out exactly and the shared hyperparameters maximize the
    restricted marginal likelihood (see ``inference``), so the model nests
    the linear mixed model. With ``inference="variational"`` (and for multi-output
    ``y``) inference is the paper's: sparse variational (whitened
    full-covariance Gaussian blocks, mean-field across blocks), trained by
    the paper's federated block-coordinate rounds (Alg. 1) on :mod:`skfed.federated`: each client
    optimizes its deviation and local blocks and local kernel with the
    global block fixed and sends only its gradient summary (or the equivalent
    sufficient statistics in ``optimizer="cavi"``); the server updates
    ``q(u_g)``, ``phi``, the noise, the global kernel and ``Z_g``. Raw rows,
    deviation and local posteriors and loadings stay on the clients (local
    kernels too, except for the last-round release of ``population_local``);
    ``communication_`` records what crossed. There is no differential privacy
    or secure aggregation: "privacy-preserving" here means data locality.

    The fit is :class:`skfed.base.FederatedEstimator`'s, so
    it runs unchanged on a Flower federation
    (:class:`skfed.federated.flower.FlowerFederation`) with the same fitted
    global model and ``communication_``. In the set-up exchange (ledger round
    -1) each site sends its row and feature counts and its number of outputs.
    Round 0 is a set-up round in which each client sends its row count and,
    if it has 3 rows or more and each column of ``X`` and ``y`` 0 or 3 or
    more nonzero values, the sum and sum of squares of its targets and
    of each feature (to normalize ``y`` and ``X`` and to place ``Z_g``; no
    feature sums with ``normalize_X=False`` and ``input_bounds`` given);
    ``n_rounds`` training rounds follow. Every released quantity is listed
    in ``doc/releases.md``.

    **Multi-output** ``y`` of shape ``(n_samples, Q)`` with ``Q >= 2`` is
    fitted with the paper's ILMM (Sec. 3.9, eqs. 34-35; Sec. 4.2)::

        y(x) = B_g h_g(x) + B_delta_i h_delta_i(x) + B_l_i h_l_i(x) + eps,  eps ~ N(0, s2 I_Q)

    with ``R_g`` global latents (loadings ``B_g`` shared, learned by the
    server), ``R_g`` deviation latents (latent ``r`` has kernel ``phi
    k_g^(r)``) and ``R_l`` local latents, with loadings ``B_delta_i`` and
    ``B_l_i`` learned by client ``i``. Every latent is an independent sparse GP
    with its own lengthscale; the global and deviation latents share ``Z_g``,
    the local ones ``Z_i``. The latent output variances are **fixed** at
    ``init_variance_global`` / ``init_variance_local`` (the loadings carry the
    scale; learning both, as the paper does, is redundant). Loadings start at the
    principal directions of the second moments of ``y``, each component
    explaining an equal share, plus a 10% random perturbation: ``B_g`` from
    the pooled ``Q x Q`` moments ``sum_i Y_i^T Y_i`` sent in the set-up round,
    ``B_delta_i`` and ``B_l_i`` from the client's own ``Y_i`` (on the client).
    In the set-up round each client sends its ``Q`` column sums and its
    ``Q x Q`` second moments instead of the scalar sums.
    ``predict`` returns ``(n_samples, Q)`` means and, on request, ``(n_samples,
    Q)`` standard deviations or the ``(n_samples, Q, Q)`` joint covariance of
    the outputs at each row (eqs. 38-39). A single-column ``y`` of shape
    ``(n_samples, 1)`` is fitted with the scalar model and predicted as 1-D,
    like scikit-learn's ``GaussianProcessRegressor``.

    Parameters
    ----------
    components : tuple of {"global", "deviation", "local"}, default=("global", "deviation", "local")
        The components of the model. The paper's ablations are
        ``("global", "local")`` (No-deviation), ``("global", "deviation")``
        (No-local), ``("global",)`` (Global-only) and ``("local",)``
        (Local-only).
    kernel : {"rbf", "matern32", "matern52"}, default="rbf"
        Stationary kernel of every component.
    ard : bool, default=True
        One lengthscale per feature (automatic relevance determination), else
        one shared lengthscale per kernel (``False``, the former default;
        the same model for one feature). The default was chosen by
        the committed protocol of ``benchmarks/defaults/pfedhgp_local_linear.py`` on
        five real data sets (``doc/results/real_data_defaults.md``).
    n_latents : int or tuple of 3 int, default=2
        Multi-output ``y`` only: the latent ranks ``(R_g, R_delta, R_l)``, or
        one int for all three (the paper uses 2). ``R_delta`` must equal
        ``R_g`` (deviation latent ``r`` uses ``phi k_g^(r)``).
    n_inducing_global : int, default=25
        Number ``M`` of global inducing inputs ``Z_g``: an even grid over the
        pooled feature range for one feature, a scrambled Halton set in the
        pooled bounding box otherwise.
    n_inducing_local : int, default=25
        Number ``M_i`` of local inducing inputs per client. They start at
        ``M_i`` distinct rows of the client's own ``X`` (greedy farthest-point
        selection); a client with fewer distinct rows gets one per distinct
        row (``fit`` warns once, naming those clients), so small clients,
        down to one row, are fitted too.
    init_inducing_global : array-like of shape (M, n_features), default=None
        Explicit initial ``Z_g`` (overrides ``n_inducing_global``).
    init_lengthscale_global, init_lengthscale_local : float, default=2.0, 0.35
        Initial lengthscales (the paper's simulation values), in the model's
        input units: standardized features with ``normalize_X=True``, raw
        ``X`` otherwise (the paper's inputs span ``[0, 10]``).
    init_variance_global : float, default=1.0
        Initial global kernel output variance (multi-output: the fixed latent
        variance).
    init_variance_local : float or None, default=None
        Initial local kernel output variance (multi-output: the fixed latent
        variance). ``None``: 0.1 for 1-D ``y``, 1.0 (the paper's) for
        multi-output ``y``. Started as large as the shared part, the local
        GPs take each site's signal in the first rounds, before the global
        lengthscale has moved, and the fit stays there: started at 0.1 the
        scalar model predicts better on every real data set measured and
        on a hierarchy drawn from the model (``benchmarks/defaults/pfedhgp_start.py``,
        ``benchmarks/defaults/pfedhgp_windowed.py``, see the changelog's
        "Defaults history"; 1.0 before).
    init_phi : float, default=1.0
        Initial deviation scale ``phi``.
    init_noise : float, default=0.0025
        Initial noise variance ``sigma^2`` (the paper's ``0.05^2``). One noise
        variance is shared by all clients and learned by the server.
    optimizer : {"cavi", "paper"}, default="cavi"
        ``"cavi"``: closed-form variational blocks, ``phi`` and noise (derived
        here, not in the paper) plus Adam steps on the kernel
        hyperparameters; it reaches a higher ELBO in fewer rounds and
        predicts better on held-out data (``benchmarks/defaults/pfedhgp_defaults.py``).
        ``"paper"``: the paper's protocol (Sec. 3.6, Alg. 1): Adam on every
        parameter with analytic gradients (``local_steps`` client steps, one
        server step per round); about 15 times slower. The paper's protocol is ``optimizer="paper",
        n_rounds=20, tol=None, normalize_y=False, normalize_X=False,
        mean_function="constant"``.
    mean_update : {"joint", "blockwise"}, default="joint"
        How ``optimizer="cavi"`` sets the global mean ``m_g`` (scalar ``y``
        with deviation or local components; ignored otherwise). The means
        enter the ELBO only through one joint quadratic, so at fixed
        covariances and hyperparameters the best ``m_g`` can be found with
        the clients' means integrated out. ``"joint"``: each client also
        sends its statistics with its deviation and local blocks integrated
        out (an ``M x M`` matrix and an ``M``-vector), the server sets ``m_g``
        to the joint optimum of all the means and the clients' next solves
        follow; in the last round ``m_g`` is set blockwise so that it fits
        the clients' final blocks. ``"blockwise"``: ``m_g`` given the clients'
        current means (plain coordinate ascent); the global and deviation
        blocks then mix slowly (the deviation kernel ``phi k_g`` has the
        shape of ``k_g``): the deviations absorb the shared trend and the
        population prediction stays nearly flat for many rounds
        (``benchmarks/defaults/pfedhgp_mixing.py``). Both maximize the same ELBO over
        the same mean-field family (paper Assumption 2).
    n_rounds : int, default=60
        The variational fit's maximum number of training rounds (after the
        set-up round; the collapsed fit runs its optimizer to convergence, see
        ``inference``); the fit
        stops earlier once the ELBO converges (``tol``). ``n_iter_`` is the
        number run. The paper's protocol uses 20 rounds (Sec. 4.2).
    tol : float or None, default=None
        Stop when the ELBO per training row (on the normalized scale) changed
        by at most ``tol`` over the last 5 rounds; the round after is run as
        the last one (the population release, the blockwise ``m_g``, no kernel
        step), so a fit that stops after ``k`` rounds is the fit with
        ``n_rounds=k``. ``None`` (or 0) runs all ``n_rounds``. The defaults
        ``tol``, ``n_rounds`` and ``server_lr`` were chosen on real grouped
        data (``benchmarks/defaults/pfedhgp_convergence.py``, selection split seeds,
        see ``doc/results/real_data_defaults.md``): ``tol=1e-3`` with 60 rounds at most
        stopped some fits before their kernel converged and predicted worse.
    local_steps : int or None, default=None
        Client Adam steps per round (``None``: 80 for ``"paper"``, 10 for
        ``"cavi"``).
    local_lr : float, default=0.1
        Adam learning rate of the clients.
    server_lr : float or None, default=None
        Adam learning rate of the server: on the whole global block for
        ``"paper"``, on the global kernel hyperparameters and ``Z_g`` for
        ``"cavi"`` (stepped every other round). ``None``: 0.1 for ``"paper"``
        (the paper's), 0.3 for ``"cavi"`` (the global lengthscale reaches
        its optimum in fewer rounds).
    learn_inducing : bool, default=True
        Learn ``Z_g`` and ``Z_i`` (the variational inference; the collapsed
        fit keeps ``Z_g`` where the set-up places it and has no ``Z_i``).
    normalize_y : bool, default=True
        Standardize ``y`` with the pooled mean and standard deviation
        (computed from the clients' sums in the set-up round), so that the
        zero-mean priors, the initial noise and the population prediction
        are on the scale of ``y``. ``False`` is the paper's protocol.
    normalize_X : bool, default=True
        Standardize each feature by a robust pooled centre and scale: the
        row-weighted medians over the clients of their means, and of their
        within-client variances plus squared deviations from that centre
        (from the clients' per-feature sums and sums of squares in the set-up
        round, so one client's outlying rows do not set every client's scale;
        no single row's value is sent). The lengthscales and ``Z_g`` then
        live on the standardized inputs and ``Z_g`` starts on ``[-sqrt(3),
        sqrt(3)]`` per feature (the range of uniform inputs; ``input_bounds``,
        standardized, if given). ``False`` is the paper's
        protocol: raw inputs, ``Z_g`` in ``input_bounds`` (the paper's
        ``[0, 10]``) or, without them, in the pooled centre +- sqrt(3) times
        the pooled scale per feature (the range of uniform inputs). No client
        sends a minimum or maximum (they are raw values of single rows), and
        a client with fewer than 3 rows, or a column of ``X`` or ``y`` with
        one or two nonzero values, sends no sums (the sum and the sum of
        squares of one or two numbers give the numbers): it is left out of
        the pooled statistics (of ``normalize_y`` too); if no client has 3
        rows, the centre is 0 and the scale 1, with a warning.
    mean_function : {"linear", "constant"}, default="linear"
        The prior mean of ``y`` that the GP components deviate from.
        ``"linear"``: an affine function of the inputs, ``mean_intercept_ +
        X @ mean_coef_``. Under the collapsed inference, the model's fixed
        effects, integrated out with the GPs (generalized least squares;
        ``slope_prior``). Under the variational inference, fitted by ridge
        regression (penalty 1 on the standardized inputs) on the pooled rows
        in closed form from the clients' set-up sums, ``X^T X`` and ``X^T y``
        included (clients with 3 rows or more; see ``doc/releases.md``); with
        ``normalize_y`` the targets are then scaled by the pooled residual
        standard deviation.
        The GP mean returns to zero away from the data, so the population
        prediction of a new client, and every prediction outside the
        training range, then follows the pooled linear trend (Rasmussen &
        Williams 2006, Sec. 2.7, with the basis coefficients plugged in)
        instead of the pooled mean. ``"constant"``: the pooled mean with
        ``normalize_y`` (0 without): the paper's model. Chosen on real
        grouped data (``benchmarks/defaults/pfedhgp_mean.py``, see
        ``doc/results/real_data_defaults.md``).
    site_trend : {"none", "linear"}, default="none"
        ``"linear"``: each client adds an affine deviation ``b_i^T [1, x]``
        (model units) from the prior mean, a random intercept and slope as
        in a mixed model with random slopes: a ridge fit (penalty 1, the
        intercept penalized too) of its normalized residuals from the prior
        mean on its own rows, once, in the first training round; the GP
        blocks then model what is left. It is the posterior mean of ``b_i ~
        N(0, sigma^2 I)`` (``sigma^2`` the noise variance); a seen client's
        predictive variance adds ``sigma^2 [1, x]^T ([1, X_i]^T [1, X_i] +
        I)^-1 [1, x]``. ``b_i`` stays on the client (nothing more is sent);
        a new client's population prediction is unchanged. 1-D ``y`` only.
        Measured on real grouped data and not adopted as the default
        (``benchmarks/defaults/pfedhgp_local_linear.py``, see
        ``doc/results/real_data_defaults.md``): fitted in two steps, it leaves the
        noise to be learned after the trend, so on small sites the intervals
        are too narrow (seen-site 95% coverage 0.82 on sleepstudy).
    random_effects : {"auto", "none", "intercept", "linear"}, default="auto"
        ``"auto"``: ``"intercept"`` under the collapsed inference (integrated
        out exactly with the client's other blocks, ``Sigma`` a REML estimate),
        ``"none"`` under the variational one. Otherwise
        a linear mixed model's random effects as one more additive block per
        client: ``z(x)^T b_i`` with ``b_i ~ N(0, Sigma)``, ``z(x) = [1]``
        (``"intercept"``, a random intercept) or ``[1, x]`` (``"linear"``,
        random intercept and slopes on the standardized inputs, correlated:
        ``Sigma`` is a full covariance). Each client's ``q(b_i)`` is set in
        closed form every round given its GP blocks, in the same mean-field
        family (its mean and covariance stay on the client), from the second
        training round on; the server's EM step moves the clients' mean
        effect into the prior mean's intercept (and slopes) and sets
        ``Sigma`` to the spread of ``E[b_i]`` about it plus the mean
        ``Cov(b_i)`` (each client sends ``E[b_i]`` and ``E[b_i b_i^T]``), and
        the noise update counts the effects' variance. With the global GP
        alone (``components=("global",)``) this is the linear mixed model
        (ML) around the linear prior mean: the model nests it (a test checks
        the variances and predictions against :class:`FedMixedLMRegressor
        <skfed.linear_model.FedMixedLMRegressor>`). With deviation and local
        GPs those usually take the sites' offsets first. A seen client's
        prediction adds ``z(x)^T E[b_i]`` and its variance; a new client's
        adds the prior variance ``z(x)^T Sigma z(x)``. Under the variational
        inference ``optimizer="cavi"`` and 1-D ``y`` only; not with ``site_trend``.
    slope_prior : {"auto", "flat", "learned"}, default="auto"
        The prior of the linear ``mean_function``'s slopes under the collapsed
        inference (the intercept's is flat). ``"flat"``: the linear mixed
        model's fixed effects, integrated out under a flat prior (REML).
        ``"learned"``: ``beta ~ N(0, tau^2 I)`` on the standardized inputs,
        ``tau^2`` learned with the other hyperparameters (a linear kernel
        ``tau^2 x^T x'`` added to the global GP; Rasmussen & Williams 2006,
        Sec. 2.7): where the data show no linear trend the slopes shrink
        towards 0 instead of extrapolating a trend the global GP does not
        need, and as ``tau^2`` grows it becomes the flat prior. ``"auto"``:
        ``"learned"`` under the collapsed inference; the variational fit
        fits the linear mean by ridge regression (``mean_function``) and
        accepts only ``"auto"``. Chosen by measurement (split seeds 0-2 of
        the five regression sets and the windowed hierarchy,
        ``benchmarks/defaults/pfedhgp_collapsed.py``, see
        ``doc/results/pfedhgp_start.md``).
    input_bounds : array-like of shape (2,) or (2, n_features), default=None
        The box, in raw input units, where ``Z_g`` starts (an even grid for
        one feature, a scrambled Halton set otherwise): ``(lower, upper)`` for
        every feature, or one row of lower and one of upper ends. Pass a
        public range (the design's, or one known before seeing the data);
        nothing about the inputs is then needed to place ``Z_g``. ``None``:
        the box comes from the clients' pooled sums (see ``normalize_X``).
        It also sets the Adam step scale of the inducing inputs (box width /
        10, or 0.1 where ``lower == upper``).
    jitter : float, default=1e-6
        Variational inference: added to the diagonal of every inducing
        covariance before its Cholesky factorization; multiplied by 10 on
        each failure. (The collapsed fit adds ``1e-6`` times the global
        variance to its inducing covariance; there ``jitter`` is used only by
        :meth:`sample_y`'s draws.) The largest
        jitter used is ``jitter_``: every round's client message carries the
        largest jitter that client has needed so far (``jitter`` times a
        power of 10: it tells how many escalations were needed, no data
        value).
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per round: ``ceil(client_fraction *
        n_clients)``, drawn uniformly without replacement from the
        ``random_state`` stream (:func:`skfed.federated.run_federation`). The
        set-up round and the round of the population release ask every
        client. The server sums every client's latest statistics, so a client
        not asked in a round contributes those of its last round
        (incremental variational inference; with every client asked, the
        paper's round).
    on_client_error : {"raise", "skip"}, default="raise"
        A failing client step stops the fit with an error naming the client
        and round (``"raise"``) or leaves the client out of that round
        (``"skip"``: recorded in ``communication_.failures``; the client
        keeps its state and contributes its latest statistics, as an
        unsampled one).
    unknown_client : {"global", "error"}, default="global"
        Prediction for clients not seen in ``fit``: the population prediction
        or a ``ValueError``.
    population_local : {"median", "none"}, default="median"
        What the population prediction (``groups=None``, unseen clients)
        knows of a new client's own components. ``"median"``: in the last
        training round each client also sends its local kernel
        hyperparameters (multi-output: its local lengthscales and, per
        latent, the outer products ``b b^T`` of its deviation and local
        loading columns, packed); the server keeps them, and a new client's
        local prior uses the clients' median local kernel (multi-output: its
        deviation and local priors are mapped through the clients' mean
        ``b b^T``). These numbers are released by the sites, a policy choice
        (the paper does not treat new clients, and a client's local
        hyperparameters are its own), and ``communication_`` counts their
        bytes. ``"none"``: nothing extra
        is sent and the population prediction leaves out what only the
        clients know: the global posterior plus the deviation prior ``phi *
        k_g`` plus noise for scalar ``y`` (no local term), the global part
        plus noise for multi-output ``y`` (no deviation or local term, whose
        loadings are the clients'); it then understates a new client's
        uncertainty. Seen clients' predictions are the same either way.
    inference : {"auto", "variational", "collapsed"}, default="auto"
        How the model is fitted. ``"auto"``: ``"collapsed"`` for 1-D ``y``
        with ``kernel="rbf"``, ``site_trend="none"``, ``optimizer="cavi"`` and
        ``client_fraction=1.0`` (the defaults) where a site has 3 rows or more,
        else ``"variational"``; ``inference_`` says which ran.
        Chosen by measurement on real grouped data (split seeds 0-2, five
        regression sets, ``benchmarks/defaults/pfedhgp_collapsed.py``, see
        ``doc/results/pfedhgp_start.md``): the collapsed fit's seen-site RMSE
        is at most statsmodels' MixedLM's on every set, the variational
        fit's up to 1.5% above it (Exam). ``"variational"``: the paper's sparse
        variational fit (paper sec. 4), with ``optimizer`` choosing its
        rounds. ``"collapsed"``: the same hierarchy with each client's blocks
        (deviation GP, local GP, ``random_effects``) and the fixed effects
        (an intercept, or the linear ``mean_function``) integrated out
        exactly; only the global GP is sparse (inducing inputs ``Z_g``, its
        residual exact within each client: PITC by client). The
        hyperparameters, shared by the clients, maximize the restricted
        (REML) marginal likelihood with L-BFGS driven by the server, two
        exchanges per evaluation: each client sends its ``Z_g``-projected
        statistics (``H^T C^-1 H``, ``H^T C^-1 y``, ``log|C|``, ``y^T C^-1
        y``, ``M + p`` numbers or matrices of that size), then, given the
        broadcast fixed effects and global posterior, its gradient. With
        ``components=("global",)``, no GP and ``slope_prior="flat"`` it is the
        linear mixed model's REML fit. Clients with fewer than 3 rows send nothing and are left
        out. 1-D ``y``, ``kernel="rbf"``, ``site_trend="none"`` and
        ``client_fraction=1.0`` only (the likelihood needs every client);
        the variational fit's settings do not apply (``optimizer``,
        ``mean_update``, ``n_rounds``, ``tol``, ``local_steps``, ``local_lr``,
        ``server_lr``, ``learn_inducing``, ``jitter``, ``population_local``
        and the local inducing settings); ``client_kernels`` and ``client_dissimilarity``
        are not available (the clients share their kernels).
    n_restarts : int or "auto", default="auto"
        Collapsed inference only: this many more starts beside the given
        one, each of the *default* initial lengthscales and variances scaled
        by ``10^U(-1, 1)`` (drawn from ``random_state``; about the defaults,
        not the given ``init_*``, so the starts tried do not depend on them).
        Each start runs 60 optimizer steps, side by side in the same rounds
        (each round asks the clients' statistics at every start still
        running), and the one of the highest likelihood is continued to
        convergence.
        The likelihood has optima of nearly equal height that predict
        differently, so without restarts the answer depends on the start.
        ``"auto"``: 8 restarts when the clients hold at most 1,000 rows in
        all (the set-up's row counts), none above, where a fit with restarts
        would take 4-8 times as long (Exam's 3,248 training rows: 23 s
        against 5 s). On the windowed hierarchy of
        ``doc/results/pfedhgp_start.md``, 8 restarts give the same answer from
        every start tried (4 left one seed in ten start-dependent). The
        restarts add the rounds of the longest start, not their sum (3
        clients of 200 rows: 187 rounds against 137 without).
        ``n_restarts_`` is the number used.
    restart_selection : {"likelihood", "loo"}, default="likelihood"
        Which start is continued after the restarts' short runs:
        ``"likelihood"`` the highest marginal likelihood, ``"loo"`` the
        highest leave-one-out log predictive density of the training rows
        (each client adds the sum over its own rows, in closed form, to its
        gradient message: one number a start; Rasmussen & Williams 2006,
        Section 5.4.2). The likelihood's optima of nearly equal height
        predict differently: on the selection splits of the real regression
        sets ``"loo"`` gave seen-site RMSE 4.3% lower on ChickWeight, 2.5% on
        Produc and 0.1% higher on sleepstudy, but on data drawn from the
        model itself (the windowed hierarchy of
        ``doc/results/pfedhgp_start.md``) 5.3% above the Bayes oracle's
        RMSE against 4.4%, above that bar of 5%; so not the default.
    noise : {"shared", "per_client"}, default="shared"
        The observation noise. ``"shared"``: one noise variance for every
        client (the paper's model). ``"per_client"`` (collapsed inference
        only): client ``i``'s noise variance is ``noise_variance_ *
        exp(e_i)``, with ``e_i ~ N(0, v)``: the offsets are estimated with the
        other hyperparameters and their spread ``v`` is learned from their
        marginal likelihood (a Laplace approximation taking each offset's
        information as ``n_i / 2``), so that offsets of clients with few rows
        shrink towards 0 unless the clients' precisions really differ
        (``noise_spread_``); for clients whose measurements differ in
        precision (sensors, sites, states).
        Seen clients' predictive variances use their own noise variance
        (``client_noise_variances_``), a new client's the population's
        (``noise_variance_``). A client with fewer than 3 rows, which sends
        no statistics, gets the population's. Each client's offset is one
        more entry of the hyperparameter vector, its derivative one more
        entry of the gradient the client sends (no other message); the
        server learns each client's noise variance, one number per client.
        Not the default: on the real regression sets it narrows the
        intervals of the sites with few rows below 95% coverage
        (sleepstudy, ChickWeight; ``doc/results/pfedhgp_start.md``).
    random_state : int, RandomState instance or None, default=None
        Seeds the Halton placement of ``Z_g`` (more than one feature).
    n_jobs : int or None, default=None
        Client steps run on this many threads.
    verbose : int, default=0
        Print one line per round.

    Attributes
    ----------
    clients_ : ndarray of shape (n_clients,)
        Sorted client labels seen in ``fit``.
    n_outputs_ : int
        Number of outputs ``Q`` (1 for 1-D or single-column ``y``).
    phi_ : float
        Learned deviation scale (0 without the deviation component).
    noise_variance_ : float or ndarray of shape (Q,)
        Learned noise variance, in units of ``y`` (per output for
        multi-output ``y``: ``sigma^2`` times the squared output scale);
        with ``noise="per_client"`` the population's (a new client's).
    client_noise_variances_ : ndarray of shape (n_clients,) or None
        Collapsed inference: each client's noise variance, in units of
        ``y`` (all ``noise_variance_`` with ``noise="shared"``). None for
        the variational fit.
    noise_spread_ : float or None
        With ``noise="per_client"``: the learned standard deviation ``sqrt(v)``
        of the clients' log noise variances about the population's. None
        otherwise.
    lengthscale_global_ : ndarray of shape (1,) or (n_features,)
        Global kernel lengthscale(s) on the standardized inputs (see
        ``x_std_``; ``None`` without a global basis);
        multi-output: shape ``(R_g, 1 or n_features)``, one row per latent.
    variance_global_ : float
        Global kernel output variance, in units of ``y`` squared
        (multi-output: the fixed latent variance; ``None`` without a global
        basis).
    loadings_global_ : ndarray of shape (Q, R_g)
        Multi-output only: ``B_g`` in units of ``y`` (``None`` otherwise).
    loadings_deviation_, loadings_local_ : ndarray of shape (n_clients, Q, R)
        Multi-output only: each client's ``B_delta_i`` and ``B_l_i`` in units
        of ``y`` (``None`` without the component or for 1-D ``y``). ``None``
        when fitted on a distributed engine: the personalized parts stay on
        the sites.
    inducing_global_ : ndarray of shape (M, n_features)
        The global inducing inputs ``Z_g``, in units of ``X``: learned by the
        variational fit (``learn_inducing``), placed by the set-up and kept
        by the collapsed one; ``None`` without a global basis.
    random_effects_cov_ : ndarray of shape (q, q) or None
        The learned ``Sigma`` of the random effects (``random_effects``), in
        units of ``y`` squared per standardized input (``None`` without them).
    slope_prior_variance_ : float or None
        The learned ``tau^2`` of ``slope_prior="learned"``, in units of ``y``
        squared per standardized input (``inf`` with ``"flat"``; ``None``
        without slopes or under the variational inference).
    mean_coef_ : ndarray of shape (n_features,) or (n_features, Q)
        Slopes of the prior mean per unit of ``X`` (zeros with
        ``mean_function="constant"``): under the collapsed inference the
        fixed effects' slopes (their posterior mean: generalized least
        squares, shrunk by ``slope_prior="learned"``), under the
        variational one the ridge fit of ``mean_function``.
    mean_intercept_ : float or ndarray of shape (Q,)
        The prior mean at ``X = 0``: the prior mean (the fixed effects) is
        ``mean_intercept_ + X @ mean_coef_``, which a new client's
        prediction adds the global GP's posterior mean to.
    y_mean_, y_std_ : float or ndarray of shape (Q,)
        The target standardization (``normalize_y``). The collapsed fit's
        components are fitted to ``(y - y_mean_) / y_std_`` (its fixed
        effects are estimated with them); the variational fit's to the
        residuals of its prior mean, ``(y - y_mean_ - (X - x_mean_) @
        mean_coef_) / y_std_``.
    x_mean_, x_std_ : ndarray of shape (n_features,)
        The input standardization (zeros and ones with ``normalize_X=False``):
        the lengthscales apply to ``(X - x_mean_) / x_std_``.
    lengthscales_local_ : ndarray of shape (n_clients, 1 or n_features)
        Each client's local lengthscale(s) (``None`` without local component;
        multi-output: shape ``(n_clients, R_l, 1 or n_features)``).
    variances_local_ : ndarray of shape (n_clients,)
        Each client's local output variance, in units of ``y`` squared
        (multi-output: the fixed latent variance).
    inducing_local_ : list of ndarray
        Each client's ``Z_i``, in units of ``X`` (``None`` for the collapsed
        fit, which has none). These three are ``None`` when fitted on a
        distributed engine: the personalized parts stay on the sites, and
        ``predict`` for a seen client raises a ``ValueError`` (the
        population prediction works).
    n_iter_ : int
        Training rounds run (at most ``n_rounds``; fewer if ``tol`` stopped the fit).
    elbo_ : ndarray of shape (n_iter_,)
        ELBO (on the normalized scale) reached in each training round: the
        sum of the clients' terms after their local step, minus ``KL_g``
        (``"paper"``), or after the server's closed-form update (``"cavi"``).
    jitter_ : float
        Variational inference: the largest diagonal jitter any Cholesky
        factorization needed. Collapsed: ``jitter`` (see there).
    inference_ : {"collapsed", "variational"}
        The inference the fit used (``inference``, resolved for ``"auto"``).
    log_marginal_likelihood_value_ : float
        Collapsed inference: the restricted log marginal likelihood of
        the kept fit, on the normalized scale (``None`` otherwise; ``elbo_``
        is then ``None``, ``n_iter_`` counts likelihood evaluations, and the
        shared local kernel is repeated in ``lengthscales_local_`` and
        ``variances_local_`` for every client).
    n_restarts_ : int or None
        Collapsed inference: the restarts the fit ran (``n_restarts``,
        resolved for ``"auto"``); ``None`` for the variational fit.
    communication_ : Ledger
        Every message exchanged during ``fit``.
    n_features_in_ : int
        Number of features seen in ``fit``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in ``fit``, when ``X`` has string column names.

    References
    ----------
    .. [1] H. Yan et al., "Personalized Federated Hierarchical Gaussian
       Processes for Privacy-Preserving Modeling of Heterogeneous Distributed
       Systems", arXiv:2609.19337. Equation, section and assumption numbers in
       this documentation ("paper eq.", "paper sec.") are this paper's.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed import PFedHGPRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 10, (60, 1))
    >>> groups = np.repeat([0, 1, 2], 20)
    >>> y = np.sin(X[:, 0]) + 0.3 * groups + 0.05 * rng.normal(size=60)
    >>> model = PFedHGPRegressor(n_inducing_global=10, random_state=0)
    >>> model = model.fit(X, y, groups=groups)
    >>> model.inference_  # 1-D y: the collapsed fit (n_rounds, optimizer do not apply)
    'collapsed'
    >>> mean, std = model.predict(X[:2], groups=groups[:2], return_std=True)
    >>> mean.shape, bool(np.all(std > 0))
    ((2,), True)

    Two outputs that mix shared latent functions (ILMM; the variational fit,
    in ``n_rounds`` federated rounds):

    >>> Y = np.column_stack([y, np.cos(X[:, 0]) - y])
    >>> model = PFedHGPRegressor(n_latents=1, n_inducing_global=10, n_inducing_local=5,
    ...                          optimizer="cavi", n_rounds=5, random_state=0)
    >>> model = model.fit(X, Y, groups=groups)
    >>> mean, cov = model.predict(X[:2], groups=groups[:2], return_cov=True)
    >>> mean.shape, cov.shape, model.loadings_global_.shape
    ((2, 2), (2, 2, 2), (2, 1))
    """

    def __init__(
        self,
        components=COMPONENTS,
        *,
        kernel="rbf",
        ard=True,
        n_latents=2,
        n_inducing_global=25,
        n_inducing_local=25,
        init_inducing_global=None,
        init_lengthscale_global=2.0,
        init_lengthscale_local=0.35,
        init_variance_global=1.0,
        init_variance_local=None,
        init_phi=1.0,
        init_noise=0.05**2,
        optimizer="cavi",
        mean_update="joint",
        n_rounds=60,
        tol=None,
        local_steps=None,
        local_lr=0.1,
        server_lr=None,
        learn_inducing=True,
        normalize_y=True,
        normalize_X=True,
        mean_function="linear",
        site_trend="none",
        random_effects="auto",
        slope_prior="auto",
        input_bounds=None,
        jitter=1e-6,
        client_fraction=1.0,
        on_client_error="raise",
        unknown_client="global",
        population_local="median",
        inference="auto",
        n_restarts="auto",
        restart_selection="likelihood",
        noise="shared",
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        self.components = components
        self.kernel = kernel
        self.ard = ard
        self.n_latents = n_latents
        self.n_inducing_global = n_inducing_global
        self.n_inducing_local = n_inducing_local
        self.init_inducing_global = init_inducing_global
        self.init_lengthscale_global = init_lengthscale_global
        self.init_lengthscale_local = init_lengthscale_local
        self.init_variance_global = init_variance_global
        self.init_variance_local = init_variance_local
        self.init_phi = init_phi
        self.init_noise = init_noise
        self.optimizer = optimizer
        self.mean_update = mean_update
        self.n_rounds = n_rounds
        self.tol = tol
        self.local_steps = local_steps
        self.local_lr = local_lr
        self.server_lr = server_lr
        self.learn_inducing = learn_inducing
        self.normalize_y = normalize_y
        self.normalize_X = normalize_X
        self.mean_function = mean_function
        self.site_trend = site_trend
        self.random_effects = random_effects
        self.slope_prior = slope_prior
        self.input_bounds = input_bounds
        self.jitter = jitter
        self.client_fraction = client_fraction
        self.on_client_error = on_client_error
        self.unknown_client = unknown_client
        self.population_local = population_local
        self.inference = inference
        self.n_restarts = n_restarts
        self.restart_selection = restart_selection
        self.noise = noise
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    _parameter_constraints = {
        **FEDERATION_CONSTRAINTS,
        "components": "no_validation",  # _check_params
        "kernel": [StrOptions(set(KERNEL_KINDS))],
        "ard": ["boolean"],
        "n_latents": "no_validation",  # _check_params
        "n_inducing_global": [positive_int()],
        "n_inducing_local": [positive_int()],
        "init_inducing_global": ["array-like", None],  # its width is checked at set-up
        **{name: [positive_real()] for name in (
            "init_lengthscale_global", "init_lengthscale_local", "init_variance_global",
            "init_phi", "init_noise", "local_lr", "jitter")},
        "init_variance_local": [positive_real(), None],
        "optimizer": [StrOptions(set(OPTIMIZERS))],
        "mean_update": [StrOptions(set(MEAN_UPDATES))],
        "tol": [nonnegative_real(), None],
        "local_steps": [positive_int(0), None],
        "server_lr": [positive_real(), None],
        "learn_inducing": ["boolean"],
        "normalize_y": ["boolean"],
        "normalize_X": ["boolean"],
        "mean_function": [StrOptions(set(MEAN_FUNCTIONS))],
        "site_trend": [StrOptions(set(SITE_TRENDS))],
        "random_effects": [StrOptions(set(RANDOM_EFFECTS) | {"auto"})],
        "slope_prior": [StrOptions(set(SLOPE_PRIORS))],
        "input_bounds": "no_validation",  # checked at set-up, against n_features
        "population_local": [StrOptions(set(POPULATION_LOCAL))],
        "inference": [StrOptions(set(INFERENCES))],
        "n_restarts": [positive_int(0), StrOptions({"auto"})],
        "restart_selection": [StrOptions({"likelihood", "loo"})],
        "noise": [StrOptions({"shared", "per_client"})],
    }

    _inducing_local_name = "n_inducing_local"  # the parameter named in the small-client warning

    @classmethod
    def _test_instances(cls):
        """Small, fast instances for the common checks."""
        small = dict(n_inducing_global=20, n_inducing_local=3, ard=True, normalize_y=True,
                     init_lengthscale_global=3.0, random_state=0)
        return [cls(),  # the defaults fit scikit-learn's small check data as they are
                cls(optimizer="cavi", local_steps=3, n_rounds=10, **small),
                cls(optimizer="paper", local_steps=5, n_rounds=4, **small),
                cls(inference="collapsed", n_inducing_global=10, random_effects="intercept",
                    random_state=0)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        # the paper's protocol takes one server Adam step per round: short fits underfit
        tags.regressor_tags.poor_score = self.optimizer == "paper"
        tags.target_tags.multi_output = self.inference != "collapsed"
        return tags

    # ------------------------------------------------------------------ fit
    def _check_params(self):
        """The checks ``_parameter_constraints`` cannot state (see FederatedEstimator)."""
        self._components = _check_components(self.components)
        if "deviation" in self._components and "global" not in self._components:
            raise ValueError(
                "components: 'deviation' needs 'global' (the deviation kernel is phi * k_g), "
                f"got {self.components!r}."
            )
        self._latents = _check_n_latents(self.n_latents)
        if self.inference == "collapsed":
            for name, value, needed in (("kernel", self.kernel, "rbf"),
                                        ("site_trend", self.site_trend, "none"),
                                        ("client_fraction", self.client_fraction, 1.0)):
                if value != needed:
                    raise ValueError(f"inference='collapsed' needs {name}={needed!r}, got "
                                     f"{name}={value!r}.")
            return
        if self.inference == "variational":
            self._check_variational_params()

    def _check_variational_params(self):
        """The checks of ``inference="variational"`` (for ``"auto"``, once resolved)."""
        if self.noise != "shared":
            raise ValueError(
                f"noise={self.noise!r} applies to the collapsed fit (the variational one "
                "shares one noise variance); use noise='shared' or inference='collapsed'.")
        if self.slope_prior != "auto":
            raise ValueError(
                f"slope_prior={self.slope_prior!r} applies to the collapsed fit (the variational "
                "one fits the linear mean by ridge regression); use slope_prior='auto' or "
                "inference='collapsed'.")
        effects = self._effects_for("variational")
        if effects != "none" and self.optimizer != "cavi":
            raise ValueError(
                f"random_effects={effects!r} needs optimizer='cavi' (its covariance is "
                f"learned by the closed-form server), got optimizer={self.optimizer!r}.")
        if effects != "none" and self.site_trend != "none":
            raise ValueError(
                f"random_effects={effects!r} and site_trend={self.site_trend!r} both model "
                "a per-site linear trend: use one of them.")
        if self.init_inducing_global is not None:
            Zg = np.asarray(self.init_inducing_global, dtype=float)
            if Zg.ndim != 2 or Zg.shape[0] < 1 or not np.all(np.isfinite(Zg)):
                raise ValueError(
                    "init_inducing_global must be a finite array of shape (M, n_features), "
                    f"got shape {Zg.shape}."
                )

    def _init_inducing_global(self, n_features):
        """``init_inducing_global`` as an array for ``n_features`` inputs (or None)."""
        if self.init_inducing_global is None:
            return None
        Zg = np.asarray(self.init_inducing_global, dtype=float)
        if Zg.shape[1] != n_features:
            raise ValueError(
                f"init_inducing_global must be a finite array of shape (M, {n_features}), "
                f"got shape {Zg.shape}."
            )
        return Zg

    def _steps_algorithm(self, n_features, n_outputs=None):
        """The client and server steps for ``n_features`` inputs and ``n_outputs``."""
        comps = self._components
        local_steps = DEFAULT_LOCAL_STEPS[self.optimizer] if self.local_steps is None \
            else int(self.local_steps)
        Zg = self._init_inducing_global(n_features)
        fields = dict(
            kind=KERNEL_KINDS[self.kernel], ard=bool(self.ard), n_features=n_features,
            use_global="global" in comps, use_deviation="deviation" in comps,
            use_local="local" in comps, jitter=float(self.jitter),
            learn_inducing=bool(self.learn_inducing),
        )
        if n_outputs is None:
            cfg = ModelConfig(**fields)
        else:
            r_g, r_l = self._latents
            cfg = IlmmConfig(**fields, n_outputs=n_outputs, rank_global=r_g, rank_local=r_l,
                             variance_global=float(self.init_variance_global),
                             variance_local=self._init_variance_local(multi_output=True))
        return self._make_steps(cfg, Zg, int(self.n_inducing_local), local_steps)

    def _make_steps(self, cfg, Zg, Mi, local_steps, share_local_hypers=False):
        steps_class = _IlmmSteps if isinstance(cfg, IlmmConfig) else _PFedHGPSteps
        return steps_class(
            cfg, optimizer=self.optimizer, n_inducing_global=self.n_inducing_global,
            n_inducing_local=Mi,
            init=InitialValues(
                lengthscale_global=self.init_lengthscale_global,
                lengthscale_local=self.init_lengthscale_local,
                variance_global=self.init_variance_global,
                variance_local=self._init_variance_local(isinstance(cfg, IlmmConfig)),
                phi=self.init_phi,
                noise=self.init_noise, inducing_global=Zg),
            local_steps=local_steps, local_lr=self.local_lr,
            server_lr=(DEFAULT_SERVER_LR[self.optimizer] if self.server_lr is None
                       else float(self.server_lr)),
            normalize_y=bool(self.normalize_y),
            normalize_X=bool(self.normalize_X), share_local_hypers=share_local_hypers,
            n_rounds=int(self.n_rounds),
            release_population=self.population_local == "median",
            joint_mean=self.mean_update == "joint",
            input_bounds=_check_input_bounds(self.input_bounds, cfg.n_features),
            tol=None if self.tol is None else float(self.tol),
            mean_function=self.mean_function,
            site_trend=getattr(self, "site_trend", "none") == "linear",
            random_effects=(None if self._effects_for("variational") == "none"
                            else self.random_effects),
        )

    def _inference_for(self, n_outputs):
        """The inference of a fit with ``n_outputs`` (None for 1-D ``y``): ``inference``,
        or for ``"auto"`` the collapsed one where it models what was asked (one output,
        ``kernel="rbf"``, ``site_trend="none"``, ``optimizer="cavi"``, every client in
        every round), else the variational one (also where no site has the 3 rows the
        collapsed fit needs: :meth:`_federated_algorithm`)."""
        if self.inference != "auto":
            return self.inference
        collapsible = (n_outputs is None and self.kernel == "rbf" and self.site_trend == "none"
                       and self.optimizer == "cavi" and self.client_fraction == 1.0)
        return "collapsed" if collapsible else "variational"

    def _effects_for(self, inference):
        """``random_effects``, with ``"auto"`` a random intercept under the collapsed
        inference and none under the variational one."""
        if self.random_effects != "auto":
            return self.random_effects
        return "intercept" if inference == "collapsed" else "none"

    @property
    def _collapsed(self):
        """Whether the fitted model is the collapsed one (``inference_``)."""
        return getattr(self, "inference_", None) == "collapsed"

    def _collapsed_algorithm(self, n_features, counts):
        """The collapsed model's rounds (``inference="collapsed"``); ``counts``: the
        clients' row counts from the set-up."""
        comps = self._components
        per_client = self.noise == "per_client"
        # a client too small to send statistics holds no information on its offset
        rows = np.where(counts >= MIN_ROWS_MOMENTS, counts, 0)
        layout = Layout(n_features, random_effects=self._effects_for("collapsed"),
                        fixed_effects="linear" if self.mean_function == "linear" else "intercept",
                        slope_prior=self.slope_prior != "flat",
                        deviation="deviation" in comps, local="local" in comps,
                        global_gp="global" in comps,
                        n_sites=len(counts) if per_client else 0,
                        site_rows=rows if per_client else None, ard=self.ard)

        def start(init):
            var_l = init["init_variance_local"]
            return layout.pack({
                "ls_g": init["init_lengthscale_global"], "var_g": init["init_variance_global"],
                "phi": init["init_phi"], "ls_l": init["init_lengthscale_local"],
                "var_l": SCALAR_INIT_VARIANCE_LOCAL if var_l is None else var_l,
                "s2": init["init_noise"], "L": np.sqrt(INITIAL_VARIANCE) * np.eye(layout.q)})

        # the restarts are scattered about the defaults' start, not the given one: the
        # starts tried besides it do not depend on the init_* values
        defaults = {name: p.default for name, p in
                    inspect.signature(PFedHGPRegressor.__init__).parameters.items()}
        Zg = self._init_inducing_global(n_features)
        return PFedHGPCollapsed(
            layout, start(self.get_params()), n_inducing=self.n_inducing_global,
            n_restarts=self.n_restarts, restart_center=start(defaults),
            selection=self.restart_selection,
            normalize_X=self.normalize_X,
            normalize_y=self.normalize_y,
            input_bounds=_check_input_bounds(self.input_bounds, n_features),
            init_inducing_global=Zg)

    def _init_variance_local(self, multi_output=False):
        """``init_variance_local``, or its default for the model (see the docstring)."""
        if self.init_variance_local is not None:
            return float(self.init_variance_local)
        return 1.0 if multi_output else SCALAR_INIT_VARIANCE_LOCAL

    def _uses_local(self):
        return "local" in self._components

    def _check_client_sizes(self, X, groups, collapsed=False):
        """Warn (once) about the clients with fewer than ``Mi`` distinct rows.

        Their local inducing inputs start at distinct rows of their own ``X``,
        so they get as many as they have distinct rows.
        """
        if not self._uses_local() or collapsed:  # the collapsed fit has no local inducing
            return
        name = self._inducing_local_name
        Mi = int(getattr(self, name))
        labels, index = check_groups(groups, X.shape[0])
        small = {}
        for k, label in enumerate(labels.tolist()):
            n_distinct = np.unique(X[index == k], axis=0).shape[0]
            if n_distinct < Mi:
                small[label] = n_distinct
        if not small:
            return
        if groups is None:
            msg = (f"{name}={Mi} is more than the {small[labels[0]]} distinct "
                   "rows of X: the client gets one local inducing input per distinct row.")
        else:
            listed = ", ".join(f"{label!r}: {n}" for label, n in list(small.items())[:20])
            more = f" and {len(small) - 20} more" if len(small) > 20 else ""
            msg = (f"{name}={Mi} is more than the distinct rows of {len(small)} "
                   "client(s), which get one local inducing input per distinct row "
                   f"(client: distinct rows): {{{listed}{more}}}.")
        warnings.warn(msg, UserWarning, stacklevel=user_stacklevel())

    # fit is FederatedEstimator's: parameters, rows, set-up exchange, rounds, attributes.
    # A client's numerical failure (a Cholesky factorization failing even after the
    # jitter escalation, a non-finite statistic) is a FloatingPointError naming the
    # client, the round and what to change; a sum of squares of y or of an X column
    # that overflows float64 is a ValueError raised on the client before the set-up.

    def _run_federation(self, X, y, groups):
        # the steps are many small (M x M) BLAS calls: threaded BLAS only adds overhead; the
        # process-wide limit concurrent fits share (skfed.federated._engine._BlasLimit)
        with blas_threads(1):
            return super()._run_federation(X, y, groups)

    def _validate_fit_data(self, X, y, reset=True):
        """``(X, y, Q)``; 1-D and single-column ``y`` give the scalar model (``Q = None``)."""
        try:  # name y in the error (scikit-learn's message does not)
            shape = np.shape(y)
        except TypeError:  # array-likes that refuse numpy functions; validate_data decides
            shape = (0,)
        if y is not None and len(shape) not in (1, 2):
            raise ValueError(
                f"y must be 1-D (n_samples,) or 2-D (n_samples, n_outputs), got shape {shape}."
            )
        if y is not None and len(shape) == 2 and shape[1] == 0:
            raise ValueError(f"y must have at least one output column, got shape {shape}.")
        X, y = validate_data(self, X, y, reset=reset, y_numeric=True, multi_output=True,
                             dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if y.ndim == 2 and y.shape[1] == 1:
            # the collapsed model is single-output: a column y is converted, as scikit-learn does
            y = column_or_1d(y, warn=True) if self.inference == "collapsed" else y[:, 0]
        return X, y, _n_outputs(y)

    # -- the hooks of skfed.federated.FederatedContract (also run by Flower) --

    def _validate_site_data(self, X, y, reset=False, groups=None):
        """The checks a site runs on its own rows; a single-column ``y`` is returned 1-D.

        A warning names the clients with fewer distinct rows than the local
        inducing inputs (they get one per distinct row).
        """
        X, y, n_outputs = self._validate_fit_data(X, y, reset=reset)
        self._check_client_sizes(X, groups, self._inference_for(n_outputs) == "collapsed")
        site_trend = getattr(self, "site_trend", "none")
        if site_trend != "none" and n_outputs is not None:
            raise ValueError(
                f"site_trend={site_trend!r} is implemented for 1-D y only, got y with "
                f"{n_outputs} output columns; use site_trend='none'.")
        if self.inference == "collapsed" and n_outputs is not None:
            raise ValueError(
                f"inference='collapsed' is implemented for 1-D y only, got y with {n_outputs} "
                "output columns; use inference='variational'.")
        effects = self.random_effects
        if effects not in ("none", "auto") and n_outputs is not None:
            raise ValueError(
                f"random_effects={effects!r} is implemented for 1-D y only, got y with "
                f"{n_outputs} output columns; use random_effects='none'.")
        return X, y

    def _site_summary(self, X, y):
        """A site's number of outputs (1 for 1-D ``y``): it selects the model."""
        return {"n_outputs": np.int64(y.shape[1] if y.ndim == 2 else 1)}

    def _combine_site_summaries(self, labels, summaries):
        counts = {label: int(s["n_outputs"]) for label, s in zip(labels, summaries)}
        if len(set(counts.values())) > 1:
            raise ValueError(f"y: the sites disagree on the number of outputs: {counts}.")
        return {"n_outputs": np.int64(next(iter(counts.values())))}

    def _federated_algorithm(self, setup):
        """The client and server steps, built from the set-up summary only."""
        n_outputs = int(setup["n_outputs"])
        counts = np.asarray(setup["n_samples"])
        inference = self._inference_for(n_outputs if n_outputs > 1 else None)
        if inference == "collapsed" and self.inference == "auto" \
                and counts.max() < MIN_ROWS_MOMENTS:
            inference = "variational"  # no site could send its statistics
        if inference == "collapsed":
            if counts.max() < MIN_ROWS_MOMENTS:
                raise ValueError(
                    f"inference='collapsed' needs a site with at least {MIN_ROWS_MOMENTS} rows "
                    f"(smaller sites send no statistics); the largest has n_samples = "
                    f"{counts.max()}.")
            return self._collapsed_algorithm(int(setup["n_features"]), counts)
        if self.inference == "auto":
            self._check_variational_params()
        return self._steps_algorithm(int(setup["n_features"]), n_outputs if n_outputs > 1 else None)

    def _engine_params(self):
        # one more round than n_rounds: round 0 gathers the normalization and input ranges
        # (the collapsed fit stops when its optimizer does: the bound is never reached)
        n_rounds = int(self.n_rounds) + 1
        if self.inference != "variational":  # "auto": either; the variational one stops itself
            collapsed = PFedHGPCollapsed(Layout(1), np.zeros(Layout(1).size),
                                         n_restarts=self.n_restarts).max_rounds()
            n_rounds = collapsed if self.inference == "collapsed" else max(n_rounds, collapsed)
        return {**super()._engine_params(), "n_rounds": n_rounds}

    def _set_fitted(self, fit):
        """Fitted attributes from the server state (and, in-process, the client states).

        ``result.client_states`` is ``None`` on a distributed run: the
        personalized parts stay on the sites and their attributes are ``None``.
        """
        result, setup, labels = fit.result, fit.setup, fit.labels
        if isinstance(fit.algorithm, PFedHGPCollapsed):
            self.inference_ = "collapsed"
            return self._set_collapsed(fit)
        self.inference_ = "variational"
        cfg = fit.algorithm.cfg
        server = result.server_state
        g = server["g"]
        self._cfg = cfg
        self._global = {k: np.array(v) for k, v in g.items()}
        self._locals = None if result.client_states is None else \
            [dict(s["loc"]) for s in result.client_states]
        self._released = server["released"]
        self._effects_cov = server.get("re_cov")
        self.clients_ = labels
        self.n_features_in_ = int(setup["n_features"])
        self.communication_ = result.ledger
        self.elbo_ = np.asarray(server["elbo"], dtype=float)
        self.log_marginal_likelihood_value_ = None
        self.n_iter_ = int(self.elbo_.shape[0])
        self.n_restarts_ = None
        self.jitter_ = max(float(server["jitter"]), float(self.jitter))
        self.phi_ = float(softplus(g["phi"])) if cfg.use_deviation else 0.0
        self.x_mean_ = np.asarray(server["x_shift"], dtype=float)
        self.x_std_ = np.asarray(server["x_scale"], dtype=float)
        self.inducing_global_ = self._unscale_X(g["Zg"]) if cfg.global_basis else None
        if isinstance(cfg, IlmmConfig):
            self._set_ilmm_attributes(cfg, server)
        else:
            self._set_scalar_attributes(cfg, server)
        coef = server.get("y_coef")
        shape = (self.n_features_in_,) + np.shape(self.y_mean_)
        # per unit of X: the model's coefficients are on (X - x_mean_) / x_std_
        self.mean_coef_ = np.zeros(shape) if coef is None else (
            np.asarray(coef, dtype=float) / self.x_std_.reshape((-1,) + (1,) * (len(shape) - 1)))
        self.mean_intercept_ = self.y_mean_ - self.x_mean_ @ self.mean_coef_
        effects = self._effects_cov
        self.slope_prior_variance_ = None
        self.random_effects_cov_ = None if effects is None else (
            np.asarray(effects, dtype=float) * np.asarray(self.y_std_, dtype=float) ** 2)
        self._set_client_attributes()

    def _set_collapsed(self, fit):
        """Fitted attributes of ``inference="collapsed"`` (the REML estimates)."""
        result, server = fit.result, fit.result.server_state
        layout = fit.algorithm.layout
        p = layout.unpack(server["theta"])
        y_std = float(server["y_scale"])
        self._cfg = self._global = self._released = None
        # each client's noise variance (standardized), aligned with clients_
        s2_clients = layout.noise_variances(p) if layout.n_sites \
            else np.full(len(fit.labels), p["s2"])
        self._fit_collapsed = {"p": p, "layout": layout, "Z": np.asarray(server["Z"]),
                               "w": np.asarray(server["w"]), "lam_inv": server["lam_inv"],
                               "s2_clients": s2_clients}
        self._locals = None if result.client_states is None else list(result.client_states)
        self.clients_ = fit.labels
        self.n_features_in_ = int(fit.setup["n_features"])
        self.communication_ = result.ledger
        self.n_outputs_ = 1
        self.x_mean_ = np.asarray(server["x_shift"], dtype=float)
        self.x_std_ = np.asarray(server["x_scale"], dtype=float)
        self.y_mean_, self.y_std_ = float(server["y_shift"]), y_std
        self.elbo_ = None
        self.log_marginal_likelihood_value_ = -float(server["nll"])
        self.n_iter_ = int(server["n_eval"])
        self.n_restarts_ = len(server["starts"]) - 1
        self.jitter_ = float(self.jitter)
        self.phi_ = p["phi"]
        self.noise_variance_ = p["s2"] * y_std**2
        self.client_noise_variances_ = s2_clients * y_std**2
        self.noise_spread_ = float(np.sqrt(p["spread2"])) if layout.n_sites else None
        uses_kg = layout.global_gp or layout.deviation
        self.lengthscale_global_ = p["ls_g"] if uses_kg else None
        self.variance_global_ = p["var_g"] * y_std**2 if uses_kg else None
        Z = self._fit_collapsed["Z"]
        self.inducing_global_ = self._unscale_X(Z) if Z.shape[0] else None
        self.loadings_global_ = self.loadings_deviation_ = self.loadings_local_ = None
        beta = self._fit_collapsed["w"][:layout.f]
        self.mean_coef_ = (beta[1:] * y_std / self.x_std_ if layout.f > 1
                           else np.zeros(self.n_features_in_))
        # the fixed intercept beta[0] is at X = x_mean_, on the standardized scale
        self.mean_intercept_ = (self.y_mean_ + beta[0] * y_std
                                - float(self.x_mean_ @ self.mean_coef_))
        self._effects_cov = p["L"] @ p["L"].T if layout.q else None
        # the slopes' prior variance, in units of y per standardized input
        self.slope_prior_variance_ = (p["tau2"] * y_std**2 if layout.slope_prior
                                      else None if layout.f == 1 else np.inf)
        self.random_effects_cov_ = None if self._effects_cov is None \
            else self._effects_cov * y_std**2
        self._set_client_attributes()

    def _set_client_attributes(self):
        """The clients' personalized attributes from ``_locals``.

        ``None`` without the component or on a distributed run (the parts
        stay on the sites).
        """
        cfg, locs = self._cfg, self._locals
        if self._collapsed:  # one local kernel, shared by the sites; no local inducing inputs
            fit, n = self._fit_collapsed, len(self.clients_)
            used = fit["layout"].local
            self.lengthscales_local_ = np.tile(fit["p"]["ls_l"], (n, 1)) if used else None
            self.variances_local_ = np.full(n, fit["p"]["var_l"] * self.y_std_**2) \
                if used else None
            self.inducing_local_ = None
            return
        multi = isinstance(cfg, IlmmConfig)
        scale = np.asarray(self.y_std_, dtype=float)

        def stack(fn, used):
            return np.array([fn(loc) for loc in locs]) if used and locs is not None else None

        if multi:
            self.loadings_deviation_ = stack(lambda loc: loc["Bd"] * scale[:, None],
                                             cfg.use_deviation)
            self.loadings_local_ = stack(lambda loc: loc["Bl"] * scale[:, None], cfg.use_local)
        self.lengthscales_local_ = stack(lambda loc: softplus(loc["ls_l"]), cfg.use_local)
        self.variances_local_ = stack(
            (lambda loc: cfg.variance_local) if multi
            else (lambda loc: float(softplus(loc["var_l"])) * scale**2),
            cfg.use_local,
        )
        self.inducing_local_ = [self._unscale_X(loc["Zl"]) for loc in locs] \
            if cfg.use_local and locs is not None else None

    def _with_site_state(self, label, state):
        """This fitted model with one site's personalized parts (see ``skfed.federated.flower``)."""
        site = copy.deepcopy(self)
        if self._collapsed:  # the site's own noise variance
            k = [i for i, c in enumerate(self.clients_) if c == label]
            site._fit_collapsed["s2_clients"] = site._fit_collapsed["s2_clients"][k]
            site.client_noise_variances_ = site.client_noise_variances_[k]
        site.clients_ = np.array([label])
        site._locals = [state if self._collapsed else dict(state["loc"])]
        site._set_client_attributes()
        return site

    def _set_scalar_attributes(self, cfg, server):
        """Scalar-model attributes of the shared parts."""
        g = server["g"]
        scale2 = server["y_scale"] ** 2
        self.n_outputs_ = 1
        self.loadings_global_ = self.loadings_deviation_ = self.loadings_local_ = None
        self.y_mean_ = float(server["y_shift"])
        self.y_std_ = float(server["y_scale"])
        self.noise_variance_ = float(softplus(g["noise"])) * scale2
        self.client_noise_variances_ = None
        self.noise_spread_ = None
        if cfg.global_basis:
            self.lengthscale_global_ = softplus(g["ls_g"])
            self.variance_global_ = float(softplus(g["var_g"])) * scale2
        else:
            self.lengthscale_global_ = self.variance_global_ = None

    def _set_ilmm_attributes(self, cfg, server):
        """ILMM attributes of the shared parts."""
        g = server["g"]
        scale = np.asarray(server["y_scale"], dtype=float)
        self.n_outputs_ = cfg.n_outputs
        self.y_mean_ = np.asarray(server["y_shift"], dtype=float)
        self.y_std_ = scale
        self.noise_variance_ = float(softplus(g["noise"])) * scale**2
        self.client_noise_variances_ = None
        self.noise_spread_ = None
        self.loadings_global_ = g["Bg"] * scale[:, None] if cfg.use_global else None
        if cfg.global_basis:
            self.lengthscale_global_ = softplus(g["ls_g"])
            self.variance_global_ = cfg.variance_global
        else:
            self.lengthscale_global_ = self.variance_global_ = None

    def client_kernels(self, client):
        """The fitted kernels of one client's deviation and local GPs.

        What :func:`skfed.gaussian_process.client_dissimilarity` (paper sec.
        3.8.2) needs. Everything is in the model's internal units: inputs
        ``(X - x_mean_) / x_std_``, variances on the normalized ``y`` scale
        (divide by ``y_std_**2`` to get there from ``y``'s units), which leaves
        trace-normalized operators unchanged.

        Parameters
        ----------
        client : object
            A label of ``clients_`` (fitted in-process: a distributed fit keeps
            the personalized parts on the sites).

        Returns
        -------
        kernels : dict
            ``"noise"`` (``sigma^2``), ``"phi"``, ``"kind"`` (the kernel) and, per
            fitted component (``"deviation"``, ``"local"``), a list of latents
            ``(Z, lengthscale, variance, loading)``: inducing inputs, lengthscale(s),
            variance and the ``(Q,)`` column of ``B_delta_i`` or ``B_l_i``
            (multi-output fits) or ``[1.0]`` (scalar fits).
        """
        check_is_fitted(self)
        self._refuse_collapsed("client_kernels")
        index = self._client_index(np.array([client]), 1)
        if index[0] < 0:
            raise ValueError(f"client {client!r} is not one of clients_.")
        check_on_site(index, self.clients_, self._locals is None)
        cfg, g, loc = self._cfg, self._global, self._locals[int(index[0])]
        multi = self._multi
        out = {"noise": float(softplus(g["noise"])), "kind": cfg.kind,
               "phi": float(softplus(g["phi"])) if cfg.use_deviation else 0.0}
        # (name, Z, raw lengthscales, raw scalar variance, fixed ILMM latent variance, loadings)
        parts = []
        if cfg.use_deviation:
            parts.append(("deviation", g["Zg"], g["ls_g"], g.get("var_g"),
                          getattr(cfg, "variance_global", None), loc.get("Bd")))
        if cfg.use_local:
            parts.append(("local", loc["Zl"], loc["ls_l"], loc.get("var_l"),
                          getattr(cfg, "variance_local", None), loc.get("Bl")))
        for name, Z, ls, var_raw, var_fixed, B in parts:
            if multi:
                out[name] = [(Z, cfg.lengthscale(ls[r]), var_fixed, B[:, r])
                             for r in range(B.shape[1])]
            else:
                out[name] = [(Z, cfg.lengthscale(ls), float(softplus(var_raw)), np.ones(1))]
        return out

    def _scale_X(self, X):
        """Inputs in the model's units: ``(X - x_mean_) / x_std_``."""
        return (np.asarray(X, dtype=float) - self.x_mean_) / self.x_std_

    def _unscale_X(self, Z):
        """Inducing inputs back in units of ``X``."""
        return np.asarray(Z, dtype=float) * self.x_std_ + self.x_mean_

    def _prior_mean(self, X):
        """The prior mean of ``y`` at the rows of ``X``: ``y_mean_ + (X - x_mean_) @
        mean_coef_`` (``y_mean_`` with ``mean_function="constant"``)."""
        return self.y_mean_ + (np.asarray(X, dtype=float) - self.x_mean_) @ self.mean_coef_

    @property
    def _multi(self):
        return isinstance(self._cfg, IlmmConfig)

    def _refuse_collapsed(self, what):
        if self._collapsed:
            raise ValueError(
                f"{what} needs each client's own fitted kernels (inference='variational'); "
                "with inference='collapsed' the clients share the deviation and local "
                "kernels and keep their blocks exact.")

    def _collapsed_moments(self, X, index, full):
        """Predictive mean and variance or covariance of ``y`` under the collapsed fit
        (normalized scale; :func:`~._collapsed.posterior_moments` plus the noise)."""
        fit = self._fit_collapsed
        sites = {k: self._locals[k] for k in np.unique(index) if k >= 0}
        mean, cov = posterior_moments(fit["p"], fit["layout"], fit["Z"], fit["w"],
                                      fit["lam_inv"], self._scale_X(X), index, sites, full)
        # each row's noise: its client's, or the population's for a new client
        s2 = np.where(index >= 0, fit["s2_clients"][np.maximum(index, 0)], fit["p"]["s2"])
        if full:
            cov[np.diag_indices_from(cov)] += s2
        else:
            cov = cov + s2
        return mean, cov

    # ------------------------------------------------------------------ predict
    def _moments(self, Xs, index, full, latent=False):
        """Predictive mean and variance (diagonal) or covariance, normalized scale
        (:func:`~._predict.scalar_moments`)."""
        return scalar_moments(self._scale_X(Xs), index, self._cfg, self._global, self._locals,
                              self.jitter_, self.phi_, full, latent=latent,
                              released=self._released, random_effects=self.random_effects,
                              effects_cov=getattr(self, "_effects_cov", None))

    def _validate_predict(self, X, groups):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        check_scale(X, "X")  # as fit: a kernel of such rows is inf or NaN
        index = self._client_index(groups, X.shape[0])
        check_on_site(index, self.clients_, self._locals is None)
        # one client: the population is that client
        if self._locals is not None and len(self.clients_) == 1:
            index = np.zeros_like(index)
        return X, index

    def predict(self, X, groups=None, return_std=False, return_cov=False):
        """Predictive distribution of ``y`` for each row's client.

        Seen clients get their full predictive distribution (global +
        deviation + local + noise, paper eq. 30). Rows with ``groups=None`` or
        an unseen client get the population prediction: the global posterior
        plus the deviation prior ``phi * k_g``, the local prior with the
        clients' median local kernel (left out with
        ``population_local="none"``), and noise. A model fitted in-process on
        a single client predicts every row with that client. A model fitted
        on a distributed engine holds no client's personalized model:
        ``groups`` naming a seen client is a ``ValueError``.

        For multi-output fits the same holds per row with ``Q x Q``
        covariances (eqs. 38-39); a population row maps its deviation and
        local priors through the clients' average loading outer products
        ``mean_i B_i[:, r] B_i[:, r]^T`` (a new client has no loadings of its
        own; with ``population_local="none"`` both priors are left out).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Query inputs.
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` asks for the population
            prediction.
        return_std : bool, default=False
            Also return the predictive standard deviation.
        return_cov : bool, default=False
            Also return the predictive covariance: scalar ``y``, the joint
            covariance of the rows (rows of different clients are correlated
            through the global component); multi-output ``y``, the joint
            covariance of the ``Q`` outputs at each row.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, Q)
        y_std : ndarray of shape (n_samples,) or (n_samples, Q), optional
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, Q, Q), optional
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        X, index = self._validate_predict(X, groups)
        # one BLAS thread, as in the fit: the same bits whether other fits run beside it on
        # threads (they share the process's limit) or not, and these products gain nothing
        # from threads (Hsb82's rows four times, 28,740: 0.12-0.18 s on one thread or two)
        with blas_threads(1):
            return self._predict_moments(X, index, return_std, return_cov)

    def _predict_moments(self, X, index, return_std, return_cov):
        if self._multi:
            return self._predict_multi(X, index, return_std, return_cov)
        if self._collapsed:  # the fixed effects are in the model's mean
            mean, cov = self._collapsed_moments(X, index, full=return_cov)
            mean = mean * self.y_std_ + self.y_mean_
        else:
            mean, cov = self._moments(X, index, full=return_cov)
            mean = mean * self.y_std_ + self._prior_mean(X)
        if return_cov:
            return mean, cov * self.y_std_**2
        if return_std:
            return mean, np.sqrt(np.maximum(cov, 0.0)) * self.y_std_
        return mean

    def _predict_multi(self, X, index, return_std, return_cov):
        mean, cov = ilmm_moments(self._scale_X(X), index, self._cfg, self._global, self._locals,
                                 self.jitter_, released=self._released)
        mean = mean * self.y_std_ + self._prior_mean(X)
        cov = cov * np.outer(self.y_std_, self.y_std_)
        if return_cov:
            return mean, cov
        if return_std:
            return mean, np.sqrt(np.maximum(np.diagonal(cov, axis1=1, axis2=2), 0.0))
        return mean

    def sample_y(self, X, n_samples=1, random_state=0, groups=None):
        """Draw joint samples from the predictive distribution.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
            Query inputs.
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=0
            Seed of the draws (as in scikit-learn's ``GaussianProcessRegressor``).
        groups : array-like of shape (n_samples_X,), default=None
            Client label of each row (``None``: population).

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, Q, n_samples)
            Multi-output draws are joint over rows and outputs.
        """
        n_samples = check_positive_int(n_samples, "n_samples")
        rng = check_random_state(random_state)
        X, index = self._validate_predict(X, groups)
        with blas_threads(1):  # the same draws beside threaded fits too (see predict)
            return self._draw(X, index, n_samples, rng)

    def _draw(self, X, index, n_samples, rng):
        if self._multi:
            mean, cov = ilmm_moments(self._scale_X(X), index, self._cfg, self._global, self._locals,
                                     self.jitter_, joint=True, released=self._released)
            n, Q = mean.shape
            draws = gaussian_draws(rng, mean.ravel(), cov.reshape(n * Q, n * Q), n_samples,
                                    self.jitter_)
            draws = draws.reshape(n_samples, n, Q) * self.y_std_ + self._prior_mean(X)
            return np.moveaxis(draws, 0, -1)
        if self._collapsed:
            mean, cov = self._collapsed_moments(X, index, full=True)
            draws = gaussian_draws(rng, mean, cov, n_samples, self.jitter_)
            return (draws * self.y_std_ + self.y_mean_).T
        mean, cov = self._moments(X, index, full=True)
        draws = gaussian_draws(rng, mean, cov, n_samples, self.jitter_)
        return (draws * self.y_std_ + self._prior_mean(X)).T

    def client_dissimilarity(self, X, groups, *, component="both", deviation_kernel="global",
                             multioutput="outputs"):
        """The clients' dissimilarity matrix from projection operators (sec. 3.8.2).

        See :func:`skfed.gaussian_process.client_dissimilarity` for the
        operators and the options.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs of the fitted clients.
        groups : array-like of shape (n_samples,)
            Client label of each row.
        component : {"both", "deviation", "local"}, default="both"
            Which blocks represent a client (the paper: both).
        deviation_kernel : {"global", "deviation"}, default="global"
            Kernel of the deviation block: ``k_g`` (the paper) or ``phi k_g``.
        multioutput : {"outputs", "latent"}, default="outputs"
            Multi-output fits: the ``Q``-output operator of each component,
            or one scalar operator per latent process.

        Returns
        -------
        rho : ndarray of shape (n_clients, n_clients)
        """
        from ._clustering import client_dissimilarity

        check_is_fitted(self)
        self._refuse_collapsed("client_dissimilarity")
        if self._locals is None:
            raise ValueError("client_dissimilarity needs the clients' fitted kernels and "
                             "loadings, which stay on the sites when fitted on a distributed "
                             "engine.")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return client_dissimilarity(self, X, groups, component=component,
                                    deviation_kernel=deviation_kernel, multioutput=multioutput)
