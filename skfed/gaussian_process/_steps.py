"""Client and server steps of pFedHGP on :mod:`skfed.federated` (paper Alg. 1).

Round 0 is a set-up round: each client sends its row count and, if it has
at least ``MIN_ROWS_MOMENTS`` rows and each column no or at least that many
nonzero values (:mod:`skfed.federated._release`), the sum and the sum of squares of its
targets (for ``normalize_y``) and of each input feature (to scale ``X`` and
place the global inducing inputs, unless ``input_bounds`` gives their box);
never a minimum, maximum or single row (``doc/releases.md``). The following rounds are
the paper's block-coordinate rounds (broadcast ``phase`` 1; ``phase`` 2 marks
the last round when the clients release their population summaries, see
``release_population``). What a training round computes is the optimizer's
(:mod:`._optimizers`): ``optimizer="paper"`` (:class:`~._optimizers.PaperAdam`,
the paper's Adam steps and gradient messages) or ``optimizer="cavi"``
(:class:`~._optimizers.ClosedForm`, closed-form blocks and sufficient
statistics); the steps here call it.

Raw rows, ``q(delta_i)``, ``q(u_i)`` and the local kernel stay on the client,
except that with ``release_population`` each client adds its local kernel
hyperparameters to its last message (for the population prediction).
"""

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..federated import FederatedAlgorithm
from ..federated._release import MIN_ROWS_MOMENTS, too_few_rows_warning
from ._adam import adam_init
from ._closed_form import global_basis_small
from ._elbo import client_terms, global_basis, local_basis, softplus, softplus_inv
from ._linalg import tril_pack, tril_unpack
from ._optimizers import LOCAL_HYPER, ClosedForm, PaperAdam
from ._random_effects import INITIAL_VARIANCE, effects_design, effects_q, n_effects
from ._setup import (
    check_pooled_scale, check_setup_scale, cross_summary, farthest_point_rows, input_setup,
    input_summary, linear_mean, row_shift, target_summary,
)
from ._site_trend import site_trend_design, site_trend_fit

# broadcast entries that are not global parameters
BROADCAST_SCALARS = ("phase", "y_shift", "y_scale", "y_coef", "z_scale", "x_shift", "x_scale",
                     "last", "joint_mean")
TRIL_KEYS = ("Lg",)
GLOBAL_KERNEL = ("Zg", "ls_g", "var_g")  # the parameters a global basis depends on
# rounds over which the ELBO change is measured for ``tol``: in optimizer="cavi" the
# global kernel moves every other round, so a window of one round could see a still round
CONVERGENCE_WINDOW = 5


def _param_key(p):
    """Shape and bytes of a float parameter (the common float64 array without a copy)."""
    if type(p) is np.ndarray and p.dtype == np.float64:
        return p.shape, p.tobytes()
    p = np.asarray(p, dtype=float)
    return p.shape, p.tobytes()


class BasisCache:
    """A client's last global and local bases, reused while their kernel stays put.

    A round starts with the local kernel the previous round ended with, and
    in ``optimizer="cavi"`` the global kernel moves only every other round:
    forming those bases again would repeat the round's largest kernel work.
    Entries are keyed by the exact kernel parameters, so a reused basis is
    the one that would be formed. The cache holds ``O(n M)`` numbers per
    client; it is dropped when the state is pickled (a Flower site stores its
    state pickled), so it never travels or bloats a stored state.
    """

    def __init__(self):
        self._store = {}

    def get(self, name, params, build):
        """The basis ``name`` for ``params`` (a list of arrays); ``build()`` on a miss.

        Parameters match if their shapes and bytes are equal (a ``-0.0`` for a
        ``0.0`` only costs a rebuild).
        """
        return self.get_keyed(name, tuple(_param_key(p) for p in params), build)

    def get_keyed(self, name, key, build):
        """:meth:`get` with the key already formed (``_param_key`` of each parameter)."""
        hit = self._store.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = build()
        self._store[name] = (key, value)
        return value

    def put(self, name, params, value):
        """Keep ``value`` as the basis ``name`` for ``params`` (formed elsewhere)."""
        self._store[name] = (tuple(_param_key(p) for p in params), value)

    def targets(self, y, shift, scale):
        """The client's normalized targets ``(y - shift) / scale`` (``shift`` a
        scalar or one value per row, ``scale`` a scalar or one per output), one
        array while ``y`` and the normalization stay the same (bases keep their
        projections of it, see :meth:`Basis.project`)."""
        return self._affine("targets", y, shift, scale)

    def inputs(self, X, shift, scale):
        """The client's scaled inputs ``(X - shift) / scale``, one array while
        ``X`` and the scaling stay the same."""
        return self._affine("inputs", X, shift, scale)

    def _affine(self, name, A, shift, scale):
        shift = np.asarray(shift, dtype=float)
        scale = np.asarray(scale, dtype=float)
        key = (shift.tobytes(), scale.tobytes(), _param_key(A))
        hit = self._store.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = (np.asarray(A, dtype=float) - shift) / scale
        value.flags.writeable = False
        self._store[name] = (key, value)
        return value

    def __reduce__(self):
        return (BasisCache, ())


# the numerical failures of a client step that are reported as client failures
NUMERICAL_ERRORS = (np.linalg.LinAlgError, ArithmeticError)
_ADVICE = ("rescale y and X (normalize_y=True, normalize_X=True, or StandardScaler), "
           "or increase jitter")


def client_failure(exc, label, rnd):
    """A ``FloatingPointError`` naming the client, the round and what to change."""
    return FloatingPointError(
        f"client {label!r}, round {rnd}: the client step failed numerically "
        f"({type(exc).__name__}: {exc}); {_ADVICE}."
    )


def reported_client_failures(step):
    """Wrap a ``client_step``: numerical failures and non-finite messages are
    re-raised as :func:`client_failure` (client, round, advice).

    The client counts its own steps in its state (``"round"``; round 0 is the
    set-up round), since every client takes part in every round.
    """
    @functools.wraps(step)
    def wrapper(self, data, state, broadcast, rng):
        rnd = int(state.get("round", 0))
        try:
            new_state, msg = step(self, data, state, broadcast, rng)
            for k, v in msg.items():
                if type(v) is float:  # most entries: no array round trip
                    finite = math.isfinite(v)
                else:
                    v = np.asarray(v)
                    finite = v.dtype.kind not in "fc" or bool(np.isfinite(v).all())
                if not finite:
                    raise FloatingPointError(f"the message entry {k!r} is not finite")
        except NUMERICAL_ERRORS as exc:
            raise client_failure(exc, data.label, rnd) from exc
        new_state = dict(new_state)
        new_state["round"] = rnd + 1
        return new_state, msg

    return wrapper


def client_inducing_count(X, Mi):
    """A client's number of local inducing inputs: ``Mi`` capped at its distinct rows."""
    return min(int(Mi), np.unique(X, axis=0).shape[0])


# ----------------------------------------------------------------------------
# the algorithm
# ----------------------------------------------------------------------------
@dataclass(frozen=True)
class InitialValues:
    """Starting values of the learned parameters: the estimator's ``init_*``
    (kernel variances: the multi-output model's fixed ones); ``inducing_global``
    is ``Z_g`` in raw input units, or ``None`` to place it in the set-up."""

    lengthscale_global: float = 1.0
    lengthscale_local: float = 1.0
    variance_global: float = 1.0
    variance_local: float = 1.0
    phi: float = 1.0
    noise: float = 0.1
    inducing_global: "np.ndarray | None" = None


class _PFedHGPSteps(FederatedAlgorithm):
    """Hyperparameters of one pFedHGP fit; all state lives in the step values.

    One protocol for the scalar and the multi-output model
    (:class:`._ilmm_steps._IlmmSteps`): the scalar model is the case of one
    latent per component with a unit loading and a learned kernel variance.
    What differs is declared here and overridden there: the flags
    ``learns_kernel_variance`` and ``has_loadings`` (the parameter keys),
    :meth:`latents` (the blocks' leading shape), the bases (``build_global``,
    ``build_local``, :meth:`_jitter`), the client's :meth:`_client_targets`,
    :meth:`_terms` (the ELBO terms, :mod:`._elbo` / :mod:`._ilmm`), the
    set-up's :meth:`_target_setup`, :meth:`_residual_setup` and
    :meth:`_initial_loadings`, the packed covariance factors on the wire and
    the optimizers (``optimizers``, :mod:`._optimizers`): the training round of
    ``optimizer`` is its ``strategy``'s (``client_round``, ``server_round`` and
    its entries of the broadcast).
    """

    # one BLAS thread wherever a step runs (the engine applies it, a Flower site too): the
    # steps are many small (M x M) BLAS calls, where threads only add overhead (tenfold
    # on a busy machine)
    blas_threads = 1
    # how a client forms its bases (the ILMM steps form one per latent)
    build_global = staticmethod(global_basis)
    build_local = staticmethod(local_basis)
    #: the strategy of each optimizer (:mod:`._optimizers`)
    optimizers = {"paper": PaperAdam, "cavi": ClosedForm}

    def __init__(self, cfg, *, optimizer, n_inducing_global, n_inducing_local, init,
                 local_steps, local_lr, server_lr, normalize_y, share_local_hypers=False,
                 server_iterations=10, n_rounds=None, release_population=False,
                 normalize_X=False, joint_mean=False, input_bounds=None, tol=None,
                 mean_function="constant", site_trend=False, random_effects=None):
        self.cfg = cfg
        # each client's random intercept (and slopes), a block of q learned with the
        # GP blocks; its covariance Sigma by the server (._random_effects)
        self.random_effects = random_effects
        # each client's affine deviation (site_trend_fit), fitted once on its own rows
        # in the first training round and kept on the client
        self.site_trend = bool(site_trend)
        # "linear": y's prior mean is a pooled ridge fit on the inputs (linear_mean)
        self.mean_function = mean_function
        self.optimizer = optimizer
        self.strategy = self.optimizers[optimizer](self)  # the optimizer's round
        self.M = (n_inducing_global if init.inducing_global is None
                  else init.inducing_global.shape[0])
        self.Mi = n_inducing_local
        self.init = init  # InitialValues
        self.local_steps = local_steps
        self.local_lr = local_lr
        self.server_lr = server_lr
        self.normalize_y = normalize_y
        self.normalize_X = normalize_X
        # the box of the initial Z_g in raw input units, (lower, upper) per feature, or None
        self.input_bounds = input_bounds
        self.share_local_hypers = share_local_hypers
        self.server_iterations = server_iterations
        self.n_rounds = np.inf if n_rounds is None else n_rounds
        # stop once the ELBO per row changed by at most tol over CONVERGENCE_WINDOW
        # rounds (None: run n_rounds); see _converging
        self.tol = tol
        # in the last round each client adds the summaries a new client's prior needs
        # (population_release); the server keeps them (state["released"])
        self.release_population = release_population
        # set m_g jointly with the clients' means, where the optimizer can
        # (ClosedForm.server_round; it differs from the blockwise step only if there are
        # client blocks)
        self.joint_mean = (bool(joint_mean) and self.strategy.joint_mean and cfg.use_global
                           and (cfg.use_deviation or cfg.use_local))
        # a client with fewer distinct rows than n_inducing_local gets fewer local
        # inducing inputs (client_inducing_count)
        self.min_samples_per_client = 1

    # --- parameter bookkeeping ------------------------------------------------
    @property
    def n_ls(self):
        return self.cfg.n_features if self.cfg.ard else 1

    #: whether the kernel variances are learned (``var_g``, ``var_l``) and the
    #: blocks carry output loadings (``Bg``, ``Bd``, ``Bl``): the multi-output model
    #: fixes the variances and learns loadings
    learns_kernel_variance = True
    has_loadings = False

    def global_keys(self):
        cfg = self.cfg
        keys = ["noise"]
        if cfg.global_basis:
            keys += (["ls_g"] + ["var_g"] * self.learns_kernel_variance
                     + ["Zg"] * cfg.learn_inducing)
        if cfg.use_deviation:
            keys.append("phi")
        if cfg.use_global:
            keys += ["mg", "Lg"] + ["Bg"] * self.has_loadings
        return keys

    def local_keys(self, hyper_only=False):
        cfg = self.cfg
        keys = []
        if cfg.use_local:
            keys += (["ls_l"] + ["var_l"] * self.learns_kernel_variance
                     + ["Zl"] * cfg.learn_inducing)
        if hyper_only:
            return keys
        if cfg.use_deviation:
            keys += ["md", "Ld"] + ["Bd"] * self.has_loadings
        if cfg.use_local:
            keys += ["mu", "Lu"] + ["Bl"] * self.has_loadings
        return keys

    # --- the global block on the wire (the multi-output model overrides these two) ---
    def pack_tril(self, L):
        """A covariance factor of the global block as sent: its packed lower triangle."""
        return tril_pack(L)

    def unpack_tril(self, v):
        return tril_unpack(np.asarray(v, dtype=float), self.M)

    def pack_global(self, g):
        """The broadcast: global parameters (``Lg`` packed, :meth:`pack_tril`)."""
        return {k: (self.pack_tril(v) if k in TRIL_KEYS else np.asarray(v, dtype=float))
                for k, v in g.items()}

    def unpack_global(self, b):
        g = {}
        for k, v in b.items():
            if k in TRIL_KEYS:
                g[k] = self.unpack_tril(v)
            elif k in BROADCAST_SCALARS or k in LOCAL_HYPER:
                continue
            else:
                g[k] = np.array(v, dtype=float)
        return g

    def broadcast_globals(self, broadcast):
        """The global parameters of ``broadcast``, unpacked once for all clients of a round.

        The engine hands one broadcast object to every client of a round, so
        the unpacked dict is kept with it (its arrays read-only: every client
        reads them); a new broadcast object replaces it. Not pickled.
        """
        last = self.__dict__.get("_last_broadcast")
        if last is not None and last[0] is broadcast:
            return last[1]
        g = self.unpack_global(broadcast)
        for v in g.values():
            v.flags.writeable = False
        self._last_broadcast = (broadcast, g)
        return g

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_last_broadcast", None)
        state.pop("_global_key", None)
        return state

    # --- client ----------------------------------------------------------------
    def latents(self, component):
        """The leading shape of a component's blocks (``"global"`` for the global and
        deviation blocks, ``"local"``): ``()`` here, one block per latent in the
        multi-output model."""
        return ()

    def _blocks(self, component, m):
        """The starting ``q`` of a component's ``m`` whitened inducing values: zero
        means and identity covariance factors."""
        lead = self.latents(component)
        return np.zeros(lead + (m,)), np.broadcast_to(np.eye(m), lead + (m, m)).copy()

    def _kernel_init(self, out, component, lengthscale, variance):
        """A component's kernel hyperparameters as softplus pre-images, into ``out``."""
        suffix = "_g" if component == "global" else "_l"
        out["ls" + suffix] = np.full(self.latents(component) + (self.n_ls,),
                                     softplus_inv(lengthscale))
        if self.learns_kernel_variance:
            out["var" + suffix] = np.asarray(softplus_inv(variance))

    def client_init(self, data, rng):
        cfg, loc = self.cfg, {}
        if cfg.use_local:
            Mi = client_inducing_count(data.X, self.Mi)
            # raw units: scaled with the set-up's input scaling in the first round
            loc["Zl"] = farthest_point_rows(data.X, Mi)
            self._kernel_init(loc, "local", self.init.lengthscale_local,
                              self.init.variance_local)
            loc["mu"], loc["Lu"] = self._blocks("local", Mi)
        if cfg.use_deviation:
            loc["md"], loc["Ld"] = self._blocks("global", self.M)
        # the multi-output loadings wait for the set-up's normalization (_client_targets)
        return {"loc": loc, "adam": None, "jitter": 0.0, "cache": BasisCache(),
                "zl_raw": cfg.use_local}

    def client_inputs(self, data, state, broadcast, loc):
        """The client's scaled inputs (cached) and its ``Z_i`` scaled on the first round."""
        cache = state.get("cache") or BasisCache()
        shift = broadcast.get("x_shift")
        X = data.X if shift is None else cache.inputs(data.X, shift, broadcast["x_scale"])
        if state.get("zl_raw") and shift is not None:
            loc["Zl"] = (loc["Zl"] - np.asarray(shift)) / np.asarray(broadcast["x_scale"])
        return X, cache

    def _global_basis(self, X, g, cache, small=False):
        """The client's global basis at the broadcast parameters (from ``cache`` if unchanged).

        The cache key is formed once per :meth:`broadcast_globals` dict (the same
        object, with read-only arrays, for every client of a round). A client whose
        round is one call (``small``) forms it with numba (``global_basis_small``)
        and keeps it under its own name.
        """
        params = [g[k] for k in GLOBAL_KERNEL if k in g]
        last = self.__dict__.get("_global_key")
        if last is None or last[0] is not g:
            last = (g, tuple(_param_key(p) for p in params))
            if all(isinstance(p, np.ndarray) and not p.flags.writeable for p in params):
                self._global_key = last  # only if no one can change the arrays under it
        if small:
            return cache.get_keyed("global_small", last[1],
                                   lambda: global_basis_small(X, g, self.cfg))
        return cache.get_keyed("global", last[1], lambda: self.build_global(X, g, self.cfg))

    def _local_basis(self, X, loc, cache):
        return cache.get("local", [loc[k] for k in LOCAL_HYPER if k in loc],
                         lambda: self.build_local(X, loc, self.cfg))

    @property
    def client_step_draws(self):
        """False: the client step below never draws from its ``rng`` (so the engine
        need not build the stream); a subclass that overrides it may draw."""
        return type(self).client_step is not _PFedHGPSteps.client_step

    @reported_client_failures
    def client_step(self, data, state, broadcast, rng):
        if int(broadcast["phase"]) == 0:
            check_setup_scale(data.X, data.y, data.label)
            return state, self.setup_message(data)
        g = self.broadcast_globals(broadcast)
        loc = dict(state["loc"])
        X, cache = self.client_inputs(data, state, broadcast, loc)
        zscale = {"Zl": np.asarray(broadcast["z_scale"])}
        shared = self.shared_local_keys() if self.share_local_hypers else ()
        if shared and shared[0] in broadcast:
            for k in shared:
                loc[k] = np.array(broadcast[k], dtype=float)
        small = self.strategy.fuses_round(X, loc, g)
        gb = self._global_basis(X, g, cache, small) if self.cfg.global_basis else None
        effects = None
        if self.random_effects:
            # the first training round fits the GP blocks alone (b_i = 0): the noise is
            # still at its small start, and b_i would take each site's whole offset
            if loc.get("re_started", False):
                effects = self._site_effects(data, X, g, loc, gb, cache, broadcast)
            loc["re_started"] = True
        y = self._client_targets(data, X, broadcast, loc, cache, rng)
        jit = self._jitter(gb)
        loc, adam, jit_l, msg = self.strategy.client_round(X, y, g, loc, gb, state["adam"],
                                                           zscale, cache, broadcast, small)
        if effects is not None:  # the random effects' ELBO terms and E[b b^T]
            msg["c"] = msg["c"] + effects[0]
            msg["kl_u"] = msg["kl_u"] + effects[1]
            msg["re_moment"], msg["re_m"] = effects[2], effects[3]
        if self.share_local_hypers:
            msg.update({k: loc[k] for k in shared})
        if int(broadcast["phase"]) == 2:
            msg.update(self.population_release(loc))
        jit = max(jit, jit_l, state["jitter"])
        msg["jitter"] = jit
        return {"loc": loc, "adam": adam, "jitter": jit, "cache": cache}, msg

    def _site_effects(self, data, X, g, loc, gb, cache, broadcast):
        """The client's ``q(b_i)`` given its GP blocks (:func:`._random_effects.effects_q`),
        into ``loc``; returns its ELBO terms ``(trace, kl)`` and ``E[b b^T]``.

        The GP blocks' means are those of the client's last round with the
        broadcast ``m_g`` (coordinate ascent: the GP blocks then follow this ``b``).
        """
        cfg = self.cfg
        Z = effects_design(X, self.random_effects)
        scale = float(broadcast["y_scale"])
        r = (np.asarray(data.y, dtype=float) - row_shift(X, broadcast)) / scale
        if cfg.global_basis:
            mbar = np.zeros(gb.W.shape[0])
            if cfg.use_global:
                mbar += g["mg"]
            if cfg.use_deviation:
                mbar += loc["md"]
            r = r - gb.W.T @ mbar
        if cfg.use_local:
            r = r - self._local_basis(X, loc, cache).W.T @ loc["mu"]
        m, S, trace, kl = effects_q(Z, r, np.asarray(broadcast["re_cov"], dtype=float),
                                    float(softplus(g["noise"])))
        loc["re_mean"], loc["re_cov"] = m, S
        return trace, kl, np.outer(m, m) + S, m

    # --- the client's hooks (the multi-output model overrides these) ---------------
    def _client_targets(self, data, X, broadcast, loc, cache, rng):
        """The client's normalized targets; with ``site_trend`` its affine deviation
        is fitted on the first training round and kept in ``loc``; with
        ``random_effects`` its current ``E[z^T b_i]`` is taken off."""
        shift = row_shift(X, broadcast)
        if "re_mean" in loc:
            Z = effects_design(X, self.random_effects)
            shift = shift + float(broadcast["y_scale"]) * (Z @ loc["re_mean"])
        if self.site_trend:
            scale = float(broadcast["y_scale"])
            if "site_coef" not in loc:
                loc["site_coef"], loc["site_cov"] = site_trend_fit(
                    X, (np.asarray(data.y, dtype=float) - shift) / scale)
            shift = shift + scale * (site_trend_design(X) @ loc["site_coef"])
        return cache.targets(data.y, shift, broadcast["y_scale"])

    def shared_local_keys(self):
        """The local kernel hyperparameters pooled under ``share_local_hypers``."""
        return ["ls_l"] + ["var_l"] * self.learns_kernel_variance

    def _terms(self, X, y, g, loc, gb, lb, **want):
        """The client's ELBO terms and gradients (:func:`._elbo.client_terms`)."""
        return client_terms(X, y, g, loc, self.cfg, gb=gb, lb=lb, **want)

    @staticmethod
    def _jitter(basis):
        """The jitter a basis (or ``None``) needed."""
        return 0.0 if basis is None else basis.jitter

    def wants_input_moments(self):
        """Whether the set-up needs the clients' input sums (to scale ``X``, place ``Z_g``
        or fit the linear mean)."""
        return (bool(self.normalize_X) or self.input_bounds is None
                or self.mean_function == "linear")

    def setup_message(self, data):
        """A client's set-up message: its row count and, if it has enough rows
        (see :mod:`skfed.federated._release`), the sums and sums of squares of
        its targets and (when needed) of its inputs, and for the linear mean the
        cross products ``X^T X`` and ``X^T y``; no single row's value."""
        return {"n": np.int64(data.n_samples), **target_summary(data.y),
                **input_summary(data.X, self.wants_input_moments()),
                **(cross_summary(data.X, data.y) if self.mean_function == "linear" else {})}

    def setup_inputs(self, msgs, rng):
        """``(Zg, z_scale, x_shift, x_scale)`` from the set-up messages (:func:`input_setup`)."""
        return input_setup(msgs, self.normalize_X, self.M, self.init.inducing_global, rng,
                           self.cfg.n_features, self.input_bounds)

    def population_release(self, loc):
        """What a client releases in the last round for the population prediction.

        Its local kernel hyperparameters (softplus pre-images): the server
        takes their median as a new client's local prior.
        """
        if not self.cfg.use_local:
            return {}
        return {"ls_l": loc["ls_l"], "var_l": loc["var_l"]}

    # --- server ----------------------------------------------------------------
    def server_init(self, rng):
        return {"phase": 0}, {"phase": np.int64(0)}

    def _setup(self, messages, rng):
        """The set-up round: the targets' normalization (:meth:`_target_setup`), the
        inputs' scaling and ``Z_g`` (:meth:`setup_inputs`), the linear prior mean
        and the first global block (:meth:`_initial_globals`)."""
        msgs = list(messages.values())
        shift, scale, moments = self._target_setup(msgs)
        Zg, z_scale, x_shift, x_scale = self.setup_inputs(msgs, rng)
        coef = None
        if self.mean_function == "linear":
            shift, coef, var = linear_mean(msgs, x_shift, x_scale, shift)
            scale, moments = self._residual_setup(var, scale, moments)
        g = self._initial_globals(Zg, moments, rng)
        return {"phase": 1, "g": g, "z_scale": z_scale, "round": 0,
                "x_shift": x_shift, "x_scale": x_scale,
                "adam": adam_init(g, self.global_keys()),
                "hyper_adam": None, "elbo": [], "jitter": 0.0,
                "y_shift": shift, "y_scale": scale, "shared": None, "released": None,
                "y_coef": coef, "re_cov": self._initial_effects_cov()}

    def _initial_effects_cov(self):
        """The first ``Sigma`` of the random effects (``None`` without them)."""
        if not self.random_effects:
            return None
        q = n_effects(self.random_effects, self.cfg.n_features)
        return INITIAL_VARIANCE * np.eye(q)

    # --- the server's set-up hooks (the multi-output model overrides these) ---------
    def _target_setup(self, msgs):
        """``(shift, scale, moments)`` of ``y`` from the clients' sums (those with too
        few rows sent none, see :mod:`skfed.federated._release`); ``moments`` is
        what :meth:`_initial_globals` needs (nothing here)."""
        sent = [m for m in msgs if "sum_y" in m]
        n = sum(float(m["n"]) for m in sent)
        s1 = sum(float(m["sum_y"]) for m in sent)
        s2 = sum(float(m["sum_y2"]) for m in sent)
        check_pooled_scale(s2, "y")
        shift, scale = 0.0, 1.0
        if self.normalize_y and not sent:
            too_few_rows_warning("normalize_y", MIN_ROWS_MOMENTS,
                                 "y is left as it is (shift 0, scale 1)")
        elif self.normalize_y:
            shift = s1 / n
            var = max(s2 / n - shift**2, 0.0)
            scale = np.sqrt(var) if var > 0 else 1.0
        return shift, scale, None

    def _residual_setup(self, var, scale, moments):
        """The scale (and moments) from the linear mean's residual variance ``var``."""
        if self.normalize_y and var is not None:
            scale = float(np.sqrt(var)) if var > 0 else 1.0
        return scale, moments

    def _initial_globals(self, Zg, moments, rng):
        """The first global parameters: kernel, ``phi`` and noise at their ``init``
        values, ``q(u_g)`` at its prior (and the loadings, :meth:`_initial_loadings`)."""
        cfg = self.cfg
        g = {"noise": np.asarray(softplus_inv(self.init.noise))}
        if cfg.global_basis:
            g["Zg"] = Zg
            self._kernel_init(g, "global", self.init.lengthscale_global,
                              self.init.variance_global)
        if cfg.use_deviation:
            g["phi"] = np.asarray(softplus_inv(self.init.phi))
        if cfg.use_global:
            g["mg"], g["Lg"] = self._blocks("global", self.M)
            g.update(self._initial_loadings(moments, rng))
        return g

    def _initial_loadings(self, moments, rng):
        return {}  # the scalar model has none

    def _last_round(self, state):
        """Whether the round after ``state`` is the last one: the ``n_rounds``-th, or
        the one after the ELBO converged (:meth:`_converging`)."""
        return state["round"] + 1 >= self.n_rounds or bool(state.get("final", False))

    def _release_round(self, state):
        """Whether the round after ``state`` is the last one and the clients release."""
        return self.release_population and self._last_round(state)

    def _converging(self, state):
        """Whether the ELBO per training row changed by at most ``tol`` over the last
        ``CONVERGENCE_WINDOW`` rounds (never with ``tol=None``).

        The ELBO is that of the normalized targets, so per row it is
        scale-free. The round after is then the last one (population release,
        blockwise ``m_g``, kernel kept), as the ``n_rounds``-th would be.
        """
        elbo = state.get("elbo") or []
        if self.tol is None or len(elbo) <= CONVERGENCE_WINDOW:
            return False
        n = float(state.get("n_rows", 1.0))
        change = abs(elbo[-1] - elbo[-1 - CONVERGENCE_WINDOW])
        return bool(np.isfinite(change) and change <= self.tol * max(n, 1.0))

    def converged(self, server_state):
        # the last round (see _last_round) has been run
        return bool(server_state.get("done", False))

    def _broadcast(self, state):
        b = self.pack_global(state["g"])
        b["phase"] = np.int64(2 if self._release_round(state) else 1)
        b["y_shift"] = np.asarray(state["y_shift"], dtype=float)  # a scalar, or Q values
        b["y_scale"] = np.asarray(state["y_scale"], dtype=float)
        b["z_scale"] = np.asarray(state["z_scale"], dtype=float)
        if state.get("y_coef") is not None:
            b["y_coef"] = np.asarray(state["y_coef"], dtype=float)
        if state.get("re_cov") is not None:
            b["re_cov"] = np.asarray(state["re_cov"], dtype=float)
        if self.normalize_X:
            b["x_shift"] = np.asarray(state["x_shift"], dtype=float)
            b["x_scale"] = np.asarray(state["x_scale"], dtype=float)
        if state.get("shared") is not None:
            b.update(state["shared"])
        b.update(self.strategy.broadcast(state))
        return b

    def kernel_keys(self):
        """The global kernel's parameters among the global keys."""
        return [k for k in ("ls_g", "var_g", "Zg") if k in self.global_keys()]

    def server_step(self, state, messages, rng):
        if state["phase"] == 0:
            state = self._setup(messages, rng)
            # every client's row count (the scale of the ELBO, for tol)
            state["n_rows"] = sum(float(m["n"]) for m in messages.values())
            return state, self._broadcast(state)
        state = dict(state)
        last = self._last_round(state)
        if self._release_round(state):
            # per-client arrays in client-index order (the engine's message order)
            keys = self.population_release_keys()
            state["released"] = {k: np.stack([np.asarray(m[k], dtype=float)
                                              for m in messages.values()]) for k in keys}
        state["jitter"] = max([state["jitter"]] + [float(m["jitter"]) for m in messages.values()])
        # every client's latest value of every entry: a client not heard from in
        # this round (not sampled, or skipped after an error) contributes its last
        # statistics and gradients, as in incremental variational inference (the
        # same sums as the paper's when every client answers)
        replies = dict(state.get("replies") or {})
        for k, m in messages.items():
            replies[k] = {**replies.get(k, {}), **m}
        replies = dict(sorted(replies.items()))
        state["replies"] = replies
        state = self.strategy.server_round(state, replies)
        state["round"] += 1
        if last:
            state["done"] = True
        elif self._converging(state):
            state["final"] = True
        if self.share_local_hypers:
            state["shared"] = self._shared_hypers(replies)
        return state, self._broadcast(state)

    def asks_every_client(self, server_state):
        # the set-up round (normalization and input scaling from every
        # client's summary) and the round of the population release
        return server_state["phase"] == 0 or self._release_round(server_state)

    def population_release_keys(self):
        """Names of the message entries :meth:`population_release` adds."""
        return ["ls_l", "var_l"] if self.cfg.use_local else []

    def _shared_hypers(self, messages):
        """pFedGP: the clients' local kernel hyperparameters, averaged (FedAvg-style)."""
        return {k: np.asarray(np.mean([m[k] for m in messages.values()], axis=0))
                for k in self.shared_local_keys()}

