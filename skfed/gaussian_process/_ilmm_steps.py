"""Federated rounds of the multi-output (ILMM) pFedHGP on :mod:`skfed.federated`.

The same protocol as the scalar :class:`._steps._PFedHGPSteps` (paper Alg. 1)
with the ILMM blocks of :mod:`._ilmm`:

* set-up round: each client sends its row count, its column sums
  ``1^T Y_i`` (Q numbers), its ``Q x Q`` second-moment matrix ``Y_i^T Y_i``
  (packed) and its input ranges. The server standardizes per output (if
  ``normalize_y``), places ``Z_g`` and initializes ``B_g`` from the principal
  directions of the pooled second moments (see :func:`pca_loadings`).
* ``optimizer="paper"``: ``local_steps`` Adam steps on every client block
  (``q(delta_i^(r))``, ``q(u_i^(r))``, ``B_delta_i``, ``B_l_i``, local
  lengthscales, ``Z_i``), then the client sends the gradient of its ELBO terms
  with respect to the global block, ``B_g`` included; the server adds
  ``-grad KL_g`` and takes one Adam step.
* ``optimizer="cavi"``: closed-form ``q`` and loadings on the client (with
  Adam steps on its local kernel), which sends the Gram matrix of its stacked
  global bases, their product with its partial residual, the residual's
  squared norm and a few scalars; the server alternates the closed-form
  ``q(u_g^(r))`` (jointly over latents), ``B_g`` (closed form derived here), ``sigma^2`` and
  ``phi``, and takes an Adam step on the global lengthscales and ``Z_g``
  (:class:`._optimizers.IlmmClosedForm`).

Raw rows, client posteriors, client loadings and local kernels stay on the
clients; with ``release_population`` each client adds its local lengthscales
and the outer products ``b b^T`` of its loading columns to its last message
(for the population prediction).
"""

import numpy as np

from ..federated._release import MIN_ROWS_MOMENTS, too_few_rows_warning
from ._ilmm import IlmmConfig, global_bases, ilmm_terms, local_bases
from ._linalg import tril_pack, tril_unpack
from ._optimizers import IlmmClosedForm, PaperAdam
from ._setup import check_pooled_scale, row_shift
from ._steps import _PFedHGPSteps


def pca_loadings(C, R, n_components, prior_var, rng, perturb=0.1):
    """Loadings whose prior covariance matches a share of the second moments ``C``.

    ``B = V_R diag(sqrt(lambda_R / (n_components * prior_var)))`` from the top
    ``R`` eigenpairs of ``C``: each of the ``n_components`` model components
    starts explaining an equal share of the outputs' second moments along
    their principal directions. A small random perturbation (``perturb``
    times the typical entry) breaks the tie between components that start on
    the same directions and fills latents beyond ``Q``.
    """
    Q = C.shape[0]
    lam, V = np.linalg.eigh(0.5 * (C + C.T))
    lam, V = np.maximum(lam[::-1], 1e-12), V[:, ::-1]
    k = min(R, Q)
    B = np.zeros((Q, R))
    B[:, :k] = V[:, :k] * np.sqrt(lam[:k] / (n_components * prior_var))
    B += perturb * np.sqrt(lam.mean() / (n_components * prior_var)) * rng.standard_normal((Q, R))
    return B


def _pack_stack(L):
    return np.stack([tril_pack(Lr) for Lr in L])


def _outer_stack(B):
    """Packed ``b b^T`` of each column ``b`` of ``B``, shape ``(R, Q (Q + 1) / 2)``."""
    return np.stack([tril_pack(np.outer(b, b)) for b in B.T])


def _unpack_stack(v, m):
    return np.stack([tril_unpack(vr, m) for vr in np.atleast_2d(v)])


class _IlmmSteps(_PFedHGPSteps):
    """Hyperparameters of one multi-output pFedHGP fit (state lives in the step values)."""

    # one basis per latent
    build_global = staticmethod(global_bases)
    build_local = staticmethod(local_bases)
    optimizers = {"paper": PaperAdam, "cavi": IlmmClosedForm}

    def __init__(self, cfg, **kwargs):
        if not isinstance(cfg, IlmmConfig):
            raise TypeError("cfg must be an IlmmConfig")
        super().__init__(cfg, **kwargs)

    # the kernel variances are fixed (the loadings carry the scale); every block
    # has loadings B (global_keys, local_keys)
    learns_kernel_variance = False
    has_loadings = True

    # the global block on the wire: one factor per latent
    def pack_tril(self, L):
        return _pack_stack(L)

    def unpack_tril(self, v):
        return _unpack_stack(np.asarray(v, dtype=float), self.M)

    # --- client ----------------------------------------------------------------
    def latents(self, component):
        return (self.cfg.R_g,) if component == "global" else (self.cfg.R_l,)

    def _init_loadings(self, Y, loc, rng):
        """Set the client's loadings ``Bd``, ``Bl`` in ``loc`` (:func:`pca_loadings`)."""
        cfg = self.cfg
        C = Y.T @ Y / Y.shape[0]
        n_comp = cfg.use_global + cfg.use_deviation + cfg.use_local
        if cfg.use_deviation:
            loc["Bd"] = pca_loadings(C, cfg.R_g, n_comp, self.init.phi * cfg.variance_global, rng)
        if cfg.use_local:
            loc["Bl"] = pca_loadings(C, cfg.R_l, n_comp, cfg.variance_local, rng)

    # the first training round draws the loadings' perturbation (pca_loadings)
    client_step_draws = True

    def _client_targets(self, data, X, broadcast, loc, cache, rng):
        """The client's targets standardized per output; the loadings are set on the
        first training round, from the normalized targets (:meth:`_init_loadings`)."""
        Y = cache.targets(data.y, row_shift(X, broadcast),
                          np.asarray(broadcast["y_scale"], dtype=float))
        if "Bd" not in loc and "Bl" not in loc:
            self._init_loadings(Y, loc, rng)
        return Y

    def _terms(self, X, Y, g, loc, gbs, lbs, **want):
        return ilmm_terms(X, Y, g, loc, self.cfg, gbs=gbs, lbs=lbs, **want)

    @staticmethod
    def _jitter(bases):
        return max(b.jitter for b in bases) if bases else 0.0

    def population_release(self, loc):
        """What a client releases in the last round for the population prediction.

        Per latent ``r``, the outer products ``b b^T`` of its deviation and
        local loading columns (packed lower triangles, ``Pd`` and ``Pl``) and
        its local lengthscales: the server averages the outer products and
        takes the median lengthscale (see :mod:`._predict`).
        """
        cfg, out = self.cfg, {}
        if cfg.use_deviation:
            out["Pd"] = _outer_stack(loc["Bd"])
        if cfg.use_local:
            out["Pl"] = _outer_stack(loc["Bl"])
            out["ls_l"] = loc["ls_l"]
        return out

    def population_release_keys(self):
        return (["Pd"] if self.cfg.use_deviation else []) + \
            (["Pl", "ls_l"] if self.cfg.use_local else [])

    # --- server ----------------------------------------------------------------
    def _target_setup(self, msgs):
        """Per-output ``(shift, scale)`` and the pooled second moments ``C`` about
        the shift in the normalized units (for the initial loadings)."""
        Q = self.cfg.n_outputs
        sent = [m for m in msgs if "sum_y" in m]
        shift, scale = np.zeros(Q), np.ones(Q)
        if not sent:
            too_few_rows_warning("normalize_y and the initial loadings", MIN_ROWS_MOMENTS,
                                 "y is left as it is and the loadings start isotropic")
            return shift, scale, np.eye(Q)
        n = sum(float(m["n"]) for m in sent)
        s1 = sum(np.asarray(m["sum_y"], dtype=float) for m in sent)
        S2 = tril_unpack(sum(np.asarray(m["yty"], dtype=float) for m in sent), Q,
                         symmetric=True)
        check_pooled_scale(S2, "y")
        if self.normalize_y:
            shift = s1 / n
            var = np.maximum(np.diag(S2) / n - shift**2, 0.0)
            scale = np.where(var > 0, np.sqrt(var), 1.0)
        C = (S2 / n - np.outer(shift, s1 / n) - np.outer(s1 / n, shift)
             + np.outer(shift, shift))
        return shift, scale, C / np.outer(scale, scale)

    def _residual_setup(self, V, scale, C):
        if V is None:
            return scale, C
        # the loadings start from the residual second moments
        if self.normalize_y:
            var = np.diag(V)
            scale = np.where(var > 0, np.sqrt(np.maximum(var, 0.0)), 1.0)
        return scale, V / np.outer(scale, scale)

    def _initial_loadings(self, C, rng):
        cfg = self.cfg
        n_comp = cfg.use_global + cfg.use_deviation + cfg.use_local
        return {"Bg": pca_loadings(C, cfg.R_g, n_comp, cfg.variance_global, rng)}

