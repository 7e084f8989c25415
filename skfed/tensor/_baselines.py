"""Baselines of the tensor-regression paper, with the API of PersonalizedTensorRegressor."""

import dataclasses
import numbers
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from ..base import init_defaults, keyword_init, transactional_fit
from ..federated import FederatedAlgorithm
from ..federated._release import MIN_ROWS_MOMENTS, sends_gram, too_few_rows_warning
from ..utils._docstrings import fill_doc
from ..utils._param_validation import positive_int
from ..utils._validation import check_positive_int, check_scale, validate_data
from ._base import (
    TENSOR_CONSTRAINTS, _TensorRegressorBase, check_positive_float, check_shape, resolve_shape,
)
from ._pftr import PersonalizedTensorRegressor
from ._rank import make_feasible, ratio_rank
from ._stages import (
    NUMERICAL_ERRORS,
    SiteData,
    admm_init,
    check_finite_step,
    client_failure,
    fit_deviation,
    local_stage_one,
    prepare_site,
    site_intercept,
)

__all__ = [
    "FedAvgTensorRegressor",
    "FedCommonTensorRegressor",
    "LocalTwoStageTensorRegressor",
    "TensorlyTuckerRegressor",
]


@dataclass(eq=False)
class _LocalTwoStage(FederatedAlgorithm):
    """One round: every client runs the whole two-stage fit on its own rows."""

    # hyperparameters only (FederatedAlgorithm); the whole fit as in the estimator
    coef_shape: tuple
    rank: "tuple | str"
    admm: dict
    rank_scale: float
    max_rank: "int | None"
    step_size: "float | str"
    n_iter: int
    alpha: float
    n_local_iter: int
    scaling: str
    tangent: str
    retraction: str
    send_coef: bool
    fit_intercept: bool = False

    def prepare_client(self, data):
        site = prepare_site(data, self.fit_intercept)
        if not self.send_coef:
            return site
        # the local fit (ADMM, Stage I, the lasso) is a function of the Gram matrix of
        # the rows [1, X, y]: a client too small to hide its rows in it sends no model
        # (skfed.federated._release), checked on the raw rows as the sums
        gram = sends_gram(data.X, data.y)
        if isinstance(site, SiteData):
            return dataclasses.replace(site, gram_releasable=gram)
        return SiteData(X=site.X, y=site.y, sample_weight=site.sample_weight,
                        label=site.label, index=site.index, gram_releasable=gram)

    def client_step(self, data, state, broadcast, rng):
        try:
            return self._local_fit(data)
        except NUMERICAL_ERRORS as exc:
            raise client_failure(exc, data.label, "local", None) from exc

    def _local_fit(self, data):
        q, p = data.y.shape[1], data.X.shape[1]
        A_init, D_init, _ = admm_init(data.X, data.y, **self.admm)
        check_finite_step("the ADMM estimate", A_init, D_init)
        A_init = A_init.reshape(self.coef_shape)
        if isinstance(self.rank, str):
            rank = make_feasible(
                ratio_rank(A_init, data.n_samples, self.rank_scale, self.max_rank),
                self.coef_shape,
            )
        else:
            rank = self.rank
        A0, _, _ = local_stage_one(data.X, data.y, A_init, rank, self.step_size, self.n_iter,
                                   self.tangent, self.retraction)
        R0 = data.y - data.X @ A0.reshape(q, p).T
        B, omega = fit_deviation(data.X, R0, self.alpha, self.n_local_iter, self.scaling)
        check_finite_step("the local fit", A0, B)
        B = B.reshape(self.coef_shape)
        state = {"shared": A0, "deviation": B, "rank": rank, "omega": omega, "init": A_init,
                 "init_deviation": D_init.reshape(self.coef_shape),
                 "intercept": site_intercept(data, A0 + B)}
        message = {"n_samples": np.int64(data.n_samples)}
        if self.send_coef and data.gram_releasable:
            message["coef"] = A0 + B
            # the intercept is mean(y) - <coef, mean(X)>; sends_gram implies sends_sums
            # (a one-row client's intercept would be its y), so it comes with the coef
            message["intercept"] = state["intercept"]
        return state, message

    def server_step(self, state, messages, rng):
        keys = sorted(messages)
        sent = [k for k in keys if "coef" in messages[k]]
        sizes = np.array([float(messages[k]["n_samples"]) for k in keys])
        coefs = [np.asarray(messages[k]["coef"]) for k in sent]
        intercepts = [np.asarray(messages[k]["intercept"]) for k in sent]
        coef_sizes = np.array([float(messages[k]["n_samples"]) for k in sent])
        return {"sizes": sizes, "coefs": coefs, "intercepts": intercepts,
                "coef_sizes": coef_sizes}, {}


@fill_doc
class LocalTwoStageTensorRegressor(_TensorRegressorBase):
    """The paper's single-client benchmark: the two-stage fit on each client alone.

    Each client computes its ADMM preliminary estimate, runs Stage I locally
    (Riemannian gradient descent with the exact tangent projection, no
    clipping or noise, eq. S1) from it, then Stage II (the lasso for its
    deviation). Nothing but row counts is sent. ``predict`` routes rows to
    their client's ``A_{0,k} + B_k``; the population prediction uses the
    ``n_k``-weighted mean of the client tensors (and intercepts).

    Parameters
    ----------
    tensor_shape, output_shape : tuple of int or None, default=None
        As in :class:`PersonalizedTensorRegressor`.
    rank : "auto", int or tuple of int, default="auto"
        Tucker rank of each client's shared part; ``"auto"``: each client's
        own ratio-criterion rank.
    fit_intercept : bool, default=True
        Each client centres its own ``X`` and ``y`` and keeps an intercept
        ``mean(Y_k) - <A_k, mean(X_k)>``; ``False``: the paper's model through
        the origin.
    step_size : float or "auto", default="auto"
        Local Stage-I step (paper scaling: the authors' code's 0.05 is 0.1
        here); ``"auto"``: ``1 / L_k`` with ``L_k = ||X_k^T X_k / n_k||_op``.
    n_iter : int, default=100
        Local Stage-I iterations.
    alpha : float, default=0.035
        Stage-II penalty scale (see ``penalty_scaling``).
    n_local_iter : int, default=30
        Stage-II FISTA iterations.
    penalty_scaling : {"adaptive", "none"}, default="adaptive"
        As in :class:`PersonalizedTensorRegressor` (the authors' single-client
        code uses ``"none"``).
    tangent : {"exact", "retract_gradient"}, default="exact"
        Tangent-space projection or the authors' surrogate.
    retraction : {"st_hosvd", "t_hosvd"}, default="st_hosvd"
        Retraction to the Tucker rank.
    init_lambda, init_alpha, init_zeta, init_rho, init_max_iter
        ADMM initializer parameters (defaults 0.02, 0.005, 0.5, 1.0, 150).
    %(init_unfolding)s
    rank_scale : float, default=1.0
        Ridge-constant scale of the rank criterion.
    max_rank : int or None, default=None
        Largest rank considered by ``rank="auto"``.
    unknown_client : {"global", "error"}, default="global"
        Prediction for unseen clients.
    n_jobs : int or None, default=None
        Clients fitted in parallel threads.

    Attributes
    ----------
    shared_coefs_ : ndarray of shape (n_clients, *coef_shape_)
        Each client's local low-rank part ``A_{0,k}``.
    deviations_ : ndarray of shape (n_clients, *coef_shape_)
        Each client's sparse part ``B_k``.
    coef_ : ndarray of shape (n_clients, *coef_shape_)
        ``A_{0,k} + B_k``.
    intercept_ : ndarray of shape (n_clients,) or (n_clients, *output_shape_)
        Each client's intercept (zeros with ``fit_intercept=False``).
    init_coefs_ : ndarray of shape (n_clients, *coef_shape_)
        ADMM preliminary low-rank estimates.
    init_deviations_ : ndarray of shape (n_clients, *coef_shape_)
        Sparse parts of the ADMM preliminary estimates.
    ranks_ : list of tuple
        Tucker rank used by each client.
    penalty_ : ndarray of shape (n_clients,)
        Stage-II l1 weights ``omega_k``. The per-client attributes above are
        ``None`` when fitted on a distributed engine: they stay on the sites.
    client_weights_ : ndarray of shape (n_clients,)
        Share of the rows of each client.
    clients_ : ndarray of shape (n_clients,)
        Sorted client labels.
    communication_ : Ledger
        Messages exchanged (row counts only).
    tensor_shape_, output_shape_, coef_shape_ : tuple
        Shapes of a covariate, a response (``()`` for a scalar one) and a
        coefficient tensor (``output_shape_ + tensor_shape_``).
    n_features_in_ : int
        Columns of ``X``.
    %(feature_names_in_)s

    Examples
    --------
    >>> from skfed.datasets import make_tensor_regression
    >>> from skfed.tensor import LocalTwoStageTensorRegressor
    >>> X, y, groups = make_tensor_regression(n_clients=2, n_samples=40, tensor_shape=(4, 3),
    ...     output_shape=None, rank=(2, 2), n_nonzero=2, random_state=0)
    >>> model = LocalTwoStageTensorRegressor(tensor_shape=(4, 3), rank=(2, 2), n_iter=20)
    >>> model.fit(X, y, groups=groups).coef_.shape
    (2, 4, 3)
    """

    _send_coef = False

    # PersonalizedTensorRegressor's parameters (and defaults) that the two-stage fit shares
    __init__ = keyword_init({name: default for name, default in
                             init_defaults(PersonalizedTensorRegressor).items()
                             if name in TENSOR_CONSTRAINTS}, n_iter=100)

    _parameter_constraints = {**TENSOR_CONSTRAINTS, "n_iter": [positive_int(0)]}

    # -- the hooks of skfed.federated.FederatedContract (fit is FederatedEstimator's) --

    def _engine_params(self):
        return dict(n_rounds=1, random_state=None, n_jobs=self.n_jobs)

    def _federated_algorithm(self, setup):
        """The one-round local fit, built from the parameters and the set-up summary."""
        tensor_shape = tuple(int(s) for s in setup["tensor_shape"])
        output_shape = tuple(int(s) for s in setup["output_shape"])
        coef_shape = output_shape + tensor_shape
        admm = dict(lam=float(self.init_lambda), omega=float(self.init_alpha),
                    zeta=float(self.init_zeta), rho=float(self.init_rho),
                    max_iter=int(self.init_max_iter),
                    rows=self._init_rows(output_shape, tensor_shape))
        return _LocalTwoStage(
            coef_shape, self._check_rank_param(self.rank, coef_shape), admm,
            self.rank_scale, self.max_rank,
            "auto" if self.step_size == "auto" else float(self.step_size),
            int(self.n_iter), float(self.alpha), int(self.n_local_iter),
            self.penalty_scaling, self.tangent, self.retraction, self._send_coef,
            bool(self.fit_intercept),
        )

    def _set_fitted(self, fit):
        """Fitted attributes; the per-client ones are ``None`` on a distributed engine.

        There the local fits stay on the sites (``result.client_states`` is
        ``None``) and only the row counts reached the server.
        """
        result, setup, labels = fit.result, fit.setup, fit.labels
        self._set_shapes(setup)
        sizes = np.asarray(setup["n_samples"], dtype=float)
        self.client_weights_ = sizes / sizes.sum()
        self.clients_ = labels
        self.communication_ = result.ledger
        states = result.client_states
        names = {"shared_coefs_": "shared", "deviations_": "deviation", "init_coefs_": "init",
                 "init_deviations_": "init_deviation"}
        for attr, key in names.items():
            setattr(self, attr, None if states is None else np.stack([s[key] for s in states]))
        self.coef_ = None if states is None else self.shared_coefs_ + self.deviations_
        self.ranks_ = None if states is None else [tuple(int(r) for r in s["rank"])
                                                   for s in states]
        self.penalty_ = None if states is None else np.array([s["omega"] for s in states])
        self.intercept_ = None if states is None else self._intercept_layout(
            np.stack([s["intercept"] for s in states]))

    def _coef_for_client(self, k):
        if self.coef_ is None:
            raise ValueError(
                "the client fits were not sent: the model was fitted on a distributed "
                "engine, where each site keeps its own; predict on the sites."
            )
        if k >= 0:
            return self.coef_[k]
        return np.tensordot(self.client_weights_, self.coef_, axes=1)

    def _intercept_for_client(self, k):
        if self.intercept_ is None:
            return self._coef_for_client(k)  # raises the distributed-engine error
        if k >= 0:
            return self.intercept_[k]
        return np.tensordot(self.client_weights_, self.intercept_, axes=1)


class FedAvgTensorRegressor(LocalTwoStageTensorRegressor):
    """"Fed-Avg" of the paper's data analysis: the average of local two-stage fits.

    Every client fits :class:`LocalTwoStageTensorRegressor` on its own rows
    and sends its coefficient tensor ``A_{0,k} + B_k`` and intercept once,
    unperturbed (not private); the server averages them (uniformly, as in
    the paper, or by row counts) and every client predicts with the average.
    This is averaging of final local estimates, not FedAvg of gradient
    iterates. The local fit is a function of the Gram matrix of the client's
    rows: a client with fewer than 3 rows, or a column of ``X`` or ``y`` (or
    a product of two columns) nonzero on only one or two of its rows, sends
    its row count only and is left out of the average (``doc/releases.md``).

    Parameters
    ----------
    weights : {"uniform", "n_samples"}, default="uniform"
        Weights of the average.
    **params
        The other parameters are those of :class:`LocalTwoStageTensorRegressor`.

    Attributes
    ----------
    average_coef_ : ndarray of shape coef_shape_
        The averaged tensor of the clients that sent one, used for every prediction.
    average_intercept_ : float or ndarray of shape output_shape_
        The same average of the intercepts of the clients that sent their
        tensor (both 0, with a warning, if there are none).
    shared_coefs_, deviations_, coef_, intercept_, init_coefs_, init_deviations_ : ndarray
        Each client's local fit, as in :class:`LocalTwoStageTensorRegressor`
        (``predict`` does not use ``coef_`` and ``intercept_``).
    ranks_, penalty_, client_weights_, clients_ :
        As in :class:`LocalTwoStageTensorRegressor`.
    communication_ : Ledger
        Messages exchanged: the row counts, and the tensor and intercept of
        each client that sent them.
    tensor_shape_, output_shape_, coef_shape_, n_features_in_, feature_names_in_ :
        As in :class:`LocalTwoStageTensorRegressor`.

    Examples
    --------
    >>> from skfed.datasets import make_tensor_regression
    >>> from skfed.tensor import FedAvgTensorRegressor
    >>> X, y, groups = make_tensor_regression(n_clients=2, n_samples=40, tensor_shape=(4, 3),
    ...     output_shape=None, rank=(2, 2), n_nonzero=2, random_state=0)
    >>> FedAvgTensorRegressor(tensor_shape=(4, 3), rank=(2, 2), n_iter=20).fit(
    ...     X, y, groups=groups).average_coef_.shape
    (4, 3)
    """

    _send_coef = True

    __init__ = keyword_init(init_defaults(LocalTwoStageTensorRegressor), weights="uniform")

    _parameter_constraints = {
        **LocalTwoStageTensorRegressor._parameter_constraints,
        "weights": [StrOptions({"uniform", "n_samples"})],
    }

    def _set_fitted(self, fit):
        """The averaged tensor, from the server state (also on a distributed engine)."""
        super()._set_fitted(fit)
        state = fit.result.server_state
        # the models of the clients that sent one (skfed.federated._release.sends_gram)
        sizes, coefs, intercepts = state["coef_sizes"], state["coefs"], state["intercepts"]
        if not coefs:
            too_few_rows_warning("the average", MIN_ROWS_MOMENTS,
                                 "the average tensor and intercept are taken as 0",
                                 sent="local models")
            q = int(np.prod(self.output_shape_)) if self.output_shape_ else 1
            self.average_coef_ = np.zeros(self.coef_shape_)
            self.average_intercept_ = self._intercept_layout(np.zeros(q))
            return
        w = sizes / sizes.sum() if self.weights == "n_samples" else \
            np.full(len(coefs), 1.0 / len(coefs))
        self.average_coef_ = np.tensordot(w, np.stack(coefs), axes=1)
        self.average_intercept_ = self._intercept_layout(
            np.tensordot(w, np.stack(intercepts), axes=1))

    def _coef_for_client(self, k):
        return self.average_coef_

    def _intercept_for_client(self, k):
        return self.average_intercept_


class FedCommonTensorRegressor(PersonalizedTensorRegressor):
    """"Fed-Common": the shared Stage-I tensor ``A_0`` alone, used for every client.

    Fitted exactly like :class:`PersonalizedTensorRegressor` (same parameters,
    privacy and attributes); ``predict`` ignores the client deviations.

    Examples
    --------
    >>> from skfed.datasets import make_tensor_regression
    >>> from skfed.tensor import FedCommonTensorRegressor
    >>> X, y, groups = make_tensor_regression(n_clients=2, n_samples=40, tensor_shape=(4, 3),
    ...     output_shape=None, rank=(2, 2), n_nonzero=2, random_state=0)
    >>> model = FedCommonTensorRegressor(tensor_shape=(4, 3), rank=(2, 2)).fit(X, y, groups=groups)
    >>> bool((model.predict(X[:3], groups=groups[:3]) == model.predict(X[:3])).all())
    True
    """

    def _coef_for_client(self, k):
        return self.shared_coef_

    def _intercept_for_client(self, k):
        return self.shared_intercept_


class TensorlyTuckerRegressor(RegressorMixin, BaseEstimator):
    """scikit-learn wrapper of ``tensorly.regression.TuckerRegressor``.

    Low-Tucker-rank scalar-on-tensor regression by ridge-regularized
    alternating least squares (random start), with 2-D ``X`` plus
    ``tensor_shape`` so that it works in ``Pipeline``, ``cross_val_score``,
    and inside :class:`skfed.baselines.LocalEstimator` (per client) and
    :class:`skfed.baselines.PooledEstimator` (pooled). Scalar responses only
    (a limitation of tensorly); the intercept comes from centring ``X`` and
    ``y`` (as in ``Ridge``).

    Parameters
    ----------
    tensor_shape : tuple of int or None, default=None
        Shape of one covariate tensor (one entry may be -1); ``None``:
        ``(n_features,)``.
    weight_ranks : int, tuple of int or None, default=None
        Tucker rank of the weight tensor (one per covariate mode); ``None``:
        rank 1 on every mode.
    tol : float, default=1e-6
        Relative change of the weight norm that stops the iterations.
    reg_W : float, default=1.0
        Ridge penalty on the weights.
    n_iter_max : int, default=100
        Maximum number of ALS sweeps.
    fit_intercept : bool, default=True
        Centre ``X`` and ``y`` before the fit and set ``intercept_``;
        ``False``: through the origin.
    random_state : int, RandomState instance or None, default=None
        Seed of the random start.

    Attributes
    ----------
    coef_ : ndarray of shape tensor_shape_
        The fitted weight tensor.
    intercept_ : float
        ``mean(y) - <coef_, mean(X)>`` (0.0 with ``fit_intercept=False``).
    estimator_ : tensorly.regression.TuckerRegressor
        The fitted tensorly model.
    tensor_shape_ : tuple of int
        Shape of a covariate tensor.
    n_features_in_ : int
        Columns of ``X``.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of features seen in ``fit``, when ``X`` has string column names.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.tensor import TensorlyTuckerRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((50, 12))
    >>> y = X @ np.outer([1, 2, 0, 1], [1, 0, -1]).ravel()
    >>> model = TensorlyTuckerRegressor(tensor_shape=(4, 3), weight_ranks=(1, 1), random_state=0)
    >>> round(model.fit(X, y).score(X, y), 3)
    1.0
    """

    def __init__(self, *, tensor_shape=None, weight_ranks=None, tol=1e-6, reg_W=1.0,
                 n_iter_max=100, fit_intercept=True, random_state=None):
        self.tensor_shape = tensor_shape
        self.fit_intercept = fit_intercept
        self.weight_ranks = weight_ranks
        self.tol = tol
        self.reg_W = reg_W
        self.n_iter_max = n_iter_max
        self.random_state = random_state

    @transactional_fit
    def fit(self, X, y):
        """Fit the Tucker-rank weight tensor.

        Parameters
        ----------
        X : array-like of shape (n_samples, prod(tensor_shape))
            Covariate tensors, flattened in C order.
        y : array-like of shape (n_samples,)
            Scalar responses.

        Returns
        -------
        self : TensorlyTuckerRegressor
            The fitted estimator.
        """
        from tensorly.regression import TuckerRegressor

        X, y = validate_data(self, X, y, y_numeric=True)
        check_scale(X, "X")  # overflowing sums of squares: NaN weights otherwise
        check_scale(y, "y")
        shape = check_shape(self.tensor_shape, "tensor_shape")
        shape = (X.shape[1],) if shape is None else resolve_shape(shape, X.shape[1],
                                                                  "tensor_shape", "X")
        self.tensor_shape_ = shape
        if self.weight_ranks is None:
            ranks = (1,) * len(shape)
        elif isinstance(self.weight_ranks, numbers.Integral):
            ranks = (int(self.weight_ranks),) * len(shape)
        else:
            ranks = tuple(self.weight_ranks)
        if len(ranks) != len(shape) or not all(
            isinstance(r, numbers.Integral) and 1 <= r <= n for r, n in zip(ranks, shape)
        ):
            raise ValueError(
                f"weight_ranks must hold {len(shape)} ints in [1, mode size] for tensor "
                f"shape {shape}, got {self.weight_ranks!r}."
            )
        check_positive_float(self.reg_W, "reg_W", allow_zero=True)
        check_positive_float(self.tol, "tol", allow_zero=True)
        check_positive_int(self.n_iter_max, "n_iter_max")
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept must be True or False, got {self.fit_intercept!r}.")
        x_mean = X.mean(axis=0) if self.fit_intercept else np.zeros(X.shape[1])
        y_mean = float(np.mean(y)) if self.fit_intercept else 0.0
        X, y = X - x_mean, y - y_mean
        if len(shape) == 1:  # tensorly needs two modes: add a singleton one
            shape, ranks = shape + (1,), ranks + (1,)
        self.estimator_ = TuckerRegressor(
            weight_ranks=list(ranks), tol=self.tol, reg_W=self.reg_W,
            n_iter_max=self.n_iter_max, random_state=self.random_state, verbose=0,
        ).fit(X.reshape(X.shape[0], *shape), y)
        self.coef_ = np.asarray(self.estimator_.weight_tensor_).reshape(self.tensor_shape_)
        if not np.all(np.isfinite(self.coef_)):  # never a silent NaN prediction
            raise ValueError(
                "tensorly's Tucker regression gave non-finite weights; rescale X and y "
                "(e.g. with StandardScaler) or increase reg_W."
            )
        self.intercept_ = float(y_mean - x_mean @ self.coef_.reshape(-1))
        return self

    def predict(self, X):
        """Predict ``<W, X>``.

        Parameters
        ----------
        X : array-like of shape (n_samples, prod(tensor_shape))
            Covariate tensors.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        return X @ self.coef_.reshape(-1) + self.intercept_
