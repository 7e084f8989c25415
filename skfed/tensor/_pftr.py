"""PersonalizedTensorRegressor: shared low-Tucker-rank part + sparse client deviations."""

import copy
import functools
import math
import numbers
import warnings

import numpy as np

from sklearn.base import clone
from sklearn.utils._param_validation import StrOptions

from ..federated import Federation, fit_federated, seed_entropy
from ..federated._release import MIN_ROWS_SUM, sends_sums, too_few_rows_warning
from ..privacy import check_privacy_budget, pftr_privacy_spent, pftr_release_plan
from ..privacy._pftr_bound import check_accountant
from ..utils._docstrings import fill_doc
from ..utils._param_validation import FEDERATION_CONSTRAINTS, Number, positive_int, positive_real
from ..utils._validation import check_param_grid, user_stacklevel
from ._base import TENSOR_CONSTRAINTS, _TensorRegressorBase, check_positive_float
from ._rank import make_feasible, ratio_rank
from ._scaling import N_PASSES, RANGE_SD, SCALED_LEVELS, TensorScaling
from ._stages import PersonalizedTensorPhases, lipschitz
from ._tucker import check_tucker_rank

__all__ = ["PersonalizedTensorRegressor"]

CV_PARAMS = ("step_size", "alpha")
PRIVACY_MODES = ("strict", "paper")
INIT_MODES = ("auto", "admm", "moment")
DEFAULT_GRID = {"step_size": (0.01, 0.02, 0.04, 0.1), "alpha": (0.01, 0.035, 0.1)}
#: what ``"auto"`` gives ``n_rounds``, ``init_share``, ``tau_grad`` (a multiple of ``tau_e
#: tau_x``) and ``accountant`` in a strict private fit in the scaled space (the tuned strict
#: recipe, ``benchmarks/defaults/pftr_strict_tuning.py --grid split``), and in every other fit
STRICT_RECIPE = {"n_rounds": 3, "init_share": 0.4, "tau_grad": 0.3, "accountant": "pld"}
OTHER_DEFAULTS = {"n_rounds": 20, "init_share": None, "tau_grad": None, "accountant": "paper"}
#: above this epsilon the recipe's "auto" accountant is RDP: PLD's calibration grows with
#: epsilon (about 5 s at 20, 18 s at 100, over a minute and gigabytes at 1000); RDP's noise
#: is about 5% larger at 20
PLD_MAX_EPSILON = 50.0


@functools.lru_cache(maxsize=256)
def _privacy_spent(epsilon, delta, n_releases, calibration, groups):
    # a function of the budget and the release groups only; a PLD recomputation takes
    # seconds, so every fit at the same budget shares it (callers get a copy)
    return pftr_privacy_spent(epsilon, delta, n_releases, calibration=calibration,
                              groups=groups)


def release_groups(n_rounds, moment, centring, intercept_share, init_share,
                   scaling_share=None):
    """The named release groups ``(name, count, share)`` of a private fit.

    ``"scaling"``: the noisy entry histograms of the private scaling
    (``N_PASSES`` releases, ``scaling_share`` of the budget; ``None``: none);
    ``"intercept"``: the noisy sums of X and y (2 releases) of a private
    ``fit_intercept=True``; ``"init"``: the moment start; ``"stage_one"``: the
    ``n_rounds`` gradients. Without ``init_share`` the start and the rounds
    are one group of equal releases (``"init_and_stage_one"``), as the paper
    composes its ``T_g`` releases.
    """
    scaled = 1.0 if scaling_share is None else 1.0 - scaling_share
    groups = [] if scaling_share is None else [("scaling", N_PASSES, scaling_share)]
    rest = scaled * (1.0 - intercept_share) if centring else scaled
    groups += [("intercept", 2, scaled * intercept_share)] if centring else []
    if moment and init_share is not None:
        groups += [("init", 1, rest * init_share), ("stage_one", n_rounds,
                                                     rest * (1.0 - init_share))]
    else:
        groups.append(("init_and_stage_one" if moment else "stage_one",
                       n_rounds + int(moment), rest))
    return tuple(groups)


@fill_doc
class PersonalizedTensorRegressor(_TensorRegressorBase):
    """Personalized federated tensor regression with differential privacy.

    Client ``k`` has coefficient tensor ``A_k = A_0 + B_k``: ``A_0`` of low
    Tucker rank is shared by all clients, ``B_k`` is a sparse local
    deviation, and ``Y_i = <A_k, X_i> + E_i`` (Chen, Wei and Zhu [1]_).
    Training runs on :mod:`skfed.federated` in three parts:

    1. *Initialization*: without privacy (and with ``privacy_mode="paper"``)
       each client computes a preliminary low-rank + sparse estimate by ADMM;
       the largest client sends its low-rank part, which starts ``A_0`` (with
       ``rank="auto"`` the clients first send their ratio-criterion ranks and
       the server takes the mode per tensor mode). A strict private fit
       instead starts from one extra noisy release of the Stage-I mechanism,
       each client's clipped moment ``(1/n_k) sum T(Y_i) o T(X_i)`` (minus its
       clipped gradient at 0), and chooses ``rank="auto"`` from their mean.
    2. *Stage I* (``n_rounds`` rounds, differentially private): each client
       clips its covariate and residual tensors to Frobenius norms ``tau_x``
       and ``tau_e``, forms its gradient, adds Gaussian noise with the paper's
       standard deviation ``sigma = (2 tau_e tau_x / n_k) T_g sqrt(2 log(1.25
       T_g / delta)) / epsilon``, projects onto the tangent space of the
       fixed-Tucker-rank manifold at ``A_0`` and sends it; the server takes the
       ``n_k``-weighted mean, steps and retracts to the Tucker rank.
    3. *Stage II* (local, nothing sent): with ``A_0`` fixed, each client fits
       ``B_k`` by the lasso ``(1/(2 n_k)) sum ||Y_i - <A_0 + B_k, X_i>||^2 +
       omega_k ||B_k||_1`` with FISTA.

    ``X`` is 2-D with each row a covariate tensor flattened in C order
    (``tensor_shape`` gives its shape; ``None`` means order 1), so scalers and
    ``Pipeline`` work; an n-D ``X`` of shape ``(n, *tensor_shape)`` is
    accepted too. ``y`` is 1-D (scalar response) or 2-D (``output_shape``
    gives the response tensor shape). The coefficient tensors have shape
    ``output_shape + tensor_shape`` (response modes first).

    With ``fit_intercept=True`` (the default) every client centres its own
    ``X`` and ``y`` on their local means before any step and keeps a personal
    intercept ``mean(Y_k) - <A_k, mean(X_k)>``; the population intercept used
    for new clients is ``mean(Y) - <A_0, mean(X)>`` over the rows of the
    clients with two rows or more, from their row counts and their sums of
    ``X`` and ``y`` sent in the set-up exchange (the ``n_k`` weighted mean of
    their intercepts under ``A_0``; a one-row client's sums would be its row,
    and a column nonzero on a single row would give that value, so such a
    client sends none; if no client sends, the population intercept is
    0, with a warning). The paper's model
    has no intercept and centres the data beforehand: ``fit_intercept=False``
    reproduces it. A private fit (finite ``epsilon``) cannot centre on the
    exact means (every centred row would depend on all rows of its client,
    voiding the per-row sensitivity of the noisy releases, and the sums would
    be sent unperturbed): it spends the share ``intercept_share`` of the
    budget on one more round first, in which each client releases the sums
    of its rows clipped to norms ``intercept_tau_x`` and ``intercept_tau_y``
    plus Gaussian noise, and centres the rows of its later releases on these
    noisy means; the population intercept uses the pooled noisy sums, Stage II
    and the personal intercepts (never sent) the exact local means.

    A strict private fit needs public truncation levels and a public step.
    When none is given (``standardize="auto"``: none of ``tau_x``, ``tau_e``,
    ``tau_grad``, ``intercept_tau_x``, ``intercept_tau_y``, a number
    ``step_size`` or an array ``init``), the fit scales the raw data
    privately first: each site releases twice (``scaling_share`` of the
    budget) the noisy histograms of all its X entries and all its y entries on
    a fixed public grid, the server reads one robust range of each (the 2% and
    98% quantiles; the second release, of the entries mapped by the first
    range, refines it), and every site maps each entry into ``[-s, s]`` by it
    (the y range widened 2.5 times: clipped responses bias the fit) and clips
    there (``s = 2.054``, the 98% normal quantile, so a Gaussian covariate
    entry gets unit variance). The levels are then public functions of the
    shapes: ``tau_x = intercept_tau_x = sqrt(p)``, ``tau_e = 0.25 sqrt(q)``,
    ``intercept_tau_y = sqrt(q)`` and ``step_size = 1`` (``p``, ``q``: entries
    of a covariate and a response tensor), and ``"auto"`` ``n_rounds``,
    ``init_share``, ``tau_grad`` and ``accountant`` give the tuned strict
    recipe (see ``n_rounds``). One range per tensor keeps the
    Tucker rank: the fitted tensors, intercepts and predictions are in raw
    units (``A = A' h_y / h_x``), and ``predict`` clips X to
    ``feature_range_`` as the fit did. Public ``feature_bounds`` and
    ``target_bounds`` skip the release. A target far from 0 relative to its
    spread is resolved by the second release (a uniform grid on the first
    range); at few rows the ranges are read on merged bins, and a histogram
    with no bin above the noise warns (pass the public bounds).

    Parameters
    ----------
    tensor_shape : tuple of int or None, default=None
        Shape of one covariate tensor; ``prod(tensor_shape)`` must equal the
        number of columns of ``X`` (one entry may be -1, inferred as in
        ``numpy.reshape``). ``None``: ``(n_features,)``.
    output_shape : tuple of int or None, default=None
        Shape of one response tensor for 2-D ``y`` (one entry may be -1);
        ``None``: ``(n_outputs,)``.
    rank : "auto", int or tuple of int, default="auto"
        Tucker rank of ``A_0``, one entry per mode of the coefficient tensor
        (response modes first). ``"auto"``: the ridge-type ratio criterion on
        every client's preliminary estimate and the federated mode vote.
    fit_intercept : bool, default=True
        Centre each client's ``X`` and ``y`` locally and fit a personal
        intercept per client (see above; with finite ``epsilon`` on private
        means); ``False``: the paper's model through the origin, for data
        centred beforehand (e.g. by public means).
    step_size : float or "auto", default="auto"
        Stage-I step ``eta_A`` (paper scaling; the authors' code uses a loss
        twice as large, so its 0.02 is 0.04 here). ``"auto"``: ``1 / sum_k
        (n_k / n) L_k`` with ``L_k = ||X_k^T X_k / n_k||_op`` of the rows the
        steps see, each site sending its ``L_k`` in the set-up (a fixed step is
        not scale-free: chosen on real data, ``benchmarks/defaults/pftr_real_data.py``).
    n_rounds : int or "auto", default="auto"
        Stage-I rounds ``T_g``; the noise grows linearly with it. ``"auto"``:
        3 in a strict private fit in the scaled space (the private scaling or
        public bounds, see ``standardize``: the tuned strict recipe
        ``n_rounds=3``, ``init_share=0.4``, ``tau_grad=0.3 tau_e tau_x``,
        ``accountant="pld"``, of ``benchmarks/defaults/pftr_strict_tuning.py --grid
        split``), 20 in every other fit.
    alpha : float, default=0.035
        Stage-II penalty scale. With ``penalty_scaling="adaptive"``,
        ``omega_k = alpha sqrt(log(max(qp, 2)) / n_k) sqrt(L_k)``,
        ``L_k = ||X_k^T X_k / n_k||_op`` (the authors' rule; their
        ``omega_base = 0.05`` is ``alpha = 0.05 / sqrt(2)`` here).
    n_local_iter : int, default=30
        Stage-II FISTA iterations ``T_l`` (step ``1 / L_k``).
    penalty_scaling : {"adaptive", "none"}, default="adaptive"
        ``"none"`` uses ``omega_k = alpha`` for every client.
    epsilon : float or None, default=None
        Per-client privacy budget of Stage I; ``None``: no noise (a
        non-private fit), and ``float("inf")`` is an alias of ``None`` (the
        same fit and the same ``privacy_spent_``), as for every private
        estimator of skfed (:func:`skfed.privacy.check_epsilon`). 0,
        negative, NaN or non-numbers are refused.
    delta : float, default=1e-5
        Per-client delta of Stage I (the paper's experiments use 0.1).
    tau_x, tau_e : float or None, default=None
        Truncation levels (Frobenius norms) of the covariate and residual
        tensors; public constants, chosen without looking at the private data
        (e.g. for standardized ``X``, a few times ``sqrt(n_features)``).
        A private fit with ``privacy_mode="strict"`` requires both.
        ``None`` uses the ``clip_quantile`` empirical quantile of the
        client's norms (recomputed every round for residuals): the paper's
        convenience, only with ``privacy_mode="paper"`` or without privacy,
        because levels that depend on the data void the guarantee.
    clip_quantile : float in (0, 1], default=0.9
        Quantile for data-dependent truncation levels (1: the maximum).
    tau_grad : float, None or "auto", default="auto"
        Truncation level (Frobenius norm) of each row's term of the sent
        Stage-I projection, ``P_T(T_tau_e(R_i) o T_tau_x(X_i))``: rows whose
        term is longer are scaled down to it, and the noise's sensitivity is
        ``2 min(tau_grad, tau_e tau_x) / n_k`` instead of ``2 tau_e tau_x /
        n_k``. The projection on the tangent space keeps only part of a row's
        term, so a level below ``tau_e tau_x`` removes much of the rounds'
        noise (not in the paper; on its simulation design ``0.3 tau_e tau_x``
        with ``n_rounds=3`` and ``init_share=0.4`` was selected,
        ``benchmarks/defaults/pftr_strict_tuning.py --grid split``). A public constant
        like ``tau_x`` and ``tau_e``. ``None``:
        the paper's bound. Only with ``tangent="exact"`` (the surrogate is
        not linear). ``"auto"``: ``0.3 tau_e tau_x`` of the scaled space's
        levels in the recipe's case (see ``n_rounds``, with
        ``tangent="exact"``), else ``None``.
    intercept_tau_x, intercept_tau_y : float or None, default=None
        Truncation levels (Euclidean norms) of a raw, uncentred covariate row
        and response row in the private means of ``fit_intercept=True`` with
        finite ``epsilon`` (the paper has no intercept). Public constants: a
        row is scaled down to the level before it is summed, so a level below
        the norms of the rows biases the means towards 0; one far above them
        adds noise (its standard deviation is ``2 level z`` for a sum of
        ``n_k`` rows, ``z`` the noise multiplier of the share). A strict fit
        requires both; ``None`` uses the ``clip_quantile`` quantile of the
        client's row norms (``privacy_mode="paper"`` only). Ignored without
        privacy or with ``fit_intercept=False``.
    intercept_share : float in (0, 1), default=0.5
        Share of the budget spent on the private means (the two noisy sums
        count as two releases): of ``epsilon`` and ``delta`` under
        ``accountant="paper"`` (basic composition), of the precision ``sum_i
        1 / z_i^2`` of all Gaussian releases under ``"rdp"``/``"pld"``, which
        then calibrate all releases together to ``(epsilon, delta)``. The
        noise of a mean is ``2 level z / n_k`` per coordinate, and the
        centring errors shift the clipped rows of every later release, so
        the means need a large share: 0.5 was the best of {0.05, 0.1, 0.2,
        0.3, 0.5} on the paper's simulation design made raw
        (``benchmarks/defaults/pftr_private_intercept.py``), and small clients still
        pay much (there A0 error 0.66 against 0.21 for rows centred on
        public means at ``n_k = 50``; 0.094 against 0.088 at 250). With public
        means, centre by them and pass ``fit_intercept=False``. Ignored
        without privacy or with ``fit_intercept=False``.
    private_centring : {"means", "pairs"}, default="means"
        How a private fit (finite ``epsilon``) with ``fit_intercept=True``
        removes the intercept. ``"means"``: the private means above (share
        ``intercept_share``). ``"pairs"``: no mean is released and no budget
        spent; the moment start and the Stage-I gradients are formed from the
        differences of every pair of the client's rows, ``(r_i - r_j) o (x_i
        - x_j)`` (the intercept cancels; without truncation this is exactly
        the moment of the centred rows), each pair truncated to ``tau_e`` and
        ``tau_x``, which then bound the norms of a *difference* of two
        residuals and of two covariate tensors; replacing one row changes its
        ``n_k - 1`` pair terms, so the sensitivity stays below ``2 tau_e
        tau_x / n_k``. A round then costs ``O(n_k^2)`` (with ``tau_grad``, one
        projection per pair). The population intercept ``shared_intercept_``
        is 0 (no mean is released): predictions for clients not seen in
        ``fit`` carry no intercept. Ignored without privacy or with
        ``fit_intercept=False``.
    standardize : "auto" or bool, default="auto"
        Whether a private fit (finite ``epsilon``) maps X and y into public
        ranges first (see above). ``"auto"``: with ``privacy_mode="strict"``
        when no level, no number ``step_size`` and no array ``init`` is
        given (these would be in the data's units); ``True``: always (the
        given levels, step and ``init`` then apply to the scaled entries, the
        others take the public values above); ``False``: never (the former
        strict fit, which needs the levels). Ignored without privacy.
    feature_bounds, target_bounds : tuple of float or None, default=None
        Public ``(low, high)`` of every covariate (response) entry, e.g.
        ``(0, 255)`` for pixels: that part's range is public, no histogram of
        it is released, and its entries are clipped to it. Scales the fit
        (unless ``standardize=False``); ignored without privacy.
    scaling_share : float in (0, 1), default=0.2
        Share of the budget spent on the two histogram releases of the
        scaling (as ``intercept_share``; the other shares are of the rest).
        At ``epsilon=20`` with ``accountant="paper"`` 0.1 left most bins
        under the noise threshold for 500 rows of 20 entries, 0.2 and 0.3
        both found the range within a few tenths of its width (a measurement
        of the ranges, ``benchmarks/defaults/pftr_private_raw.py``). Ignored without
        the release.
    init_share : float in (0, 1), None or "auto", default="auto"
        Share of the remaining budget spent on the private moment start
        (``init="moment"``), the rest split equally among the ``n_rounds``
        Stage-I releases; ``None``: every one of the ``n_rounds + 1``
        releases gets an equal share (the paper's equal split). ``"auto"``:
        0.4 in the recipe's case (see ``n_rounds``), else ``None``. Ignored
        without privacy or the moment start.
    privacy_mode : {"strict", "paper"}, default="strict"
        What a private fit (finite ``epsilon``) may release. ``"strict"``:
        only the noisy releases of the Gaussian mechanism, with a
        data-independent sensitivity, so ``privacy_spent_`` is a guarantee; a
        parameter that would release anything else (``tau_x`` or ``tau_e``
        ``None`` without the private scaling, ``init="admm"`` and its rank
        vote, ``step_size="auto"`` without the scaling, ``cv``) is refused
        with a ``ValueError`` naming it. ``"paper"``: the
        paper's protocol (data-dependent truncation levels, the largest
        client's unperturbed initial estimate, the rank vote), which
        reproduces its experiments but carries no guarantee: ``fit`` warns
        (``UserWarning``) and ``privacy_spent_["epsilon"]`` is ``inf`` (what
        the noise alone would guarantee is ``"epsilon_nominal"``). With settings that release
        nothing else, ``"paper"`` gives the strict guarantee too. Ignored
        without privacy.
    accountant : {"auto", "paper", "rdp", "pld"}, default="auto"
        How the noise multiplier (noise standard deviation over the L2
        sensitivity ``2 tau_e tau_x / n_k``) of the ``n_releases`` Gaussian
        releases is calibrated to ``(epsilon, delta)``. ``"paper"``: the
        paper's basic composition of classical Gaussian mechanisms (Section
        4.3), proven only for a per-release ``epsilon / n_releases < 1``;
        where it falls short of the budget (e.g. one release at
        ``epsilon=10``, ``delta=1e-5`` is exactly ``(10.39, 1e-5)``-DP), ``fit``
        warns and ``privacy_spent_`` reports the exact epsilon of the noise
        added. ``"rdp"``/``"pld"``: the smallest multiplier whose releases
        cost ``epsilon`` at ``delta`` under dp-accounting's RDP or PLD
        accountant (:func:`skfed.privacy.calibrate_noise_multiplier`; with
        shares, :func:`skfed.privacy.pftr_release_plan`), so less
        noise for the same budget (at the paper's ``epsilon=20``,
        ``delta=0.1``, ``n_rounds=20``: 0.93 and 0.84 instead of 3.32); PLD
        adds about 2 s to ``fit`` (once per budget, cached). ``"auto"``:
        ``"pld"`` in the recipe's case (see ``n_rounds``; ``"rdp"`` above
        ``epsilon=50``, where PLD's calibration takes minutes and gigabytes),
        else ``"paper"``. Ignored without privacy.
    tangent : {"exact", "retract_gradient"}, default="exact"
        ``"exact"``: the orthogonal tangent-space projection at ``A_0``;
        ``"retract_gradient"``: the authors' cheaper surrogate (the gradient's
        own rank-``r`` truncation), for reproducing their numbers.
    retraction : {"st_hosvd", "t_hosvd"}, default="st_hosvd"
        Sequentially truncated or truncated HOSVD.
    init : {"auto", "admm", "moment"} or array-like, default="auto"
        Starting ``A_0``. ``"admm"``: the largest client's ADMM estimate, sent
        without noise (the paper's; outside any guarantee). ``"moment"``: the
        private initializer, the ``n_k``-weighted mean of the clients' noisy
        clipped moments (which estimates ``A_0`` for standardized, roughly
        uncorrelated covariates), one more release of the Stage-I
        Gaussian mechanism (the noise of every release is calibrated to
        ``n_rounds + 1`` releases, so the total stays ``(epsilon, delta)``).
        ``"auto"``: ``"moment"`` for a strict private fit, else ``"admm"``.
        An array: a given tensor of the coefficient shape (public
        information, nothing sent).
    init_lambda, init_alpha, init_zeta, init_rho : float, default=0.02, 0.005, 0.5, 1.0
        ADMM nuclear-norm weight, l1 weight, operator-norm bound of the
        sparse part and penalty parameter.
    init_max_iter : int, default=150
        ADMM iterations.
    %(init_unfolding)s
    rank_scale : float, default=1.0
        Ridge constant ``c = rank_scale sqrt(log(#entries) / n_k)`` of the
        rank criterion.
    max_rank : int or None, default=None
        Largest rank considered by ``rank="auto"``.
    cv : int or None, default=None
        If an int ``V``, choose ``step_size`` and ``alpha`` from
        ``param_grid`` by the paper's V-fold criterion (folds aligned across
        clients; pooled squared validation error of the personalized
        predictions), then refit on all rows. Every client needs ``V`` rows.
    param_grid : dict or None, default=None
        Candidates for ``cv``: keys among ``"step_size"``, ``"alpha"``;
        missing keys keep the current value. ``None``:
        ``{"step_size": (0.01, 0.02, 0.04, 0.1), "alpha": (0.01, 0.035, 0.1)}``.
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per Stage-I round: ``ceil(client_fraction
        * n_clients)``, drawn uniformly without replacement from the
        ``random_state`` stream (:func:`skfed.federated.run_federation`); the
        server averages the asked clients' gradients with weights ``n_k``
        over their rows. The initializer's two rounds (rank vote, largest
        client's estimate) and Stage II ask every client. Privacy: a client
        releases at most ``n_rounds`` noisy gradients either way, so
        ``privacy_spent_`` is the full-participation guarantee; no
        amplification by sampling is claimed.
    on_client_error : {"raise", "skip"}, default="raise"
        A failing client step stops the fit with an error naming the client,
        phase and round (``"raise"``) or leaves the client out of that round
        (``"skip"``, recorded in ``communication_.failures``).
    unknown_client : {"global", "error"}, default="global"
        Prediction for clients not seen in ``fit``: ``A_0`` or an error.
    random_state : int, RandomState instance or None, default=None
        Seed of the privacy noise and of the CV folds.
    n_jobs : int or None, default=None
        Client steps of a round on this many threads.
    verbose : int, default=0
        Print one line per round.

    Attributes
    ----------
    shared_coef_ : ndarray of shape coef_shape_
        ``A_0``, of Tucker rank ``rank_``.
    core_ : ndarray of shape rank_
        Tucker core of ``shared_coef_``.
    factors_ : list of ndarray
        Orthonormal Tucker factors (``coef_shape_[s] x rank_[s]``).
    deviations_ : ndarray of shape (n_clients, *coef_shape_)
        Sparse ``B_k`` of each client (kept by the client in a real
        deployment; never sent).
    coef_ : ndarray of shape (n_clients, *coef_shape_)
        Personalized ``A_k = A_0 + B_k``.
    intercept_ : ndarray of shape (n_clients,) or (n_clients, *output_shape_)
        Personal intercept of each client (kept by the client; zeros with
        ``fit_intercept=False``).
    shared_intercept_ : float or ndarray of shape output_shape_
        Population intercept used with ``A_0`` for clients not seen in ``fit``.
    rank_ : tuple of int
        Tucker rank used.
    local_ranks_ : dict
        Client index to the rank it selected and sent for the vote, with
        ``rank="auto"`` and the ADMM start (``init="admm"``); ``{}``
        otherwise, e.g. in a strict private fit (``init="moment"``), where
        the server picks the rank on the noisy pooled moment.
    clients_ : ndarray of shape (n_clients,)
        Sorted client labels.
    init_client_ : int
        Index of the client whose estimate started ``A_0`` (-1 when the
        private moment initializer or a given ``init`` started it).
    penalty_ : ndarray of shape (n_clients,)
        Stage-II l1 weights ``omega_k``.
    noise_std_ : ndarray of shape (n_clients, n_rounds)
        ``sigma_k^(t)`` added by each client in each round (NaN in a round
        the client was not asked or skipped).
    tau_x_ : ndarray of shape (n_clients,)
        Covariate truncation levels (NaN for a client never asked in Stage I).
        Like ``tau_e_``, ``noise_std_`` and ``grad_norm_``, in the scaled
        units of a privately scaled fit.
    feature_range_, target_range_ : tuple of float or None
        ``(low, high)`` of the covariate (response) entries of a privately
        scaled fit (from the noisy histograms or the public bounds): the
        entries were clipped to them; ``None`` without the scaling.
    tau_e_ : ndarray of shape (n_clients, n_rounds)
        Residual truncation levels (NaN as in ``noise_std_``).
    privacy_spent_ : dict
        Per-client guarantee of everything the client released:
        ``epsilon``/``delta`` of the ``n_releases`` Gaussian releases
        (``n_rounds``, plus 1 with ``init="moment"``, plus the 2 noisy sums of
        a private ``fit_intercept=True``) composed by the accountant that
        calibrated the noise (``calibration``, the ``accountant`` parameter:
        the paper's basic composition, or dp-accounting's RDP or PLD
        accountant recomputed on the releases; with ``"paper"``, where the
        releases' exact epsilon exceeds the budget, that exact epsilon),
        ``epsilon_exact``, the exact epsilon of the releases at ``delta``
        (:func:`skfed.privacy.gaussian_epsilon`), ``epsilon_rdp`` by
        dp-accounting's RDP accountant at the same ``delta``,
        ``noise_multiplier`` (of the Stage-I releases), ``releases`` (one dict
        per share of the budget: ``name`` among ``"scaling"``, ``"intercept"``, ``"init"``,
        ``"stage_one"`` and ``"init_and_stage_one"``, ``count``, ``share``,
        ``noise_multiplier`` and ``epsilon``, what that share's releases alone
        spend at ``delta``), ``classical_valid`` (per-release ``epsilon /
        n_releases < 1``; ``None`` unless ``accountant="paper"``), ``strict`` (whether the
        guarantee holds), ``mode`` (``privacy_mode``), ``covers`` (what the
        guarantee covers) and ``outside`` (the releases that void it, empty
        when strict). Not strict (``privacy_mode="paper"`` with releases
        outside): no guarantee, so ``epsilon``, ``epsilon_exact`` and
        ``epsilon_rdp`` are ``inf`` and ``delta`` 0; ``epsilon_nominal``,
        ``delta_nominal``, ``epsilon_exact_nominal`` and ``epsilon_rdp_nominal``
        give what the noisy releases alone would guarantee (the budget the
        noise was calibrated for, or its exact epsilon where that is larger).
        Without privacy (``epsilon=None`` or ``inf``): ``epsilon``,
        ``epsilon_exact`` and ``epsilon_rdp`` are ``inf``, ``noise_multiplier``
        0, ``strict`` false.
    grad_norm_ : ndarray of shape (n_rounds,)
        Norm of the aggregated Stage-I gradient per round.
    cv_results_ : dict
        With ``cv``: candidates and their mean validation errors.
    best_params_ : dict
        With ``cv``: the chosen ``step_size`` and ``alpha``.
    communication_ : Ledger
        Every message of the initialization, Stage I and Stage II.
    tensor_shape_, output_shape_, coef_shape_ : tuple
        Shapes of a covariate, a response and a coefficient tensor.
    n_features_in_ : int
        Columns of ``X``.
    %(feature_names_in_)s

    Notes
    -----
    The privacy guarantee (Definition 1 of the paper: one pair of a client
    replaced) and its caveats (Sec. 4.3):

    (a) quantile-based truncation levels depend on the private data, so
        the sensitivity bound ``2 tau_e tau_x / n_k`` is not data-independent;
        a strict private fit takes fixed ``tau_x`` and ``tau_e``;
    (b) the classical Gaussian calibration is proven only for a per-release
        ``epsilon / T < 1`` (``privacy_spent_["classical_valid"]``); beyond
        it the paper's noise may spend more than ``epsilon`` (its eps = 20,
        delta = 0.1 with the moment start and one round: 21.78), and then
        ``privacy_spent_["epsilon"]`` is the exact epsilon of the releases
        and ``fit`` warns; ``epsilon_exact`` and ``epsilon_rdp`` are valid
        for the same releases in any case;
    (c) the paper's initial ``A_0`` is the largest client's estimate, sent
        without noise (and with ``rank="auto"`` every client's selected
        ranks; with ``step_size="auto"`` every client sends its ``L_k``):
        only with ``privacy_mode="paper"``; a strict fit uses the noisy
        moment initializer (or a public ``init``) and a given ``step_size``;
    (d) ``cv`` tuning releases validation errors and reruns the procedure; it
        is not privacy-accounted (only with ``privacy_mode="paper"``);
    (e) the loss is scaled by ``1 / (2 n_k)``, for which the sensitivity
        ``2 tau_e tau_x / n_k`` is exact (the authors' code doubles the
        gradient without doubling the noise);
    (f) ``delta = 0.1``, the paper's setting, is weak by DP standards.

    References
    ----------
    .. [1] K. Chen, X. Wei and Q. Zhu, "Personalized Federated Learning for
       Tensor Regression", arXiv:2608.27191. Algorithm, section and equation
       numbers in this documentation ("the paper's") are this paper's.

    Examples
    --------
    >>> from skfed.datasets import make_tensor_regression
    >>> from skfed.tensor import PersonalizedTensorRegressor
    >>> X, y, groups = make_tensor_regression(
    ...     n_clients=3, n_samples=60, tensor_shape=(4, 3), output_shape=None,
    ...     rank=(2, 2), n_nonzero=2, random_state=0)
    >>> model = PersonalizedTensorRegressor(tensor_shape=(4, 3), rank=(2, 2),
    ...     step_size=0.5, epsilon=20.0, delta=0.1, tau_x=4.0, tau_e=2.0,
    ...     fit_intercept=False, random_state=0)
    >>> model.fit(X, y, groups=groups).shared_coef_.shape
    (4, 3)
    >>> model.predict(X[:2], groups=groups[:2]).shape
    (2,)
    >>> model.privacy_spent_["strict"], model.privacy_spent_["n_releases"]
    (True, 21)

    Without privacy, raw ``y`` (here shifted by 100) gets per-client intercepts:

    >>> raw = PersonalizedTensorRegressor(tensor_shape=(4, 3), rank=(2, 2)).fit(
    ...     X, y + 100, groups=groups)
    >>> bool(abs(raw.shared_intercept_ - 100) < 1)
    True
    """

    def __init__(
        self,
        *,
        tensor_shape=None,
        output_shape=None,
        rank="auto",
        fit_intercept=True,
        step_size="auto",
        n_rounds="auto",
        alpha=0.035,
        n_local_iter=30,
        penalty_scaling="adaptive",
        epsilon=None,
        delta=1e-5,
        tau_x=None,
        tau_e=None,
        clip_quantile=0.9,
        tau_grad="auto",
        intercept_tau_x=None,
        intercept_tau_y=None,
        intercept_share=0.5,
        private_centring="means",
        standardize="auto",
        feature_bounds=None,
        target_bounds=None,
        scaling_share=0.2,
        init_share="auto",
        privacy_mode="strict",
        accountant="auto",
        tangent="exact",
        retraction="st_hosvd",
        init="auto",
        init_lambda=0.02,
        init_alpha=0.005,
        init_zeta=0.5,
        init_rho=1.0,
        init_max_iter=150,
        init_unfolding="auto",
        rank_scale=1.0,
        max_rank=None,
        cv=None,
        param_grid=None,
        client_fraction=1.0,
        on_client_error="raise",
        unknown_client="global",
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        self.tensor_shape = tensor_shape
        self.output_shape = output_shape
        self.rank = rank
        self.fit_intercept = fit_intercept
        self.step_size = step_size
        self.n_rounds = n_rounds
        self.alpha = alpha
        self.n_local_iter = n_local_iter
        self.penalty_scaling = penalty_scaling
        self.epsilon = epsilon
        self.delta = delta
        self.tau_x = tau_x
        self.tau_e = tau_e
        self.clip_quantile = clip_quantile
        self.tau_grad = tau_grad
        self.intercept_tau_x = intercept_tau_x
        self.intercept_tau_y = intercept_tau_y
        self.intercept_share = intercept_share
        self.private_centring = private_centring
        self.standardize = standardize
        self.feature_bounds = feature_bounds
        self.target_bounds = target_bounds
        self.scaling_share = scaling_share
        self.init_share = init_share
        self.privacy_mode = privacy_mode
        self.accountant = accountant
        self.tangent = tangent
        self.retraction = retraction
        self.init = init
        self.init_lambda = init_lambda
        self.init_alpha = init_alpha
        self.init_zeta = init_zeta
        self.init_rho = init_rho
        self.init_max_iter = init_max_iter
        self.init_unfolding = init_unfolding
        self.rank_scale = rank_scale
        self.max_rank = max_rank
        self.cv = cv
        self.param_grid = param_grid
        self.client_fraction = client_fraction
        self.on_client_error = on_client_error
        self.unknown_client = unknown_client
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    @classmethod
    def _test_instances(cls):
        """Default instance, plus one with a matrix ``tensor_shape`` and privacy."""
        return [
            cls(),
            cls(tensor_shape=(-1, 1), step_size=0.2, epsilon=50.0, delta=0.1,
                tau_x=3.0, tau_e=3.0, fit_intercept=False, random_state=0),
        ]

    # -- validation ---------------------------------------------------------------

    _parameter_constraints = {
        **TENSOR_CONSTRAINTS,
        **FEDERATION_CONSTRAINTS,
        # the privacy budget, checked together (check_privacy_budget) in _check_params
        "epsilon": "no_validation",
        "delta": "no_validation",
        "accountant": "no_validation",  # check_accountant
        "tau_x": [positive_real(), None],
        "tau_e": [positive_real(), None],
        "clip_quantile": [Number(numbers.Real, 0, 1, closed="right")],
        "n_rounds": [StrOptions({"auto"}), positive_int()],
        "tau_grad": [StrOptions({"auto"}), positive_real(), None],
        "intercept_tau_x": [positive_real(), None],
        "intercept_tau_y": [positive_real(), None],
        "intercept_share": [Number(numbers.Real, 0, 1, closed="neither")],
        "init_share": [StrOptions({"auto"}), Number(numbers.Real, 0, 1, closed="neither"),
                       None],
        "private_centring": [StrOptions({"means", "pairs"})],
        "standardize": [StrOptions({"auto"}), "boolean"],
        "feature_bounds": ["array-like", None],
        "target_bounds": ["array-like", None],
        "scaling_share": [Number(numbers.Real, 0, 1, closed="neither")],
        "privacy_mode": [StrOptions(set(PRIVACY_MODES))],
        "init": [StrOptions(set(INIT_MODES)), "array-like"],
        "cv": [positive_int(2), None],
        "param_grid": [dict, None],
    }

    def _check_params(self):
        """The checks of several parameters together; ``_fit_params`` for the other hooks."""
        p = {"alpha": float(self.alpha), "n_local_iter": int(self.n_local_iter)}
        p["step_size"] = self.step_size if isinstance(self.step_size, str) \
            else float(self.step_size)
        p["epsilon"], p["delta"] = check_privacy_budget(self.epsilon, self.delta)
        if p["epsilon"] is None:
            p["delta"] = float(self.delta) if isinstance(self.delta, numbers.Real) else None
        p["fit_intercept"] = bool(self.fit_intercept)
        p["tau_x"] = None if self.tau_x is None else float(self.tau_x)
        p["tau_e"] = None if self.tau_e is None else float(self.tau_e)
        p["admm"] = dict(lam=float(self.init_lambda), omega=float(self.init_alpha),
                         zeta=float(self.init_zeta), rho=float(self.init_rho),
                         max_iter=int(self.init_max_iter))
        if self.tau_grad not in (None, "auto") and self.tangent != "exact":
            raise ValueError(
                f"tau_grad={self.tau_grad!r} truncates each row's term of the linear tangent "
                f"projection, which tangent={self.tangent!r} does not have; use "
                "tangent='exact' or tau_grad=None (tau_grad).")
        grid = DEFAULT_GRID if self.param_grid is None else self.param_grid
        if not set(grid) <= set(CV_PARAMS):
            raise ValueError(
                f"param_grid must be a dict with keys among {CV_PARAMS}, got {grid!r}."
            )
        grid = check_param_grid(grid, DEFAULT_GRID)  # lists of values, as GPBoost's and MERF's
        for key, values in grid.items():
            for v in values:
                check_positive_float(v, f"param_grid[{key!r}]", allow_zero=key == "alpha")
        p["grid"] = grid
        if not (isinstance(self.accountant, str) and self.accountant == "auto"):
            check_accountant(self.accountant)
        p["init_mode"] = self._init_mode(p["epsilon"])
        # a private intercept: the means from an accounted release (PrivateCentring)
        private_intercept = p["fit_intercept"] and p["epsilon"] is not None
        p["pairs"] = private_intercept and self.private_centring == "pairs"
        p["centring"] = private_intercept and not p["pairs"]
        p["scaling"] = self._scaling_mode(p)
        p.update(self._recipe(p))
        p["bounds"] = {name: self._public_bounds(name) for name in ("feature_bounds",
                                                                     "target_bounds")}
        if p["pairs"] and not p["scaling"] and (p["tau_x"] is None or p["tau_e"] is None):
            raise ValueError(
                "private_centring='pairs' truncates pair differences at the given levels: pass "
                "tau_x and tau_e (bounds on the norms of the difference of two covariate "
                "tensors and of two residuals) (private_centring).")
        p["groups"] = release_groups(
            p["n_rounds"], p["init_mode"] == "moment", p["centring"],
            float(self.intercept_share),
            p["init_share"],
            float(self.scaling_share) if p["scaling"] == "histogram" else None)
        p["n_releases"] = sum(count for _, count, _ in p["groups"])
        # calibrate now so an unreachable budget fails before any round
        zs = pftr_release_plan(p["epsilon"], p["delta"], [g[1:] for g in p["groups"]],
                               p["accountant"])
        p["multipliers"] = dict(zip((g[0] for g in p["groups"]), zs))
        p["outside"] = self._outside_guarantee(p)
        if p["epsilon"] is not None and self.privacy_mode == "strict" and p["outside"]:
            raise ValueError(self._strict_message(p))
        self._fit_params = p

    def _recipe(self, p):
        """``n_rounds``, ``init_share``, ``tau_grad`` (its multiple of ``tau_e tau_x`` under
        ``"tau_grad_factor"``) and ``accountant``: the given values, ``"auto"`` the tuned
        strict recipe (:data:`STRICT_RECIPE`) in a strict private fit in the scaled space,
        else the paper's (:data:`OTHER_DEFAULTS`)."""
        recipe = p["epsilon"] is not None and self.privacy_mode == "strict" and p["scaling"]
        auto = dict(STRICT_RECIPE if recipe else OTHER_DEFAULTS)
        if recipe and p["epsilon"] > PLD_MAX_EPSILON:
            auto["accountant"] = "rdp"
        given = {name: getattr(self, name) for name in auto}
        out = {name: auto[name] if isinstance(v, str) and v == "auto" else v
               for name, v in given.items()}
        # a projected-term level only for the exact (linear) tangent projection
        factor = out.pop("tau_grad") if (given["tau_grad"] == "auto"
                                         and self.tangent == "exact") else None
        return {"n_rounds": int(out["n_rounds"]), "accountant": out["accountant"],
                "init_share": None if out["init_share"] is None else float(out["init_share"]),
                "tau_grad": None if given["tau_grad"] in (None, "auto") else float(
                    given["tau_grad"]), "tau_grad_factor": factor}

    def _scaling_mode(self, p):
        """How a private fit scales its entries: ``"histogram"`` (noisy histograms,
        ``scaling_share`` of the budget), ``"bounds"`` (the public bounds of both X and
        y, no release) or ``None`` (the rows as given)."""
        if p["epsilon"] is None or self.standardize is False:
            return None
        given = self.feature_bounds is not None, self.target_bounds is not None
        if self.standardize == "auto" and not any(given):
            # only when the user gave no constant of the rows' units: the levels, a step
            # or a starting tensor in raw units would not fit the scaled space
            constants = (self.tau_x, self.tau_e, self.intercept_tau_x, self.intercept_tau_y,
                         None if self.tau_grad == "auto" else self.tau_grad)
            if (self.privacy_mode != "strict" or any(c is not None for c in constants)
                    or not (isinstance(self.step_size, str) and self.step_size == "auto")
                    or not isinstance(self.init, str)):
                return None
        return "bounds" if all(given) else "histogram"

    def _public_bounds(self, name):
        """The public ``feature_bounds`` or ``target_bounds`` as ``(low, high)``, checked."""
        value = getattr(self, name)
        if value is None:
            return None
        try:
            bounds = np.asarray(value, dtype=float)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be two numbers (low, high), got {value!r}.") from exc
        if bounds.shape != (2,) or not np.isfinite(bounds).all() or not bounds[1] > bounds[0]:
            raise ValueError(
                f"{name} must be two finite numbers (low, high) with low < high: the public "
                f"range of every entry; got {value!r} ({name}).")
        return float(bounds[0]), float(bounds[1])

    def _scaled_levels(self, setup):
        """The levels and step of a scaled fit: the given ones, else public functions of
        the shapes (:data:`~skfed.tensor._scaling.SCALED_LEVELS`); ``{}`` unscaled."""
        p = self._fit_params
        if not p["scaling"]:
            return {}
        n_features = int(np.prod(setup["tensor_shape"], dtype=np.int64))
        n_outputs = int(np.prod(setup["output_shape"], dtype=np.int64))
        # pair differences of two rows have sqrt(2) times their norm
        pair = math.sqrt(2.0) if p["pairs"] else 1.0
        dims = {"tau_x": pair * math.sqrt(n_features), "tau_e": pair * math.sqrt(n_outputs),
                "intercept_tau_x": math.sqrt(n_features),
                "intercept_tau_y": math.sqrt(n_outputs), "step_size": 1.0}
        given = {**p, "intercept_tau_x": self.intercept_tau_x,
                 "intercept_tau_y": self.intercept_tau_y}
        return {name: float(given[name]) if given[name] not in (None, "auto")
                else SCALED_LEVELS[name] * dims[name] for name in dims}

    def _init_mode(self, epsilon):
        """``"array"``, ``"admm"`` or ``"moment"``: how ``A_0`` starts."""
        if not isinstance(self.init, str):
            return "array"
        if self.init == "auto":
            private_strict = epsilon is not None and self.privacy_mode == "strict"
            return "moment" if private_strict else "admm"
        return self.init

    def _outside_guarantee(self, p):
        """What a private fit with these parameters releases outside its guarantee."""
        if p["epsilon"] is None:
            return []
        out = []
        if p["scaling"]:  # the levels and the step: public functions of the shapes
            p = {**p, "tau_x": 0.0, "tau_e": 0.0, "step_size": 0.0}
        if p["tau_x"] is None:
            out.append("tau_x: covariate truncation levels taken from the data "
                       "(clip_quantile quantile of each client's row norms)")
        if p["tau_e"] is None:
            out.append("tau_e: residual truncation levels taken from the data every round")
        for name in ("intercept_tau_x", "intercept_tau_y") if (
                p["centring"] and not p["scaling"]) else ():
            if getattr(self, name) is None:
                what = "covariate" if name.endswith("x") else "response"
                out.append(f"{name}: {what} truncation levels of the private means taken "
                           "from the data (clip_quantile quantile of each client's row norms)")
        if p["init_mode"] == "admm":
            out.append("init: the largest client's ADMM estimate, sent without noise")
            if isinstance(self.rank, str):
                out.append("rank: every client's locally selected Tucker rank (the vote), "
                           "sent without noise")
        if p["step_size"] == "auto":
            out.append("step_size: every client's L_k = ||X_k^T X_k / n_k||_op, sent "
                       "without noise")
        if self.cv is not None:
            out.append("cv: validation errors of refits on folds, not accounted")
        return out

    def _strict_message(self, p):
        fixes = {
            "tau_x": "pass a fixed tau_x (a public bound on the Frobenius norm of a covariate "
                     "tensor, e.g. sqrt(n_features) times a few for standardized X)",
            "tau_e": "pass a fixed tau_e (a public bound on the norm of a residual, e.g. a "
                     "few standard deviations of a standardized y)",
            "intercept_tau_x": "pass a fixed intercept_tau_x (a public bound on the norm of "
                               "a raw covariate row) or fit_intercept=False on data centred "
                               "by public means",
            "intercept_tau_y": "pass a fixed intercept_tau_y (a public bound on the norm of "
                               "a raw response row) or fit_intercept=False on data centred "
                               "by public means",
            "init": "use init='auto' or 'moment' (the private moment initializer) or a public "
                    "array",
            "rank": "use init='auto' (the rank is then chosen from the noisy moment) or give "
                    "rank",
            "step_size": "give step_size (a number; 1 / ||X^T X / n||_op of public or "
                         "standardized data)",
            "cv": "set cv=None and pass tuned step_size and alpha",
        }
        names = [item.split(":")[0] for item in p["outside"]]
        scale = "" if self.standardize is False or not {"tau_x", "tau_e", "step_size"} & set(
            names) else (
            ". Or give none of tau_x, tau_e, tau_grad, intercept_tau_x, intercept_tau_y, "
            "step_size and init: the fit then maps X and y privately into a public range "
            "where they are public (standardize='auto')")
        return (
            f"privacy_mode='strict' (the default) with epsilon={self.epsilon!r} needs every "
            "release to be covered by the guarantee, but these would not be: "
            + "; ".join(p["outside"]) + ". To fix: "
            + "; ".join(fixes[n] for n in names) + scale
            + ". Or pass privacy_mode='paper' for the paper's protocol, which carries no "
            "differential-privacy guarantee (" + ", ".join(names) + ")."
        )

    # -- the set-up exchange: with a non-private intercept, each site's sums --

    def _site_summary(self, X, y):
        summary = super()._site_summary(X, y)
        X = np.asarray(X, dtype=float)
        intercept = self._fit_params["fit_intercept"]
        # a private fit's means come from the noisy "centre" round (PrivateCentring)
        send_sums = intercept and self._fit_params["epsilon"] is None
        # sums, not means, and only of two nonzero values or more per column (or
        # none): the sum (or mean) of one is that value, and the mean of a
        # constant column is its value (skfed.federated._release)
        y = np.asarray(y, dtype=float).reshape(len(y), -1)
        if send_sums and sends_sums(X, y):
            summary["x_sum"] = X.sum(axis=0)
            summary["y_sum"] = y.sum(axis=0)
        if (isinstance(self.step_size, str) and self.step_size == "auto"
                and not self._fit_params["scaling"]):  # scaled: a public step
            # ||X_k^T X_k / n_k||_op of the rows the steps see (centred with an intercept)
            Xs = X - X.mean(axis=0) if intercept else X
            summary["lipschitz"] = np.float64(lipschitz(Xs))
        return summary

    def _combine_site_summaries(self, labels, summaries):
        setup = super()._combine_site_summaries(labels, summaries)
        if self._fit_params["fit_intercept"] and self._fit_params["epsilon"] is None:
            # the pooled means of the sites that sent sums (skfed.federated._release)
            sent = [s for s in summaries if "x_sum" in s]
            if sent:
                n = sum(float(s["n_samples"]) for s in sent)
                setup["x_mean"] = sum(np.asarray(s["x_sum"], dtype=float) for s in sent) / n
                setup["y_mean"] = sum(np.asarray(s["y_sum"], dtype=float) for s in sent) / n
            else:
                too_few_rows_warning("the shared intercept", MIN_ROWS_SUM,
                                     "the shared intercept is taken as 0")
                setup["x_mean"] = np.zeros(int(summaries[0]["n_features"]))
                setup["y_mean"] = np.zeros(int(np.prod(setup["output_shape"], dtype=np.int64)))
        if all("lipschitz" in s for s in summaries):
            # sum_k w_k L_k bounds the curvature of the n_k-weighted Stage-I loss
            w = np.array([float(s["n_samples"]) for s in summaries])
            setup["lipschitz"] = np.float64(
                w @ np.array([float(s["lipschitz"]) for s in summaries]) / w.sum())
        return setup

    def _init_tensor(self, coef_shape):
        if isinstance(self.init, str):
            return None
        init = np.asarray(self.init, dtype=float)
        if init.shape != coef_shape or not np.all(np.isfinite(init)):
            raise ValueError(
                "init must be 'auto', 'admm', 'moment' or a finite array of the coefficient "
                f"shape {coef_shape}, got shape {init.shape}."
            )
        return init

    # -- the hooks of skfed.federated.FederatedContract (also run by Flower) --------

    def _refuse_distributed_cv(self):
        """``cv`` refits on folds, which only the in-process fit can do."""
        if self.cv is not None:
            raise ValueError(
                f"cv={self.cv!r} tunes step_size and alpha by refitting on folds, which "
                "only the in-process fit can do; on a distributed engine set cv=None and "
                "pass the tuned step_size and alpha (e.g. best_params_ of an in-process "
                "fit) (cv)."
            )

    def _engine_params(self):
        self._refuse_distributed_cv()  # in-process, the engine runs a copy without cv
        # the ADMM initializer (and rank vote) takes 2 rounds before Stage I, the
        # private moment initializer 1
        init_rounds = {"array": 0, "admm": 2, "moment": 1}[self._fit_params["init_mode"]]
        # and the private means of fit_intercept=True 1
        init_rounds += int(self._fit_params["centring"])
        # and the private scaling's histograms N_PASSES
        init_rounds += N_PASSES * (self._fit_params["scaling"] == "histogram")
        return {**super()._engine_params(), "n_rounds": self._fit_params["n_rounds"] + init_rounds}

    def _federated_algorithm(self, setup):
        """Initializer (when needed), Stage I and Stage II as one phased algorithm."""
        self._refuse_distributed_cv()
        return self._phases(setup)

    def _phases(self, setup):
        """The phased algorithm, built from the parameters and the set-up summary only."""
        params = self._fit_params
        tensor_shape = tuple(int(s) for s in setup["tensor_shape"])
        output_shape = tuple(int(s) for s in setup["output_shape"])
        coef_shape = output_shape + tensor_shape
        rank = self._check_rank_param(self.rank, coef_shape)
        init = self._init_tensor(coef_shape)
        if init is not None and rank == "auto":  # a public starting tensor: nothing sent
            n_max = int(np.max(setup["n_samples"]))
            rank = make_feasible(ratio_rank(init, n_max, self.rank_scale, self.max_rank),
                                 coef_shape)
        if rank != "auto":
            rank = check_tucker_rank(rank, coef_shape)
        admm = {**params["admm"], "rows": self._init_rows(output_shape, tensor_shape)}
        z = params["multipliers"]
        # a scaled fit's levels and step (public functions of the shapes), or the given ones
        levels = {"tau_x": params["tau_x"], "tau_e": params["tau_e"],
                  "intercept_tau_x": self.intercept_tau_x,
                  "intercept_tau_y": self.intercept_tau_y, "step_size": params["step_size"],
                  **self._scaled_levels(setup)}
        scaling = self._scaling(setup)
        centring = None
        if params["centring"]:
            centring = dict(tau_x=levels["intercept_tau_x"], tau_y=levels["intercept_tau_y"],
                            noise_multiplier=z["intercept"],
                            clip_quantile=float(self.clip_quantile))
        # the Stage-I and moment multipliers of the budget's shares (pftr_release_plan)
        z_rounds = z.get("stage_one", z.get("init_and_stage_one"))
        z_init = z.get("init", z.get("init_and_stage_one"))
        step_size = levels["step_size"]
        if step_size == "auto":
            lip = float(setup["lipschitz"]) if "lipschitz" in setup else 0.0
            step_size = 1.0 / lip if lip > 0 and math.isfinite(1.0 / lip) else 1.0
        return PersonalizedTensorPhases(
            coef_shape, rank, init,
            init_params=dict(admm_params=admm, rank_scale=self.rank_scale,
                             max_rank=self.max_rank),
            stage_one=dict(step_size=step_size, n_rounds=params["n_rounds"],
                           epsilon=params["epsilon"], delta=params["delta"],
                           tau_x=levels["tau_x"], tau_e=levels["tau_e"],
                           clip_quantile=float(self.clip_quantile), tangent=self.tangent,
                           retraction=self.retraction, n_releases=params["n_releases"],
                           accountant=params["accountant"], noise_multiplier=z_rounds,
                           tau_grad=self._tau_grad(levels)),
            stage_two=dict(alpha=params["alpha"], n_iter=params["n_local_iter"],
                           scaling=self.penalty_scaling),
            fit_intercept=params["fit_intercept"],
            moment_init=params["init_mode"] == "moment",
            init_noise_multiplier=z_init,
            centring=centring,
            pairs=params["pairs"],
            scaling=scaling,
        )

    def _tau_grad(self, levels):
        """The given ``tau_grad``, or ``"auto"``'s multiple of ``tau_e tau_x``, or ``None``."""
        p = self._fit_params
        if p["tau_grad_factor"] is None:
            return p["tau_grad"]
        return p["tau_grad_factor"] * levels["tau_e"] * levels["tau_x"]

    def _scaling(self, setup):
        """The :class:`~skfed.tensor._scaling.TensorScaling` of a scaled fit, or ``None``."""
        p = self._fit_params
        if not p["scaling"]:
            return None
        return TensorScaling(p["multipliers"].get("scaling"), p["bounds"]["feature_bounds"],
                             p["bounds"]["target_bounds"])

    def _set_fitted(self, fit):
        """Fitted attributes from the server state and, in-process, the client states.

        On a distributed engine (``result.client_states is None``) the
        per-client attributes are ``None``: the personalized parts stay on
        the sites.
        """
        result, setup, labels, algorithm = fit.result, fit.setup, fit.labels, fit.algorithm
        params = self._fit_params
        self._set_shapes(setup)
        server = dict(zip(algorithm.phases, result.server_state.states))
        init, one = server.get("init"), server["stage_one"]
        self._set_ranges(algorithm.scaling, server.get("scale"))
        self.shared_coef_ = self._raw_coef(one["coef"])
        self.core_ = self._raw_coef(one["core"])
        self.factors_ = one["factors"]
        self.grad_norm_ = np.array(one["grad_norm"])
        self.rank_ = tuple(int(r) for r in one["core"].shape)
        q = int(np.prod(self.output_shape_)) if self.output_shape_ else 1
        shared_intercept = np.zeros(q)
        if params["fit_intercept"] and not params["pairs"]:
            # the pooled means: the set-up's sums, or a private fit's noisy ones
            means = server["centre"] if params["centring"] else setup
            shared_intercept = (np.asarray(means["y_mean"], dtype=float)
                                - np.reshape(one["coef"], (q, -1))
                                @ np.asarray(means["x_mean"], dtype=float))
        self.shared_intercept_ = self._intercept_layout(
            self._raw_intercept(shared_intercept, self.shared_coef_))
        self.local_ranks_ = {} if init is None else init["local_ranks"]
        self.init_client_ = -1 if init is None else int(init["k_star"])
        self._set_client_attributes(result.client_states, result.participation)
        self.privacy_spent_ = self._privacy_report(params)
        self.clients_ = labels
        self.communication_ = result.ledger

    # -- raw units of a privately scaled fit ----------------------------------------

    def _set_ranges(self, scaling, broadcast):
        """``feature_range_`` and ``target_range_``: the ranges the entries were scaled by."""
        self.feature_range_ = self.target_range_ = None
        if scaling is None:
            return
        ranges = scaling.ranges(broadcast)
        (cx, hx), (cy, hy) = ranges["x"], ranges["y"]
        self.feature_range_ = (cx - hx, cx + hx)
        self.target_range_ = (cy - hy, cy + hy)

    def _raw_coef(self, coef):
        """A coefficient (or core) tensor of the scaled space in raw units.

        Entries were fitted as ``y' = (y - c_y) s / h_y`` against ``x' = (x - c_x) s /
        h_x`` (``s = RANGE_SD``), so the raw tensor is ``A' h_y / h_x``: one number per
        tensor, which keeps the Tucker rank and factors.
        """
        if getattr(self, "feature_range_", None) is None:
            return coef
        (lo_x, hi_x), (lo_y, hi_y) = self.feature_range_, self.target_range_
        return np.asarray(coef) * ((hi_y - lo_y) / (hi_x - lo_x))

    def _raw_intercept(self, intercept, raw_coef):
        """Intercepts ``(..., q)`` of the scaled space in raw units, given the raw tensors
        ``(..., *coef_shape)``: ``c_y + b' h_y / s - <A, c_x 1>``."""
        if getattr(self, "feature_range_", None) is None:
            return intercept
        intercept = np.asarray(intercept, dtype=float)
        (lo_x, hi_x), (lo_y, hi_y) = self.feature_range_, self.target_range_
        sums = np.reshape(raw_coef, intercept.shape + (-1,)).sum(axis=-1)
        return (0.5 * (lo_y + hi_y) + intercept * (0.5 * (hi_y - lo_y) / RANGE_SD)
                - sums * (0.5 * (lo_x + hi_x)))

    def _predict_with(self, Xm, coef, intercept=None):
        # a scaled fit saw its entries clipped to the range: so does a prediction
        if getattr(self, "feature_range_", None) is not None:
            Xm = np.clip(Xm, *self.feature_range_)
        return super()._predict_with(Xm, coef, intercept)

    def _privacy_claim(self):
        """``privacy_spent_``'s epsilon and delta and the noise multiplier of a private
        fit, from the parameters; ``None`` without noise (see ``FederatedEstimator``)."""
        p = self._fit_params
        if p["epsilon"] is None:
            return None
        spent = _privacy_spent(p["epsilon"], p["delta"], p["n_releases"], p["accountant"],
                               p["groups"])
        void = bool(p["outside"])  # privacy_mode="paper" with data-chosen inputs: no guarantee
        return {"epsilon": math.inf if void else float(spent["epsilon"]),
                "delta": 0.0 if void else float(spent["delta"]),
                "noise_multiplier": float(spent["noise_multiplier"])}

    def _privacy_report(self, params):
        """``privacy_spent_``: the guarantee of everything released, or none."""
        spent = dict(_privacy_spent(params["epsilon"], params["delta"], params["n_releases"],
                                    params["accountant"], params["groups"]))
        spent["releases"] = [dict(r) for r in spent["releases"]]  # the cache's stay intact
        spent["mode"] = self.privacy_mode
        if params["epsilon"] is None:
            spent.update(strict=False, covers="nothing: no noise was added", outside=[])
            return spent
        moment = params["init_mode"] == "moment"
        released = (("its noisy histograms of its X and y entries (the private scaling), "
                     if params["scaling"] == "histogram" else "")
                    + f"each client's {params['n_rounds']} Stage-I gradients"
                    + (" and its initial clipped moment" if moment else "")
                    + (" and its sums of clipped X and y rows (the private means of "
                       "fit_intercept)" if params["centring"] else ""))
        outside = list(params["outside"])
        spent["outside"] = outside
        spent["strict"] = not outside
        short = self._shortfall(spent, params)
        if not outside:
            spent["covers"] = (
                f"everything a client releases: {released} (Gaussian mechanism, "
                "L2 sensitivity 2 tau_e tau_x / n_k each"
                + (", 2 min(tau_grad, tau_e tau_x) / n_k for the gradients"
                   if self._tau_grad({"tau_e": 1.0, "tau_x": 1.0}) is not None else "")
                + ("; 2 intercept_tau_x and 2 intercept_tau_y for the sums"
                   if params["centring"] else "")
                + ("; 2 for the histograms, each row weighing 1 in each"
                   if params["scaling"] == "histogram" else "") + "); its row count is public")
            if short:
                warnings.warn(short + " privacy_spent_['epsilon'] reports it.", UserWarning,
                              stacklevel=user_stacklevel())
            return spent
        warnings.warn(
            f"privacy_mode='paper' with epsilon={self.epsilon!r}: no differential-privacy "
            "guarantee holds, because " + "; ".join(outside)
            + ". privacy_spent_['epsilon'] is inf; what the noisy releases alone would "
            "guarantee is privacy_spent_['epsilon_nominal']."
            + (" " + short if short else ""), UserWarning, stacklevel=user_stacklevel())
        for key in ("epsilon", "delta", "epsilon_exact", "epsilon_rdp"):
            spent[f"{key}_nominal"] = spent[key]
        spent.update(epsilon=math.inf, delta=0.0, epsilon_exact=math.inf, epsilon_rdp=math.inf)
        spent["covers"] = (
            f"nothing: the noise of {released} is calibrated to the nominal budget, but "
            "the releases listed in 'outside' void the guarantee")
        return spent

    def _shortfall(self, spent, params):
        """The warning text when the paper's calibration spends more than ``epsilon``, or ''.

        The classical Gaussian calibration is proven only for a per-release epsilon
        below 1 (the paper's Sec. 4.3 uses it at any epsilon); beyond it the
        releases may be (epsilon, delta)-DP only for a larger epsilon.
        """
        if spent["epsilon"] <= params["epsilon"]:
            return ""
        n = params["n_releases"]
        return (
            f"accountant='paper' with epsilon={self.epsilon!r}, delta={self.delta!r}: the "
            "classical Gaussian calibration is proven only for a per-release epsilon / "
            f"n_releases < 1 (here {params['epsilon'] / n:.3g}) and falls short of the "
            f"budget: the noise of the {n} releases is exactly "
            f"({spent['epsilon']:.6g}, {params['delta']:g})-DP (analytic Gaussian "
            "mechanism). Pass accountant='pld' (or 'rdp') for noise calibrated to the budget."
        )

    def _set_client_attributes(self, states, participation=None):
        """Per-client attributes from the clients' final states (``None``: off the sites).

        ``participation`` (rounds x clients, the engine's) places each client's
        Stage-I values in the rounds it answered (NaN in the others); without
        it every client answered every round.
        """
        self.deviations_ = self.coef_ = self.penalty_ = self.intercept_ = None
        self.noise_std_ = self.tau_x_ = self.tau_e_ = None
        if states is None:
            return
        # the last two phases are always Stage I and Stage II
        one = [c.states[-2] for c in states]
        two = [c.states[-1] for c in states]
        self.deviations_ = self._raw_coef(np.stack([c["deviation"] for c in two]))
        self.coef_ = self.shared_coef_[None] + self.deviations_
        self.penalty_ = np.array([c["omega"] for c in two])
        self.intercept_ = self._intercept_layout(
            self._raw_intercept(np.stack([c["intercept"] for c in two]), self.coef_))
        n_rounds = len(self.grad_norm_)
        if participation is None:
            asked = np.ones((n_rounds, len(states)), dtype=bool)
        else:  # Stage I's rounds are the last ones (Stage II sends nothing)
            asked = np.asarray(participation, dtype=bool)[-n_rounds:]
        self.noise_std_ = np.full((len(states), n_rounds), np.nan)
        self.tau_e_ = np.full((len(states), n_rounds), np.nan)
        self.tau_x_ = np.full(len(states), np.nan)
        for k, c in enumerate(one):
            if c is None:  # never asked in Stage I
                continue
            self.tau_x_[k] = c["tau_x"]
            rounds = np.flatnonzero(asked[:, k])[:len(c["sigma"])]
            self.noise_std_[k, rounds] = c["sigma"]
            self.tau_e_[k, rounds] = c["tau_e"]

    def _with_site_state(self, label, state):
        """This fitted model with one site's deviation (see ``skfed.federated.flower``)."""
        site = copy.deepcopy(self)
        site.clients_ = np.array([label])
        site._set_client_attributes([state])
        return site

    # -- fitting ------------------------------------------------------------------

    # fit is FederatedEstimator's: A_0 by federated (private) rounds, then each client's
    # B_k locally; with cv, step_size and alpha are first chosen by the paper's V-fold
    # criterion and the final fit runs a copy with the chosen values

    def _run_federation(self, X, y, groups):
        self.cv_results_, self.best_params_ = None, None
        if self.cv is None:
            return super()._run_federation(X, y, groups)
        # one seed for the folds and every refit, also when random_state is None
        entropy = seed_entropy(self.random_state)
        self._cross_validate(X, y, groups, self._fit_params, entropy)
        tuned = self._tuned(random_state=entropy, **self.best_params_)
        return super(PersonalizedTensorRegressor, tuned)._run_federation(X, y, groups)

    def _tuned(self, **params):
        """A copy without ``cv`` (and with ``params``) that fits rows validated by ``self``."""
        est = clone(self).set_params(cv=None, **params)
        for name in ("tensor_shape_", "output_shape_", "coef_shape_", "_y_layout",
                     "n_features_in_"):
            setattr(est, name, getattr(self, name))
        est._check_params()
        return est

    def _cross_validate(self, Xm, Ym, groups, params, entropy):
        """The paper's V-fold criterion over ``param_grid``; sets ``cv_results_``."""
        V = int(self.cv)
        federation = Federation.from_arrays(Xm, None, groups)
        if federation.n_samples.min() < V:
            k = int(np.argmin(federation.n_samples))
            raise ValueError(
                f"cv={V} folds need at least {V} rows per client, but client "
                f"{federation.labels[k]!r} has {int(federation.n_samples[k])} (cv)."
            )
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(97,)))
        # folds aligned across clients: fold v of client k is part v of a permutation
        client = np.empty(Xm.shape[0], dtype=np.int64)
        fold = np.empty(Xm.shape[0], dtype=np.int64)
        for k, rows in enumerate(federation.row_index):
            client[rows] = k
            for v, part in enumerate(np.array_split(rng.permutation(rows.size), V)):
                fold[rows[part]] = v
        steps = params["grid"].get("step_size", [params["step_size"]])
        alphas = params["grid"].get("alpha", [params["alpha"]])
        errors = np.zeros((len(steps), len(alphas)))
        for v in range(V):
            train, val = fold != v, np.flatnonzero(fold == v)
            for i, step in enumerate(steps):
                for j, alpha in enumerate(alphas):
                    # every client keeps >= 1 training row, so client indices are kept
                    est = self._tuned(step_size=step, alpha=alpha, random_state=entropy)
                    est._set_fitted(fit_federated(est, Xm[train], Ym[train], client[train]))
                    sse = 0.0
                    for k, coef in enumerate(est.coef_):
                        rows = val[client[val] == k]
                        pred = est._predict_with(Xm[rows], coef, est._intercept_for_client(k))
                        sse += np.sum((Ym[rows] - pred) ** 2)
                    errors[i, j] += sse / val.size / V
        i, j = np.unravel_index(np.argmin(errors), errors.shape)
        self.cv_results_ = {
            "step_size": np.repeat(steps, len(alphas)),
            "alpha": np.tile(alphas, len(steps)),
            "mean_validation_error": errors.ravel(),
        }
        self.best_params_ = {"step_size": steps[i] if isinstance(steps[i], str)
                             else float(steps[i]), "alpha": float(alphas[j])}

    # -- prediction -----------------------------------------------------------------

    def _coef_for_client(self, k):
        if k < 0:
            return self.shared_coef_
        if self.coef_ is None:
            raise ValueError(
                f"no personalized coefficients for client {self.clients_[k]!r}: the model "
                "was fitted on a distributed engine, where the personalized parts stay on "
                "the sites (skfed.federated.flower.site_model); predict with groups=None for "
                "the shared tensor A_0 (groups)."
            )
        return self.coef_[k]

    def _intercept_for_client(self, k):
        if k < 0:
            return self.shared_intercept_
        if self.intercept_ is None:
            return self._coef_for_client(k)  # raises the distributed-engine error
        return self.intercept_[k]

    def predict_shared(self, X):
        """Predict with the shared tensor ``A_0`` alone (Fed-Common).

        Parameters
        ----------
        %(X_tensor)s

        Returns
        -------
        y_pred : ndarray
            ``<A_0, X>`` plus ``shared_intercept_`` for every row.
        """
        return self.predict(X, groups=None)
