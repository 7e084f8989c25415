"""Docstring entries that several estimators share, written once.

A docstring names a shared entry on a line of its own, ``%(name)s``,
indented as the entry's first line should be; :func:`fill_doc` (a class or
function decorator) replaces that line by the entry of :data:`DOCS`, every
line shifted by the placeholder's indentation (an entry may name other
entries the same way). The result is an ordinary
numpydoc docstring, so ``help()``, Sphinx's autodoc and numpydoc read it as
if it were written out. An unknown name is a ``KeyError`` at import.

Only text that is the same wherever it stands belongs here: an entry whose
wording depends on the estimator stays in that estimator's docstring.
"""

import re
import textwrap

__all__ = ["DOCS", "fill_doc"]

_PLACEHOLDER = re.compile(r"^([ ]*)%\((\w+)\)s[ ]*$", re.MULTILINE)


def _entries(**texts):
    return {name: textwrap.dedent(text).strip("\n") for name, text in texts.items()}


#: Shared docstring entries, by name.
DOCS = _entries(
    # -- arguments of fit -------------------------------------------------------------------
    X_fit="""
        X : array-like of shape (n_samples, n_features)
            Training rows of all clients.""",
    y_fit="""
        y : array-like of shape (n_samples,)
            Targets.""",
    y_fit_multi="""
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets.""",
    groups_fit="""
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` means one client.""",
    fit_rows="""
        %(X_fit)s
        %(y_fit)s
        %(groups_fit)s""",
    # the sections of a fit(X, y, groups) docstring that returns the estimator
    fit_sections="""
        Parameters
        ----------
        %(fit_rows)s

        Returns
        -------
        self : object
            The fitted estimator.""",
    # the fit of LocalEstimator and PooledEstimator
    wrapper_fit="""
        Parameters
        ----------
        %(X_fit)s
        %(y_fit_multi)s
        %(groups_fit)s
        sample_weight : array-like of shape (n_samples,), default=None
            Passed to the wrapped estimator's ``fit``, which must accept it.

        Returns
        -------
        self : object
            The fitted estimator.""",
    # -- arguments of predict, predict_proba, decision_function --------------------------------
    X_predict="""
        X : array-like of shape (n_samples, n_features)
            Rows to predict.""",
    X_tensor="""
        X : array-like of shape (n_samples, prod(tensor_shape)) or (n_samples, *tensor_shape)
            Covariate tensors, flattened in C order (or as an n-D array).""",
    X_score="""
        X : array-like of shape (n_samples, n_features)
            Rows to score.""",
    groups_population="""
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` asks for the population
            prediction.""",
    # rows scored by each one's client model (LocalEstimator)
    rows_by_client="""
        X : array-like of shape (n_samples, n_features)
            Rows to score.
        groups : array-like of shape (n_samples,), default=None
            Client label of each row.""",
    groups_ignored="""
        groups : array-like of shape (n_samples,), default=None
            Client labels; checked, then ignored.""",
    # the pooled model of PooledEstimator
    rows_pooled="""
        X : array-like of shape (n_samples, n_features)
            Rows to predict.
        %(groups_ignored)s""",
    groups_adapted="""
        groups : array-like of shape (n_samples,), default=None
            Client labels: a seen site's rows are scored by its adaptation
            (``personalize=True``), other rows by the shared model.""",
    rows_adapted="""
        %(X_score)s
        %(groups_adapted)s""",
    # predict of the wrapping baselines, with the wrapped estimator's standard deviation
    return_std="""
        return_std : bool, default=False
            Also return the predictive standard deviation (estimators whose
            ``predict`` has ``return_std``, such as Gaussian processes, or a
            ``Pipeline`` ending in one).""",
    y_pred_std="""
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_outputs)
            Predictions.
        y_std : ndarray, optional
            Predictive standard deviations, if ``return_std=True``.""",
    # -- parameters --------------------------------------------------------------------------
    unknown_client_population="""
        unknown_client : {"global", "error"}, default="global"
            Prediction for clients not seen in ``fit``: the population
            prediction, or a ``ValueError``.""",
    on_client_error="""
        on_client_error : {"raise", "skip"}, default="raise"
            A failing client step stops the fit with an error naming the client
            and round (``"raise"``) or leaves the client out of that round
            (``"skip"``: recorded in ``communication_.failures``, treated as a
            client not asked).""",
    classes_public="""
        classes : array-like of shape (n_classes,) or None, default=None
            The class labels, when they are public knowledge (e.g. the label set
            of the task). Every site encodes its labels against them and sends
            nothing about which labels it holds; a site whose ``y`` holds a label
            outside ``classes`` is refused with a ``ValueError``. The number of
            classes, and with it the step sizes, the noise scale and the shape
            of every message, then depend only on public inputs. ``None``: each
            site sends the set of labels it holds in the set-up exchange and
            ``classes_`` is their union; with privacy that release is outside
            the guarantee (``privacy_spent_["outside"]`` lists it and ``fit``
            warns), since one row of a rare class changes the label set.""",
    # the budget of the DP-Fed DRO paper's private baselines (one release per round)
    round_budget="""
        epsilon : float or None, default=0.5
            Per-round budget; ``None`` trains without noise, and ``float("inf")``
            is an alias of ``None`` (:func:`skfed.privacy.check_epsilon`).
        delta : float, default=1e-6
            Per-round (and total) delta.
        target_epsilon, target_delta : float or None, default=None
            Total budget, converted to the per-round budget by ``accountant``.
        accountant : {"paper", "rdp", "pld"}, default="paper"
            Composition bound.
        n_rounds : int, default=50
            Rounds.""",
    # ... and their model and federation options, before and after client_fraction
    baseline_model="""
        norm_bound : float, default=1.0
            ``L``, the bound on row norms.
        alpha : {"uniform", "size"} or array-like, default="uniform"
            Client weights.
        fit_intercept : bool, default=False
            Append a constant feature (it counts towards the norm bound).
        intercept_scaling : float, default=1.0
            Its value.
        %(classes_public)s""",
    # the fitted attributes the private baselines share
    baseline_attributes="""
        client_weights_ : ndarray of shape (n_clients,)
            The client weights ``alpha`` (``"uniform"`` or ``"size"`` resolved),
            summing to 1, in the order of ``clients_``.
        epsilon_round_ : tuple of float or None
            ``(epsilon,)``: the per-round budget (derived from ``target_epsilon``
            when given); ``None`` without privacy.
        noise_multiplier_ : tuple of float or None
            ``(z,)``: noise standard deviation over sensitivity; ``None``
            without privacy.
        privacy_unit_ : str or None
            ``"record"``: one row of one client (replace-one); ``None`` without
            privacy.
        %(features_in_)s""",
    baseline_options="""
        on_client_error : {"raise", "skip"}, default="raise"
            A failing client step stops the fit with an error naming the client
            and round (``"raise"``) or leaves the client out of that round
            (``"skip"``: recorded in ``communication_.failures``, treated as a
            client not asked).
        unknown_client : {"global", "error"}, default="global"
            Unseen clients at predict time.
        n_jobs : int or None, default=None
            Threads for the client steps.
        random_state : int, RandomState instance or None, default=None
            Seed of the noise.
        verbose : int, default=0
            Verbosity.""",
    # the linear mixed model's random effects (MixedLMRegressor, FedMixedLMRegressor)
    mixed_model="""
        random_slopes : None, "all" or list of int or str, default=None
            Features with a random slope next to the random intercept: ``None``
            for a random intercept only, ``"all"`` for every feature, or column
            indices or feature names (names need ``X`` with column names, e.g. a
            pandas DataFrame).
        fit_intercept : bool, default=True
            Whether to fit the fixed intercept ``beta_0``. The random intercept is
            always in the model.
        reml : bool, default=True
            Estimate the variance components by restricted maximum likelihood
            (the default of lme4 and statsmodels); ``False`` for maximum likelihood.""",
    # the tensor regressors' ADMM initializer
    init_unfolding="""
        init_unfolding : {"auto", "response"}, default="auto"
            Matricization of the ADMM initializer's nuclear and operator norms:
            ``"response"`` is the paper's (response modes as rows); ``"auto"`` uses
            it when the response is not scalar and the first covariate mode's
            unfolding for a scalar response (where the paper's ``1 x p``
            matricization makes the nuclear norm a ridge penalty; a derived
            choice, not the authors').""",
    # -- attributes --------------------------------------------------------------------------
    clients_="""
        clients_ : ndarray of shape (n_clients,)
            Sorted unique client labels seen in ``fit``.""",
    communication_="""
        communication_ : Ledger
            Messages exchanged during ``fit``.""",
    n_features_in_="""
        n_features_in_ : int
            Number of features seen in ``fit``.""",
    feature_names_in_="""
        feature_names_in_ : ndarray of shape (n_features_in_,)
            Names of features seen in ``fit``, when ``X`` has string column names.""",
    features_in_="""
        %(n_features_in_)s
        %(feature_names_in_)s""",
)


def fill_doc(obj):
    """Replace the ``%(name)s`` lines of docstrings by the entries of :data:`DOCS`.

    Parameters
    ----------
    obj : class or function
        A function's docstring is filled; a class's, and those of the
        methods, class methods, static methods and conditional methods
        (:func:`sklearn.utils.metaestimators.available_if`) its body
        defines.

    Returns
    -------
    obj : class or function
        The same object, its docstrings filled in (left alone when Python
        runs without docstrings, ``-OO``).

    Examples
    --------
    >>> from skfed.utils._docstrings import fill_doc
    >>> @fill_doc
    ... def predict(X):
    ...     '''Predict.
    ...
    ...     Parameters
    ...     ----------
    ...     %(X_predict)s
    ...     '''
    >>> print(predict.__doc__.splitlines()[-2].strip())
    Rows to predict.
    """
    _fill(obj)
    if isinstance(obj, type):
        for member in vars(obj).values():
            for target in (member, getattr(member, "__func__", None), getattr(member, "fn", None)):
                if callable(target) and not isinstance(target, type):
                    _fill(target)
    return obj


def _fill(obj):
    doc = getattr(obj, "__doc__", None)
    if doc and "%(" in doc:
        obj.__doc__ = _PLACEHOLDER.sub(_indented_entry, doc)


def _indented_entry(match):
    indent, name = match.groups()
    text = _PLACEHOLDER.sub(_indented_entry, DOCS[name])  # an entry may name others
    return "\n".join(indent + line if line else line for line in text.splitlines())
