"""Shared pieces of the federated linear classifiers: the client rewrite, prediction.

Parameter checks live in :mod:`._checks`, privacy plans in :mod:`._privacy_plan`.
"""

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ..base import FederatedEstimator
from ..federated import ClientData
from ..privacy import check_epsilon
from ..utils._docstrings import fill_doc
from ..utils._param_validation import FEDERATION_CONSTRAINTS
from ..utils._validation import (
    check_groups, check_scale, map_clients, user_stacklevel, validate_data,
)
from ._checks import _label_array, check_known_classes, check_norm_bound, client_weights
from ._privacy_plan import classical_multiplier, privacy_plan, privacy_report, privacy_spent


#: ``privacy_spent_["outside"]`` of a private fit without ``classes``
LABEL_SETS = ("classes: each site's set of class labels, sent in the set-up exchange without "
              "noise (it sets classes_, the number of classes and with it the step sizes, the "
              "noise scale and every message's shape); pass classes= to keep it on the sites")


@fill_doc
class LinearPredictionMixin:
    """Prediction with one global linear model ``scores = X @ coef_.T + intercept_``."""

    def _fits_intercept(self):
        """Whether the constant feature is appended (estimators may resolve "auto")."""
        return bool(self.fit_intercept)

    def _set_model(self, M):
        if self._fits_intercept():
            self.coef_ = np.ascontiguousarray(M[:, :-1])
            self.intercept_ = M[:, -1] * float(self.intercept_scaling)
        else:
            self.coef_ = np.ascontiguousarray(M)
            self.intercept_ = np.zeros(M.shape[0])

    # decision_function checks groups like predict: request them alike
    __metadata_request__decision_function = {"groups": True}

    def _scores(self, X, groups):
        """Class scores of shape (n_samples, n_classes), groups checked."""
        return self._scores_by_client(X, groups)[0]

    def _scores_by_client(self, X, groups):
        """``(scores, client_index)``: the global model's ``X @ coef_.T + intercept_``,
        or a client's own for its rows (:meth:`_client_scores`); index -1: global."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        index = map_clients(groups, self.clients_, X.shape[0], self.unknown_client)
        X = self._model_rows(X)
        return self._client_scores(X @ self.coef_.T + self.intercept_, X, index), index

    def _client_scores(self, scores, X, index):
        """Scores of the rows of seen clients (default: the global model's)."""
        return scores

    def _model_rows(self, X):
        """The rows as the model scores them (estimators that clip override)."""
        return X

    def decision_function(self, X, groups=None):
        """Class scores ``M x + b`` of the global model, or of a seen site's own.

        Parameters
        ----------
        %(X_score)s
        groups : array-like of shape (n_samples,), default=None
            Client labels; checked (unknown labels follow ``unknown_client``).
            Where the estimator fits each site's own adaptation
            (:class:`DPFedDROClassifier` with ``personalize=True``), a seen
            site's rows are scored by it; every other row by the model shared
            by all clients.

        Returns
        -------
        scores : ndarray of shape (n_samples, n_classes) or (n_samples,)
            For two classes, the score of ``classes_[1]`` minus that of
            ``classes_[0]``.
        """
        scores = self._scores(X, groups)
        if scores.shape[1] == 2:
            return scores[:, 1] - scores[:, 0]
        return scores

    def predict(self, X, groups=None):
        """Predict the class of the highest score (:meth:`decision_function`).

        The methods of this module train one consensus model (local models
        are noisy or converging copies of it); without a site adaptation
        every row, of a seen client or not, is predicted with it, and scorers
        that drop ``groups`` are still right. With one (``DPFedDROClassifier(
        personalize=True)``) a seen site's rows are predicted by its own.

        Parameters
        ----------
        %(X_predict)s
        groups : array-like of shape (n_samples,), default=None
            Client labels (see :meth:`decision_function`).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        scores = self.decision_function(X, groups)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]


class _LinearFederatedClassifier(FederatedEstimator, LinearPredictionMixin, ClassifierMixin,
                                 BaseEstimator):
    """A federated linear classifier: the hooks of FederatedEstimator, shared."""

    _min_client_rows = 2
    _parameter_constraints = {**FEDERATION_CONSTRAINTS, "classes": ["array-like", None]}

    #: Whether the estimator adds noise when ``epsilon``/``target_epsilon`` is set.
    _private = True

    def _is_private(self):
        # epsilon=inf is an alias of None (check_epsilon): no noise, no norm bound;
        # a total target has no such alias (target_epsilon=inf is an error)
        if not self._private:
            return False
        if self.target_epsilon is not None:
            check_epsilon(self.target_epsilon, name="target_epsilon", allow_none=False)
            return True
        return check_epsilon(self.epsilon) is not None

    def _rows_bounded_by_fit(self):
        """Whether the fit itself maps the rows into the norm bound (private scaling)."""
        return False

    def _privacy_plan(self):
        """The :class:`~._privacy_plan.Plan` or None (see :func:`privacy_plan`)."""
        return privacy_plan(self, None) if self._private else None

    def _check_params(self):
        """Checks the constraints cannot state (subclasses extend); the privacy plan, once."""
        self._classes = None if self.classes is None else check_known_classes(self.classes)
        self._plan = self._privacy_plan()

    def _privacy_claim(self):
        """``privacy_spent_``'s epsilon and delta when every round runs, and the least
        noise multiplier; ``None`` without noise (see ``FederatedEstimator``)."""
        if self._plan is None:
            return None
        # the report's total and its releases' least multiplier, without the report's
        # per-release compositions (a site asks once per run; a PLD composition is slow)
        eps, delta, delta_bar, extras = self._plan
        epsilon = privacy_spent(int(self.n_rounds), eps, delta, delta_bar,
                                getattr(self, "accountant", "paper"), extras)
        least = min([classical_multiplier(e, delta) for e in eps if e > 0]
                    + [z for _, z in extras])
        return {"epsilon": float(epsilon), "delta": float(delta_bar),
                "noise_multiplier": float(least)}

    def _validate_site_data(self, X, y, reset=False, groups=None):
        """The checks one site runs on its own rows (in-process: on the pooled rows).

        With privacy, a row whose norm exceeds ``norm_bound`` is an error
        here, on the site, before anything is sent.
        """
        X, y = validate_data(self, X, y, reset=reset, dtype=np.float64)
        check_scale(X, "X")  # else the local QP solvers fail deep inside (LocalSolveError)
        check_classification_targets(y)
        if self._is_private() and not self._rows_bounded_by_fit():
            check_norm_bound(X, float(self.norm_bound))
        if self._classes is not None:
            self._check_labels_known(y, groups)
        return X, y

    def _check_labels_known(self, y, groups):
        """Refuse labels outside the public ``classes``, on the site, before anything is sent."""
        y = _label_array(y, "y")
        known = self._classes
        if (y.dtype.kind == "U") != (known.dtype.kind == "U"):  # text against numbers
            unknown = np.ones(y.shape, dtype=bool)
        else:
            unknown = ~np.isin(y, known)
        if unknown.any():
            where = ""
            if groups is not None:  # fit's split (or raw labels): name the first row's client
                labels, index = check_groups(groups, y.shape[0])
                where = f" (client {labels[index[np.flatnonzero(unknown)[0]]].tolist()!r})"
            raise ValueError(
                f"y holds class labels {np.unique(y[unknown]).tolist()} not in classes="
                f"{known.tolist()}{where}: every site's labels must be among the public "
                "classes given (classes)."
            )

    def _site_summary(self, X, y):
        """A site's class labels (the union over sites is ``classes_``), unless ``classes``.

        Which labels a site holds is a function of its rows, released in the
        set-up exchange without noise, outside the differential privacy
        guarantee: it sets the number of classes, hence the step sizes, the
        noise scale and every message's shape. With the public ``classes``
        nothing about the labels is sent.
        """
        if self._classes is not None:
            return {}
        return {"classes": _label_array(np.unique(y), "y")}

    def _combine_site_summaries(self, labels, summaries):
        if self._classes is not None:  # public: the sites sent no labels
            return {"classes": self._classes}
        kinds = {s["classes"].dtype.kind == "U" for s in summaries}
        if len(kinds) > 1:
            raise ValueError("y: some sites hold text class labels and others numbers.")
        classes = np.unique(np.concatenate([s["classes"] for s in summaries]))
        if classes.size < 2:
            raise ValueError(
                f"y has 1 class ({classes[0]!r}) over all sites; {type(self).__name__} "
                "needs at least 2 classes."
            )
        return {"classes": classes}

    def _federated_algorithm(self, setup):
        """The algorithm and its constants, built from the set-up summary only.

        Deterministic, so the server and every site build the same algorithm.
        The fitted attributes it implies (step sizes, noise, client weights)
        ride along as ``algorithm.fitted_attrs``.
        """
        classes = np.asarray(setup["classes"])
        sizes = np.asarray(setup["n_samples"], dtype=float)
        L = float(getattr(self, "norm_bound", 1.0))
        scaling = None
        if self._fits_intercept():  # the constant feature counts towards the norm bound
            scaling = float(self.intercept_scaling)
            L = math.sqrt(L * L + scaling * scaling)
        alpha = client_weights(self.alpha, sizes)
        shape = (classes.size, int(setup["n_features"]) + (scaling is not None))
        algorithm, attrs = self._algorithm(self._plan, sizes, shape, L, alpha)
        algorithm.classes = classes
        algorithm.intercept_scaling = scaling
        algorithm.fitted_attrs = {**attrs, "client_weights_": alpha}
        return algorithm

    def _server_model(self, server_state):
        return server_state["coef"]

    def _set_fitted(self, fit):
        """Fitted attributes from the server state (and, in-process, the client states)."""
        result, setup, algorithm, plan = fit.result, fit.setup, fit.algorithm, self._plan
        self._set_model(self._server_model(result.server_state))
        self.classes_ = np.asarray(setup["classes"]).copy()
        self.clients_ = fit.labels
        self.n_features_in_ = int(setup["n_features"])
        self.n_iter_ = result.n_rounds
        self.communication_ = result.ledger
        for name, value in algorithm.fitted_attrs.items():
            setattr(self, name, value)
        outside = [] if plan is None or self._classes is not None else [LABEL_SETS]
        self.privacy_spent_ = privacy_report(self._n_training_rounds(result), plan,
                                             getattr(self, "accountant", "paper"), outside)
        if outside:
            warnings.warn(
                f"{type(self).__name__} with "
                + (f"target_epsilon={self.target_epsilon!r}" if self.target_epsilon is not None
                   else f"epsilon={self.epsilon!r}")
                + ": each site's set of class labels was sent in the set-up exchange "
                "without noise, outside the differential-privacy guarantee (it sets the "
                "number of classes, the step sizes, the noise scale and the messages' "
                "shape); privacy_spent_['outside'] lists it. Pass classes= (the public class "
                "labels) to keep the label sets on the sites.",
                UserWarning, stacklevel=user_stacklevel())
        if plan is not None:
            eps, delta = plan.epsilons, plan.delta
            self.epsilon_round_ = tuple(eps)
            self.noise_multiplier_ = tuple(classical_multiplier(e, delta) for e in eps)
            self.privacy_unit_ = "record"
        else:
            self.epsilon_round_ = self.noise_multiplier_ = self.privacy_unit_ = None
        self._set_client_results(result, algorithm)

    def _n_training_rounds(self, result):
        """Rounds of noisy releases (estimators with extra rounds override)."""
        return result.n_rounds

    def _set_client_results(self, result, algorithm):
        """Attributes from the client states (``None`` on a distributed run)."""

