"""Timing of PersonalizedTensorRegressor (a benchmark, not a test).

1. One Stage-I round (every client: clip, gradient, noise, exact tangent
   projection; server: average, ST-HOSVD retraction) against one plain pass
   computing every client's residuals and gradient contraction, in the same
   run, for growing client sizes.
2. Fit time and coefficient error beside tensorly's TuckerRegressor (through
   skfed's wrapper) on the same scalar-on-matrix data, pooled and per client.

Run: ``python benchmarks/bench_tensor_regression.py`` (prints markdown tables).
"""

import time

import numpy as np
from threadpoolctl import threadpool_limits

from skfed.baselines import LocalEstimator, PooledEstimator
from skfed.datasets import make_tensor_regression
from skfed.federated import Federation
from skfed.tensor import (
    LocalTwoStageTensorRegressor,
    PersonalizedTensorRegressor,
    TensorlyTuckerRegressor,
)
from skfed.tensor._stages import StageOne
from skfed.tensor._tucker import retract


def _best_of(fn, repeat=7):
    times = []
    for _ in range(repeat):
        tic = time.perf_counter()
        fn()
        times.append(time.perf_counter() - tic)
    return min(times)


def stage_one_round(n_k):
    """Seconds of one Stage-I round and of one residual+gradient pass (5 clients)."""
    X, y, groups = make_tensor_regression(n_samples=n_k, random_state=0)
    shape = (5, 5, 10, 5)
    fed = Federation.from_arrays(X, y, groups)
    A, core, factors = retract(np.random.default_rng(0).standard_normal(shape), (3, 3, 3, 3))
    alg = StageOne(shape, (3, 3, 3, 3), A, step_size=0.04, n_rounds=20, epsilon=20.0,
                   delta=0.1)
    rng = np.random.default_rng(0)
    states = [alg.client_init(c, rng) for c in fed.clients]
    server, broadcast = alg.server_init(rng)

    def one_round():
        msgs = {}
        for k, c in enumerate(fed.clients):
            _, msgs[k] = alg.client_step(c, states[k], broadcast, rng)
        alg.server_step(server, msgs, rng)

    Am = A.reshape(25, 50)

    def plain_pass():
        for c in fed.clients:
            R = c.y - c.X @ Am.T
            _ = R.T @ c.X / c.n_samples

    return _best_of(one_round), _best_of(plain_pass)


def versus_tensorly(seed=0):
    """Fit time and ||coef - truth|| (mean over clients) on scalar-on-matrix data."""
    X, y, groups, truth = make_tensor_regression(
        n_samples=250, tensor_shape=(10, 5), output_shape=None, rank=(3, 3), n_nonzero=10,
        return_truth=True, random_state=seed,
    )
    models = {
        "PersonalizedTensorRegressor (non-private)": PersonalizedTensorRegressor(
            tensor_shape=(10, 5), rank=(3, 3), step_size=0.5, n_rounds=20, random_state=seed),
        "PersonalizedTensorRegressor (eps=20, delta=0.1)": PersonalizedTensorRegressor(
            tensor_shape=(10, 5), rank=(3, 3), step_size=0.5, n_rounds=20, epsilon=20.0,
            delta=0.1, random_state=seed),
        "LocalTwoStageTensorRegressor": LocalTwoStageTensorRegressor(
            tensor_shape=(10, 5), rank=(3, 3)),
        "tensorly TuckerRegressor, pooled": PooledEstimator(
            TensorlyTuckerRegressor(tensor_shape=(10, 5), weight_ranks=(3, 3), random_state=seed)),
        "tensorly TuckerRegressor, per client": LocalEstimator(
            TensorlyTuckerRegressor(tensor_shape=(10, 5), weight_ranks=(3, 3), random_state=seed)),
    }
    # warm-up: numba kernels load from cache and first calls import lazily
    PersonalizedTensorRegressor(tensor_shape=(10, 5), rank=(3, 3), n_rounds=1).fit(X, y)
    rows = []
    for name, model in models.items():
        tic = time.perf_counter()
        model.fit(X, y, groups=groups)
        fit_time = time.perf_counter() - tic
        if hasattr(model, "coef_"):
            coefs = model.coef_
        elif hasattr(model, "estimator_"):
            coefs = np.broadcast_to(model.estimator_.coef_, truth.coef.shape)
        else:
            coefs = np.stack([e.coef_ for e in model.estimators_])
        err = np.mean([np.linalg.norm(coefs[k] - truth.coef[k]) for k in range(5)])
        rows.append((name, fit_time, err))
    return rows


def main():
    with threadpool_limits(limits=1, user_api="blas"):
        print("| n_k | Stage-I round (ms) | residual+gradient pass (ms) | ratio |")
        print("|---|---|---|---|")
        for n_k in (250, 2500, 25000):
            r, p = stage_one_round(n_k)
            print(f"| {n_k} | {1e3 * r:.2f} | {1e3 * p:.2f} | {r / p:.1f} |")
        print()
        print("| method | fit time (s) | mean ||A_k - A_k*||_F |")
        print("|---|---|---|")
        for name, t, err in versus_tensorly():
            print(f"| {name} | {t:.2f} | {err:.3f} |")


if __name__ == "__main__":
    main()
