"""Timing of PersonalizedTensorRegressor (a benchmark, not a test).

1. One Stage-I round (every client: clip, gradient, noise, exact tangent
   projection; server: average, ST-HOSVD retraction) against one plain pass
   computing every client's residuals and gradient contraction, in the same
   run (calls interleaved), for n_k = 250, 2500 and 25000 rows per client;
   and the cost per round of the same rounds through ``run_federation``
   against calling the steps directly (the engine's overhead), and the same
   rounds through the engine as a phase of a ``PhasedAlgorithm`` (as in a
   fit) against ``StageOne`` alone (the phased wrapper's overhead).
2. Fit time and coefficient error beside tensorly's TuckerRegressor (through
   skfed's wrapper) on the same scalar-on-matrix data, pooled and per client.

Run: ``python benchmarks/speed/bench_tensor_regression.py`` (prints markdown tables);
``--quick``: part 1 only, for n_k = 250 and 2500.
"""

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from skfed.baselines import LocalEstimator, PooledEstimator
from skfed.datasets import make_tensor_regression
from skfed.federated import Federation, PhasedAlgorithm, run_federation
from skfed.tensor import (
    LocalTwoStageTensorRegressor,
    PersonalizedTensorRegressor,
    TensorlyTuckerRegressor,
)
from skfed.tensor._stages import StageOne
from skfed.tensor._tucker import retract


def _interleaved(fns, repeat, clock=time.perf_counter):
    """Seconds of each function, ``repeat`` times, calls interleaved (noise hits all alike)."""
    times = [[] for _ in fns]
    for _ in range(repeat):
        for t, fn in zip(times, fns):
            tic = clock()
            fn()
            t.append(clock() - tic)
    return [np.array(t) for t in times]


def stage_one_round(n_k, repeat=21):
    """One Stage-I round and one plain residual+gradient pass (5 clients), same run.

    The round is the algorithm's own steps, called directly: every client's
    ``client_step`` (clip, gradient, noise, exact tangent projection; the
    projector is set up once per round, when the broadcast ``A_0`` changes)
    and the server's ``server_step`` (weighted mean, ST-HOSVD retraction),
    whose new broadcast feeds the next round, as in a fit. The pass computes
    every client's residuals ``Y - X A^T`` and the contraction ``R^T X / n``.

    Returns
    -------
    round_times, pass_times : ndarray of shape (repeat,)
        Process CPU seconds (on a shared machine wall-clock times vary more
        than the ratio), measured alternately.
    """
    X, y, groups = make_tensor_regression(n_samples=n_k, random_state=0)
    shape = (5, 5, 10, 5)
    fed = Federation.from_arrays(X, y, groups)
    A, core, factors = retract(np.random.default_rng(0).standard_normal(shape), (3, 3, 3, 3))
    alg = StageOne(shape, (3, 3, 3, 3), A, step_size=0.04, n_rounds=20, epsilon=20.0,
                   delta=0.1)
    rng = np.random.default_rng(0)
    states = [alg.client_init(c, rng) for c in fed.clients]
    server = list(alg.server_init(rng))  # [state, broadcast]

    def one_round():
        msgs = {}
        for k, c in enumerate(fed.clients):
            states[k], msgs[k] = alg.client_step(c, states[k], server[1], rng)
        server[0], server[1] = alg.server_step(server[0], msgs, rng)

    Am = A.reshape(25, 50)

    def plain_pass():
        for c in fed.clients:
            R = c.y - c.X @ Am.T
            _ = R.T @ c.X / c.n_samples

    for _ in range(3):  # warm-up: numba kernels load from the cache on first use
        one_round()
        plain_pass()
    return _interleaved([one_round, plain_pass], repeat, clock=time.process_time)


def _stage_one_problem(n_k, n_rounds):
    """The federation (5 clients of ``n_k`` rows) and a factory of fresh Stage-I algorithms."""
    X, y, groups = make_tensor_regression(n_samples=n_k, random_state=0)
    shape = (5, 5, 10, 5)
    fed = Federation.from_arrays(X, y, groups)
    A = retract(np.random.default_rng(0).standard_normal(shape), (3, 3, 3, 3))[0]

    def algorithm():
        return StageOne(shape, (3, 3, 3, 3), A, step_size=0.04, n_rounds=n_rounds,
                        epsilon=20.0, delta=0.1)

    return fed, algorithm


def engine_overhead(n_k, n_rounds=20, repeat=5):
    """Seconds per round of ``n_rounds`` Stage-I rounds, via the engine and called directly.

    Both runs do the same work (client and server initialization, then the
    rounds) on the same data; ``run_federation`` adds per-client random
    streams, message validation and copies and the ledger. Interleaved, best
    of ``repeat``.
    """
    fed, algorithm = _stage_one_problem(n_k, n_rounds)

    def via_engine():
        run_federation(algorithm(), fed, n_rounds=n_rounds, random_state=0)

    def direct():
        alg, rng = algorithm(), np.random.default_rng(0)
        states = [alg.client_init(c, rng) for c in fed.clients]
        server, broadcast = alg.server_init(rng)
        for _ in range(n_rounds):
            msgs = {}
            for k, c in enumerate(fed.clients):
                states[k], msgs[k] = alg.client_step(c, states[k], broadcast, rng)
            server, broadcast = alg.server_step(server, msgs, rng)

    direct()  # warm-up
    engine, plain = _interleaved([via_engine, direct], repeat)
    return engine.min() / n_rounds, plain.min() / n_rounds


class _StageOnePhase(PhasedAlgorithm):
    """Stage I as the only phase of a phased algorithm (no Stage II work to time)."""

    def __init__(self, make):
        self.make = make
        super().__init__([make().n_rounds])

    def phase_spec(self, phase, previous):
        return {"rank": np.array(self.make().rank)}

    def build_phase(self, phase, spec, previous=None):
        return self.make()


def phased_overhead(n_k, n_rounds=20, repeat=30):
    """CPU seconds per round of ``n_rounds`` Stage-I rounds via the engine: phased and alone.

    The phased run wraps every broadcast (phase index and the rank as spec),
    unwraps it on every client and looks up the client side of the phase;
    the work is the same. Process CPU time (the difference is a few percent,
    below the wall-clock noise of a shared machine), interleaved, best of
    ``repeat``.
    """
    fed, algorithm = _stage_one_problem(n_k, n_rounds)

    def phased():
        run_federation(_StageOnePhase(algorithm), fed, n_rounds=n_rounds, random_state=0)

    def alone():
        run_federation(algorithm(), fed, n_rounds=n_rounds, random_state=0)

    phased()  # warm-up
    wrapped, plain = _interleaved([phased, alone], repeat, clock=time.process_time)
    return wrapped.min() / n_rounds, plain.min() / n_rounds


def versus_tensorly(seed=0):
    """Fit time and ||coef - truth|| (mean over clients) on scalar-on-matrix data."""
    X, y, groups, truth = make_tensor_regression(
        n_samples=250, tensor_shape=(10, 5), output_shape=None, rank=(3, 3), n_nonzero=10,
        return_truth=True, random_state=seed,
    )
    # zero-mean data and the paper's model through the origin: no intercepts
    flat = dict(fit_intercept=False)
    models = {
        "PersonalizedTensorRegressor (non-private)": PersonalizedTensorRegressor(
            tensor_shape=(10, 5), rank=(3, 3), step_size=0.5, n_rounds=20, random_state=seed,
            **flat),
        "PersonalizedTensorRegressor (eps=20, delta=0.1)": PersonalizedTensorRegressor(
            tensor_shape=(10, 5), rank=(3, 3), step_size=0.5, n_rounds=20, epsilon=20.0,
            delta=0.1, privacy_mode="paper", random_state=seed, **flat),
        "LocalTwoStageTensorRegressor": LocalTwoStageTensorRegressor(
            tensor_shape=(10, 5), rank=(3, 3), **flat),
        "tensorly TuckerRegressor, pooled": PooledEstimator(
            TensorlyTuckerRegressor(tensor_shape=(10, 5), weight_ranks=(3, 3), random_state=seed,
                                    **flat)),
        "tensorly TuckerRegressor, per client": LocalEstimator(
            TensorlyTuckerRegressor(tensor_shape=(10, 5), weight_ranks=(3, 3), random_state=seed,
                                    **flat)),
    }
    # warm-up: numba kernels load from cache and first calls import lazily
    PersonalizedTensorRegressor(tensor_shape=(10, 5), rank=(3, 3), n_rounds=1, **flat).fit(X, y)
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


def main(quick=False):
    sizes = (250, 2500) if quick else (250, 2500, 25000)
    with threadpool_limits(limits=1, user_api="blas"):
        print("| n_k | Stage-I round, CPU (ms) | residual+gradient pass, CPU (ms) "
              "| ratio of minima | median of paired ratios |")
        print("|---|---|---|---|---|")
        for n_k in sizes:
            r, p = stage_one_round(n_k)
            print(f"| {n_k} | {1e3 * r.min():.2f} | {1e3 * p.min():.2f} | "
                  f"{r.min() / p.min():.2f} | {np.median(r / p):.2f} |")
        overheads = (("round via run_federation", "same rounds called directly",
                      "engine overhead", engine_overhead),
                     ("Stage-I round as a phase, CPU", "StageOne alone, CPU", "phased overhead",
                      phased_overhead))
        for slow, fast, what, measure in overheads:
            print(f"\n| n_k | {slow} (ms) | {fast} (ms) | {what} |")
            print("|---|---|---|---|")
            for n_k in (250, 2500):
                a, b = measure(n_k)
                print(f"| {n_k} | {1e3 * a:.2f} | {1e3 * b:.2f} | {a / b - 1:+.1%} |")
        if quick:
            return
        print()
        print("| method | fit time (s) | mean ||A_k - A_k*||_F |")
        print("|---|---|---|")
        for name, t, err in versus_tensorly():
            print(f"| {name} | {t:.2f} | {err:.3f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="part 1 only, for n_k = 250 and 2500")
    main(quick=parser.parse_args().quick)
