"""Fits on threads leave the process-wide state alone, and n_jobs does not change results.

``sys.stdout`` (gpboost's messages are caught by redirecting it) and
``warnings.filters`` (fits hide optimizer warnings) are shared by every
thread: skfed changes them under one lock (``skfed.utils._threads``).
"""

import importlib.util
import io
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from joblib import Parallel, delayed

from skfed.baselines import GPBoostRegressor, MERFRegressor, MixedLMRegressor
from skfed.datasets import make_federated_regression
from skfed.linear_model import FedMixedLMRegressor
from skfed.model_selection import WithinClientKFold
from skfed.utils._threads import STATE_LOCK, quiet_warnings, redirect_stdout

HAS = {name: importlib.util.find_spec(name) is not None
       for name in ("gpboost", "merf", "statsmodels")}
needs_gpboost = pytest.mark.skipif(not HAS["gpboost"], reason="gpboost is not installed")
needs_merf = pytest.mark.skipif(not HAS["merf"], reason="merf is not installed")
needs_statsmodels = pytest.mark.skipif(not HAS["statsmodels"],
                                       reason="statsmodels is not installed")

N_FITS, N_THREADS, REPEATS = 8, 4, 3


def _filters():
    """``warnings.filters`` without scikit-learn's own: its ``check_array`` adds an
    "error" filter for ComplexWarning in a ``catch_warnings`` block (not thread-safe
    either, out of skfed's hands; MERF validates at each forest predict)."""
    return [f for f in warnings.filters if f[2] is not np.exceptions.ComplexWarning]


@pytest.fixture(scope="module")
def data():
    return make_federated_regression(n_clients=4, n_samples=120, random_state=0)


def _fit_on_threads(make, X, y, groups, use_joblib):
    if use_joblib:
        return Parallel(n_jobs=N_THREADS, prefer="threads")(
            delayed(make().fit)(X, y, groups=groups) for _ in range(N_FITS))
    with ThreadPoolExecutor(N_THREADS) as pool:
        return list(pool.map(lambda _: make().fit(X, y, groups=groups), range(N_FITS)))


@pytest.mark.parametrize("make", [
    pytest.param(lambda: MixedLMRegressor(random_slopes="all"), marks=needs_statsmodels,
                 id="MixedLMRegressor"),
    pytest.param(lambda: FedMixedLMRegressor(random_slopes="all"), id="FedMixedLMRegressor"),
    pytest.param(lambda: GPBoostRegressor(kind="linear", random_state=0), marks=needs_gpboost,
                 id="GPBoostRegressor"),
    # not MERFRegressor: merf, pandas and scikit-learn change warnings.filters in their
    # own catch_warnings blocks during its fit (out of skfed's hands)
])
@pytest.mark.parametrize("use_joblib", [True, False], ids=["joblib", "executor"])
def test_threaded_fits_leave_stdout_and_warning_filters_alone(data, make, use_joblib):
    X, y, groups = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fits' own warnings are not the point here
        reference = make().fit(X, y, groups=groups).predict(X, groups=groups)
    stdout, filters = sys.stdout, _filters()
    for _ in range(REPEATS):
        models = _fit_on_threads(make, X, y, groups, use_joblib)
        assert sys.stdout is stdout
        assert _filters() == filters
    for model in models:  # and the fits are those of a fit on the main thread
        np.testing.assert_array_equal(model.predict(X, groups=groups), reference)


def _gpboost_warnings(fit_all):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_all()
    return [str(w.message) for w in caught if str(w.message).startswith("gpboost:")]


@needs_gpboost
def test_gpboost_warnings_reach_every_threaded_fit():
    # the training rows of these folds make gpboost warn (its optimizer stopped early)
    X, y, groups = make_federated_regression(n_clients=3, n_samples=60, random_state=0)
    folds = [train for train, _ in WithinClientKFold(5).split(X, y, groups)]
    fit = GPBoostRegressor(kind="linear", random_state=0).fit
    serial = _gpboost_warnings(lambda: [fit(X[rows], y[rows], groups=groups[rows])
                                        for rows in folds])
    assert serial, "the data no longer makes gpboost warn: the test checks nothing"
    stdout = sys.stdout
    for _ in range(REPEATS):
        threaded = _gpboost_warnings(lambda: Parallel(n_jobs=N_THREADS, prefer="threads")(
            delayed(fit)(X[rows], y[rows], groups=groups[rows]) for rows in folds * 2))
        assert sorted(threaded) == sorted(serial * 2)
        assert sys.stdout is stdout


def test_helpers_restore_state_and_nest():
    stdout, filters, buffer = sys.stdout, list(warnings.filters), io.StringIO()
    with redirect_stdout(buffer):
        with quiet_warnings(RuntimeWarning):  # the lock is re-entrant
            print("caught")
            warnings.warn("hidden", RuntimeWarning)
            with pytest.warns(UserWarning, match="shown"):
                warnings.warn("shown", UserWarning)
    assert buffer.getvalue() == "caught\n"
    assert sys.stdout is stdout and warnings.filters == filters

    # another thread waits for the block to end
    entered = threading.Event()
    with STATE_LOCK:
        worker = threading.Thread(target=lambda: (STATE_LOCK.acquire(), entered.set(),
                                                  STATE_LOCK.release()))
        worker.start()
        assert not entered.wait(0.1)
    worker.join(5)
    assert entered.is_set()


@needs_merf
def test_merf_is_the_same_for_every_n_jobs():
    rng = np.random.RandomState(0)
    groups = np.repeat(np.arange(5), 60)
    X = rng.normal(size=(300, 4))
    y = (np.einsum("ij,ij->i", X, rng.normal(size=(5, 4))[groups] + 1) + 0.5 * groups
         + 0.1 * rng.normal(size=300))

    def predict(n_jobs):
        model = MERFRegressor(n_estimators=20, param_grid={"min_samples_leaf": [5]},
                              max_iterations=5, random_state=0, n_jobs=n_jobs)
        model.fit(X, y, groups=groups)
        return np.concatenate([model.predict(X, groups=groups), model.predict(X),
                               model.random_effects_cov_.ravel()])

    reference = predict(1)
    for n_jobs in (2, 2, -1):
        np.testing.assert_array_equal(predict(n_jobs), reference)
