"""The ask-and-tell L-BFGS of federated servers against scipy's L-BFGS-B."""

import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from skfed.utils._optimize import AskTellLBFGS


def _run(opt, fun, grad):
    while not opt.done:
        x = opt.ask()
        opt.tell(fun(x), grad(x))
    return opt


@pytest.mark.parametrize("x0", [[-1.2, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0]])
def test_reaches_scipy_minimum_unbounded(x0):
    opt = _run(AskTellLBFGS(np.array(x0), gtol=1e-8), rosen, rosen_der)
    ref = minimize(rosen, x0, jac=rosen_der, method="L-BFGS-B")
    assert opt.f <= ref.fun + 1e-8
    np.testing.assert_allclose(opt.x, np.ones(len(x0)), atol=1e-4)


def test_respects_bounds_and_finds_the_bounded_minimum():
    bounds = np.array([[-2.0, 0.5], [-2.0, 2.0]])
    opt = _run(AskTellLBFGS(np.array([-1.5, 1.5]), bounds), rosen, rosen_der)
    ref = minimize(rosen, [-1.5, 1.5], jac=rosen_der, method="L-BFGS-B", bounds=bounds)
    assert np.all(opt.x >= bounds[:, 0]) and np.all(opt.x <= bounds[:, 1])
    np.testing.assert_allclose(opt.x, ref.x, atol=1e-4)


def test_backtracks_over_non_finite_values():
    # the objective is infinite beyond x = 1: the line search must step back inside
    def fun(x):
        return np.inf if x[0] > 1 else (x[0] - 2) ** 2

    opt = _run(AskTellLBFGS(np.array([0.0])), fun, lambda x: np.array([2 * (x[0] - 2)]))
    assert 0.5 < opt.x[0] <= 1.0 and np.isfinite(opt.f)


def test_tell_after_done_raises():
    opt = _run(AskTellLBFGS(np.array([1.0])), lambda x: float(x @ x), lambda x: 2 * x)
    with pytest.raises(RuntimeError, match="finished"):
        opt.tell(0.0, np.zeros(1))
