"""Input handling shared by the tensor regressors: shapes, validation, prediction."""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from ..base import FederatedEstimator, scatter_rows
from ..federated import Federation
from ..utils._docstrings import fill_doc
from ..utils._param_validation import (
    N_JOBS, UNKNOWN_CLIENT, nonnegative_real, positive_int, positive_real,
)
from ..utils._validation import validate_data
from ._stages import check_client_range
from ._tucker import RETRACTIONS, TANGENTS, check_tucker_rank

__all__ = ["TENSOR_CONSTRAINTS", "_TensorRegressorBase", "check_shape", "check_positive_float"]

#: The parameters the tensor regressors share (shapes and ranks: checked against the data).
TENSOR_CONSTRAINTS = {
    "tensor_shape": "no_validation",
    "output_shape": "no_validation",
    "rank": "no_validation",
    "fit_intercept": ["boolean"],
    "step_size": [StrOptions({"auto"}), positive_real()],
    "alpha": [nonnegative_real()],
    "n_local_iter": [positive_int(0)],
    "penalty_scaling": [StrOptions({"adaptive", "none"})],
    "tangent": [StrOptions(set(TANGENTS))],
    "retraction": [StrOptions(set(RETRACTIONS))],
    "init_lambda": [nonnegative_real()],
    "init_alpha": [nonnegative_real()],
    "init_zeta": [positive_real()],
    "init_rho": [positive_real()],
    "init_max_iter": [positive_int()],
    "init_unfolding": [StrOptions({"auto", "response"})],
    "rank_scale": [positive_real()],
    "max_rank": [positive_int(), None],
    "n_jobs": N_JOBS,
    **UNKNOWN_CLIENT,
}

_LAYOUTS = ("scalar", "matrix", "tensor")  # of y: 1-D, 2-D, n-D


def check_shape(shape, name):
    """``None`` or a tuple of positive ints."""
    if shape is None:
        return None
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise ValueError(
            f"{name} must be None or a tuple of positive ints, got {shape!r}."
        ) from None
    if (
        not shape
        or not all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) and (s >= 1 or s == -1)
            for s in shape
        )
        or sum(s == -1 for s in shape) > 1
    ):
        raise ValueError(
            f"{name} must be None or a tuple of positive ints (at most one -1, inferred "
            f"from the number of columns), got {shape!r}."
        )
    return tuple(int(s) for s in shape)


def resolve_shape(shape, size, name, what):
    """Fill a ``-1`` entry of ``shape`` (numpy ``reshape`` rule) and check the size."""
    known = int(np.prod([s for s in shape if s != -1]))
    if -1 in shape:
        if known == 0 or size % known:
            raise ValueError(
                f"{what} has {size} columns, which {name}={shape} cannot reshape "
                f"(not a multiple of {known})."
            )
        shape = tuple(size // known if s == -1 else s for s in shape)
    if int(np.prod(shape)) != size:
        raise ValueError(
            f"{what} has {size} columns but {name}={shape} has {int(np.prod(shape))} "
            f"entries; each row must be one tensor flattened in C order ({name})."
        )
    return shape


def check_positive_float(value, name, *, allow_zero=False, allow_none=False):
    """Return ``value`` as float if it is a finite number > 0 (or >= 0)."""
    if value is None and allow_none:
        return None
    ok = (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and np.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}.")
    return float(value)


def _nd_array(A):
    """Nested lists (or tuples) of more than two levels as the equivalent ndarray.

    An n-D ndarray is accepted as tensor rows; the same data as nested lists
    must be too. Anything else (2-D lists included) is returned as it is, for
    ``validate_data`` to check and name.
    """
    if not isinstance(A, (list, tuple)):
        return A
    try:
        arr = np.asarray(A)
    except (TypeError, ValueError):  # ragged: validate_data names it
        return A
    return arr if arr.ndim > 2 else A


@fill_doc
class _TensorRegressorBase(FederatedEstimator, RegressorMixin, BaseEstimator):
    """Tensor covariates given as 2-D ``X`` plus ``tensor_shape`` (or as n-D ``X``).

    Subclasses set, in ``fit``, ``shared_coef_``-style coefficient tensors and
    implement ``_coef_for_client(k)`` (``k = -1``: population).
    """



    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = False
        return tags

    # -- input ------------------------------------------------------------------

    def _flatten_X(self, X):
        """n-D ``X`` (n, p_1, ..., p_d) -> 2-D, remembering the tensor shape."""
        X = _nd_array(X)
        if isinstance(X, np.ndarray) and X.ndim > 2:
            # explicit width: -1 cannot be inferred for zero rows
            return X.reshape(X.shape[0], int(np.prod(X.shape[1:]))), tuple(X.shape[1:])
        return X, None

    def _validate_fit_data(self, X, y, reset=True):
        tensor_shape = check_shape(self.tensor_shape, "tensor_shape")
        output_shape = check_shape(self.output_shape, "output_shape")
        X, nd_shape = self._flatten_X(X)
        if nd_shape is not None:
            if tensor_shape is not None and resolve_shape(
                tensor_shape, int(np.prod(nd_shape)), "tensor_shape", "X"
            ) != nd_shape:
                raise ValueError(
                    f"X has tensor rows of shape {nd_shape} but tensor_shape={tensor_shape}."
                )
            tensor_shape = nd_shape
        y_nd = None
        y = _nd_array(y)
        if isinstance(y, np.ndarray) and y.ndim > 2:
            y_nd = tuple(y.shape[1:])
            y = y.reshape(y.shape[0], -1)
        X, y = validate_data(self, X, y, reset=reset, multi_output=True, y_numeric=True)
        p = X.shape[1]
        if tensor_shape is None:
            tensor_shape = (p,)
        else:
            tensor_shape = resolve_shape(tensor_shape, p, "tensor_shape", "X")
        if y.ndim == 1:
            if output_shape is not None and output_shape != (1,):
                raise ValueError(
                    f"y is 1-D (a scalar response) but output_shape={output_shape} (output_shape)."
                )
            resp_shape, y_layout = (), "scalar"
            Ym = y.reshape(-1, 1)
        else:
            q = y.shape[1]
            if y_nd is not None:
                if output_shape is not None and resolve_shape(
                    output_shape, q, "output_shape", "y"
                ) != y_nd:
                    raise ValueError(
                        f"y has tensor rows of shape {y_nd} but output_shape={output_shape}."
                    )
                output_shape, y_layout = y_nd, "tensor"
            else:
                y_layout = "matrix"
            if output_shape is None:
                output_shape = (q,)
            else:
                output_shape = resolve_shape(output_shape, q, "output_shape", "y")
            resp_shape = output_shape
            Ym = y
        self.tensor_shape_ = tensor_shape
        self.output_shape_ = resp_shape
        self.coef_shape_ = tuple(resp_shape) + tuple(tensor_shape)
        self._y_layout = y_layout
        return np.ascontiguousarray(X, dtype=float), np.ascontiguousarray(Ym, dtype=float)

    def _check_rank_param(self, rank, coef_shape, name="rank"):
        if isinstance(rank, str):
            if rank != "auto":
                raise ValueError(f"{name} must be 'auto', an int or a tuple of ints, got {rank!r}.")
            return "auto"
        return check_tucker_rank(rank, coef_shape, name)

    def _init_rows(self, output_shape, tensor_shape):
        """Rows of the matricization used by the ADMM initializer's norms."""
        if output_shape or self.init_unfolding == "response":
            return None
        return tensor_shape[0]

    # -- the hooks of skfed.federated.FederatedContract (also run by Flower) --

    def _validate_site_data(self, X, y, reset=False, groups=None):
        """The checks a site runs on its own rows: their shapes against
        ``tensor_shape`` and ``output_shape``, and each client's range (named);
        returns ``(X, Y)`` as 2-D float arrays.
        """
        X, Y = self._validate_fit_data(X, y, reset=reset)
        for client in Federation.from_arrays(X, Y, groups).clients:
            check_client_range(client.X, client.y, client.label)
        return X, Y

    def _site_summary(self, X, y):
        """A site's tensor shapes and response layout (all sites must agree)."""
        return {
            "tensor_shape": np.array(self.tensor_shape_, dtype=np.int64),
            "output_shape": np.array(self.output_shape_, dtype=np.int64),
            "y_layout": np.int64(_LAYOUTS.index(self._y_layout)),
        }

    def _combine_site_summaries(self, labels, summaries):
        first = summaries[0]
        for label, summary in zip(labels, summaries):
            for key, argument in (("tensor_shape", "tensor_shape"),
                                  ("output_shape", "output_shape"), ("y_layout", "y")):
                a, b = first[key], summary[key]
                if a.shape != b.shape or not np.array_equal(a, b):
                    show = _LAYOUTS if key == "y_layout" else None
                    raise ValueError(
                        f"sites disagree on {key}: site {labels[0]!r} has "
                        f"{show[int(a)] if show else tuple(a.tolist())}, site {label!r} has "
                        f"{show[int(b)] if show else tuple(b.tolist())} ({argument})."
                    )
        return {key: first[key] for key in ("tensor_shape", "output_shape", "y_layout")}

    def _set_shapes(self, setup):
        """The fitted shape attributes from the set-up summary (as on every site)."""
        self.tensor_shape_ = tuple(int(s) for s in setup["tensor_shape"])
        self.output_shape_ = tuple(int(s) for s in setup["output_shape"])
        self.coef_shape_ = self.output_shape_ + self.tensor_shape_
        self._y_layout = _LAYOUTS[int(setup["y_layout"])]
        self.n_features_in_ = int(setup["n_features"])

    def _validate_predict_X(self, X):
        check_is_fitted(self)
        X, nd_shape = self._flatten_X(X)
        if nd_shape is not None and nd_shape != self.tensor_shape_:
            raise ValueError(
                f"X has tensor rows of shape {nd_shape}, the model was fitted on "
                f"{self.tensor_shape_}."
            )
        return validate_data(self, X, reset=False)

    # -- prediction ---------------------------------------------------------------

    def _predict_with(self, Xm, coef, intercept=None):
        q = int(np.prod(self.output_shape_)) if self.output_shape_ else 1
        Y = Xm @ np.asarray(coef).reshape(q, -1).T
        if intercept is not None:
            Y += np.reshape(intercept, -1)
        return Y

    def _intercept_for_client(self, k):
        """Intercept of client ``k`` (``-1``: population); ``None``: none."""
        return None

    def _intercept_layout(self, flat):
        """Intercepts of shape ``(..., q)`` laid out like ``y``: a float per scalar response."""
        flat = np.asarray(flat, dtype=float)
        if not self.output_shape_:
            return float(flat[0]) if flat.ndim == 1 else flat[..., 0]
        return flat.reshape(flat.shape[:-1] + tuple(self.output_shape_))

    def _format_output(self, Y):
        if self._y_layout == "scalar":
            return Y[:, 0]
        if self._y_layout == "tensor":
            return Y.reshape(Y.shape[0], *self.output_shape_)
        return Y

    def predict(self, X, groups=None):
        """Predict ``<A_k, X>`` (plus the intercept) with each row's client tensor.

        Parameters
        ----------
        %(X_tensor)s
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` (and, with
            ``unknown_client="global"``, clients not seen in ``fit``) uses the
            population coefficient tensor.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,), (n_samples, q) or (n_samples, *output_shape)
            Predictions, laid out like the ``y`` given to ``fit``.
        """
        Xm = self._validate_predict_X(X)
        index = self._client_index(groups, Xm.shape[0])
        q = int(np.prod(self.output_shape_)) if self.output_shape_ else 1
        Y = scatter_rows(
            Xm.shape[0],
            index,
            lambda k, rows: self._predict_with(Xm[rows], self._coef_for_client(k),
                                               self._intercept_for_client(k)),
            lambda rows: self._predict_with(Xm[rows], self._coef_for_client(-1),
                                            self._intercept_for_client(-1)),
            out_shape=(q,),
        )
        return self._format_output(Y)
