"""Performance of PFedHGPRegressor (issue 4): cost of a round and scaling.

Measures, in one run:

* the time of one training round (``optimizer="cavi"`` and ``"paper"``) with
  T clients x n rows, d=2, M=50 global and M_i=20 local inducing inputs,
  against the time of forming every client's ``K(X_i, Z)`` and
  ``K(Z, X_i) K(X_i, Z)`` once (the floor of any sparse-GP round). The
  rounds are the algorithm's own client and server steps called directly,
  as in a fit, alternating with floor passes (process CPU time): the
  machine's speed drifts by tens of percent over seconds, and each ratio
  compares a round with the floor passes just before and after it. In
  ``optimizer="cavi"`` the global kernel moves every other round, so a
  "round" is the mean of two consecutive ones;
* the same for the multi-output (ILMM) model with Q=3 outputs and R=2
  latents per component, against R times that floor (one global basis per
  latent);
* fit time (10 closed-form rounds) against rows per client and against the
  number of clients (log-log slopes; close to 1 means linear; ``--plot``
  draws both);
* a single-client fit (deviation and local off) against scikit-learn's exact
  ``GaussianProcessRegressor`` (time and test NLL);
* many small clients (``--only clients``): a closed-form round over 500
  clients of 40 rows, d=1, M=20, M_i=10, per client and round, split into
  the client steps (called directly), the server step and a round through
  the engine (``run_federation``'s transport and message checks), process
  CPU time per client; criterion: at most 0.5 ms per client and round.

The GPyTorch comparison is ``benchmarks/speed/bench_pfedhgp_gpytorch.py``.

Usage: ``python benchmarks/speed/bench_pfedhgp.py [--quick] [--plot out.png]
[--only rounds|scaling|exact|clients]``
"""

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from skfed import PFedHGPRegressor
from skfed.federated import Federation
from skfed.gaussian_process._covariance import kernel_matrix
from skfed.metrics import gaussian_nll


def make(T, n, d=2, seed=0, n_outputs=None):
    """T clients x n rows; ``n_outputs`` columns of mixed latent functions if given."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (T * n, d))
    groups = np.repeat(np.arange(T), n)
    f = np.column_stack([np.sin(6 * X[:, 0]), np.cos(4 * X[:, -1])])
    if n_outputs is None:
        y = f.sum(1) + 0.2 * rng.normal(size=T)[groups] + 0.1 * rng.normal(size=T * n)
        return X, y, groups
    mix = rng.normal(size=(2, n_outputs))
    y = (f @ mix + 0.2 * rng.normal(size=(T, n_outputs))[groups]
         + 0.1 * rng.normal(size=(T * n, n_outputs)))
    return X, y, groups


def floor_pass(X, groups, M=50):
    """A function forming every client's ``K(X_i, Z)`` and ``K^T K`` once."""
    Z = np.random.default_rng(0).uniform(0, 1, (M, X.shape[1]))
    ls = np.full(X.shape[1], 0.3)
    blocks = [X[groups == k] for k in np.unique(groups)]

    def run():
        for Xk in blocks:
            K = kernel_matrix(Xk, Z, ls, 1.0, 0)
            _ = K.T @ K

    return run


def paired_round_ratios(X, y, groups, optimizer, repeat=9, **kw):
    """Process seconds of rounds and of floor passes, interleaved, and their ratios.

    The steps of a fit (``n_rounds`` large, so that no round is the last)
    are driven directly: set-up round and two warm-up rounds first, then
    ``repeat`` times: a floor pass, two rounds, a floor pass. Each ratio is
    the mean of the two rounds over the mean of the two floor passes.

    Returns
    -------
    rounds, floors, ratios : ndarray of shape (repeat,)
    """
    model = PFedHGPRegressor(inference="variational",
                             optimizer=optimizer, n_rounds=10_000, n_inducing_global=50,
                             n_inducing_local=20, init_lengthscale_global=0.3,
                             init_lengthscale_local=0.1, random_state=0, normalize_y=False,
                             normalize_X=False, **kw)
    n_outputs = None if y.ndim == 1 else y.shape[1]
    model._check_params()
    steps = model._steps_algorithm(X.shape[1], n_outputs)
    fed = Federation.from_arrays(X, y, groups)
    rng = np.random.default_rng(0)
    states = [steps.client_init(c, rng) for c in fed.clients]
    server = list(steps.server_init(rng))  # [state, broadcast]

    def one_round():
        msgs = {}
        for k, c in enumerate(fed.clients):
            states[k], msgs[k] = steps.client_step(c, states[k], server[1], rng)
        server[0], server[1] = steps.server_step(server[0], msgs, rng)

    floor = floor_pass(X, groups)
    clock = time.process_time
    with threadpool_limits(1, "blas"):
        for _ in range(3):  # set-up round, then warm-up (numba loads its cache)
            one_round()
        floor()
        rounds, floors = [], []
        for _ in range(repeat):
            tic = clock()
            floor()
            t1 = clock()
            one_round()
            one_round()
            t2 = clock()
            floor()
            t3 = clock()
            rounds.append((t2 - t1) / 2)
            floors.append((t1 - tic + t3 - t2) / 2)
    rounds, floors = np.array(rounds), np.array(floors)
    return rounds, floors, rounds / floors


def fit_time(X, y, groups, n_rounds=10, repeat=3):
    """Median process seconds of a closed-form fit (one local step per round)."""
    times = []
    for _ in range(repeat):
        model = PFedHGPRegressor(inference="variational",
                                 optimizer="cavi", n_rounds=n_rounds, local_steps=1,
                                 n_inducing_global=50, n_inducing_local=20,
                                 init_lengthscale_global=0.3, init_lengthscale_local=0.1,
                                 random_state=0, normalize_y=False, normalize_X=False)
        tic = time.process_time()
        with threadpool_limits(1, "blas"):
            model.fit(X, y, groups=groups)
        times.append(time.process_time() - tic)
    return float(np.median(times))


def rounds_against_floor(quick):
    """Scalar and multi-output rounds against the floor, both optimizers."""
    T, n = (10, 500) if quick else (100, 2000)
    X, y, groups = make(T, n)
    kernel_matrix(X[:2], X[:2], np.ones(2), 1.0, 0)  # compile
    repeat = 3 if quick else 9
    for opt in ("cavi", "paper"):
        r, f, ratio = paired_round_ratios(X, y, groups, opt, repeat=repeat, local_steps=1)
        print(f"{opt:5s} T={T} n={n} (local_steps=1): round median {np.median(r):.3f} s, "
              f"floor K(X,Z), K^T K median {np.median(f):.3f} s; ratio median "
              f"{np.median(ratio):.2f} (range {ratio.min():.2f}-{ratio.max():.2f}, "
              f"{repeat} pairs)")
    R = 2
    Xm, Ym, gm = make(T, n, n_outputs=3)
    for opt in ("cavi", "paper"):
        r, f, ratio = paired_round_ratios(Xm, Ym, gm, opt, repeat=repeat, local_steps=1,
                                          n_latents=R)
        print(f"{opt:5s} multi-output Q=3 R={R} T={T} n={n}: round median {np.median(r):.3f} s, "
              f"R x floor median {R * np.median(f):.3f} s; ratio median "
              f"{np.median(ratio / R):.2f} (range {ratio.min() / R:.2f}-{ratio.max() / R:.2f})")


def scaling(quick, plot=None):
    """Fit time against rows per client and against clients (log-log slopes, plot)."""
    sizes = [1000, 2000, 4000, 8000, 16000] if not quick else [100, 200, 400]
    times = [fit_time(*make(5, m)) for m in sizes]
    slope_n = np.polyfit(np.log(sizes), np.log(times), 1)[0]
    print("rows per client (5 clients)", sizes, "fit s (10 rounds)", np.round(times, 3),
          f"log-log slope {slope_n:.2f}")
    clients = [5, 10, 20, 40, 80] if not quick else [3, 6, 12]
    ctimes = [fit_time(*make(c, 1000)) for c in clients]
    slope_t = np.polyfit(np.log(clients), np.log(ctimes), 1)[0]
    print("clients (1,000 rows each)", clients, "fit s (10 rounds)", np.round(ctimes, 3),
          f"log-log slope {slope_t:.2f}")
    if plot:
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter

        fig, ax = plt.subplots(1, 2, figsize=(8, 3.5))
        for a, x, t, label in ((ax[0], sizes, times, "rows per client (5 clients)"),
                               (ax[1], clients, ctimes, "clients (1,000 rows each)")):
            a.loglog(x, t, "o-", label="fit, 10 rounds")
            a.loglog(x, t[0] * np.asarray(x) / x[0], "k:", label="linear")
            a.set(xlabel=label, ylabel="process seconds")
            a.set_xticks(x, [str(v) for v in x])
            a.xaxis.set_minor_formatter(NullFormatter())
            a.legend()
        fig.tight_layout()
        fig.savefig(plot)


def against_exact_gp(quick):
    """A single-client global-only fit beside scikit-learn's exact GP (time, NLL)."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    n_single = 1000 if not quick else 300
    Xa, ya, _ = make(1, n_single + 500, seed=1)
    Xs, ys, Xt, yt = Xa[:n_single], ya[:n_single], Xa[n_single:], ya[n_single:]
    tic = time.perf_counter()
    gpr = GaussianProcessRegressor(C(1.0) * RBF(0.3) + WhiteKernel(0.01)).fit(Xs, ys)
    t_sk = time.perf_counter() - tic
    mu, sd = gpr.predict(Xt, return_std=True)
    tic = time.perf_counter()
    ours = PFedHGPRegressor(inference="variational",
                            components=("global",), optimizer="cavi", n_rounds=20,
                            n_inducing_global=50, init_lengthscale_global=0.3,
                            random_state=0, normalize_y=False, normalize_X=False).fit(Xs, ys)
    t_ours = time.perf_counter() - tic
    mu2, sd2 = ours.predict(Xt, return_std=True)
    print(f"exact sklearn GPR: {t_sk:.2f} s, NLL {gaussian_nll(yt, mu, sd):.3f}; "
          f"pFedHGP global-only M=50 (cavi, 20 rounds): {t_ours:.2f} s, "
          f"NLL {gaussian_nll(yt, mu2, sd2):.3f}")


def many_small_clients(quick, T=500, n=40, d=1, repeat=7):
    """Per-client process time of a closed-form round over many small clients.

    The steps are driven as in :func:`paired_round_ratios` (set-up round and
    two warm-up rounds first); each repeat times two consecutive rounds (the
    global kernel moves every other round) and splits them into the client
    steps and the server steps; then the same rounds through the in-process
    engine (transport, message checks, ledger, per-client random streams).
    Prints medians over the repeats, in ms per client and round.
    """
    from skfed.federated import Ledger
    from skfed.federated._engine import InProcessTransport, _collect

    if quick:
        T, repeat = 100, 3
    for n_outputs in (None, 3):
        X, y, groups = make(T, n, d=d, n_outputs=n_outputs)
        kw = {} if n_outputs is None else {"n_latents": 2}
        model = PFedHGPRegressor(inference="variational",
                                 optimizer="cavi", n_rounds=10_000, n_inducing_global=20,
                                 n_inducing_local=10, random_state=0, **kw)
        model._check_params()
        steps = model._steps_algorithm(d, n_outputs)
        fed = Federation.from_arrays(X, y, groups)
        rng = np.random.default_rng(0)
        states = [steps.client_init(c, rng) for c in fed.clients]
        server = list(steps.server_init(rng))

        def one_round(split):
            tic = time.process_time()
            msgs = {}
            for k, c in enumerate(fed.clients):
                states[k], msgs[k] = steps.client_step(c, states[k], server[1], rng)
            mid = time.process_time()
            server[0], server[1] = steps.server_step(server[0], msgs, rng)
            split[0] += mid - tic
            split[1] += time.process_time() - mid

        transport = InProcessTransport(steps, fed, 0)
        transport.init()
        transport.states = states
        ledger = Ledger()
        asked = np.arange(T)

        def engine_round(rnd):
            ledger.record_broadcast(rnd, transport.labels, server[1])
            msgs = _collect(transport.round(rnd, asked, server[1]), asked, transport.labels,
                            rnd, "raise", ledger)
            server[0], server[1] = steps.server_step(server[0], msgs, rng)

        reps = repeat if n_outputs is None else max(2, repeat // 3)  # ILMM: slow rounds
        with threadpool_limits(1, "blas"):
            for _ in range(3):
                one_round([0.0, 0.0])
            client, srv, engine = [], [], []
            for r in range(reps):
                split = [0.0, 0.0]
                one_round(split)
                one_round(split)
                client.append(split[0] / 2)
                srv.append(split[1] / 2)
                tic = time.process_time()
                engine_round(2 * r)
                engine_round(2 * r + 1)
                engine.append((time.process_time() - tic) / 2)
        ms = 1e3 / T
        name = "scalar" if n_outputs is None else f"multi-output Q={n_outputs} R=2"
        print(f"{name:24s} T={T} n={n} d={d} M=20 M_i=10, ms per client and round "
              f"(median of {reps}): client steps {np.median(client) * ms:.3f}, "
              f"server step {np.median(srv) * ms:.3f}, "
              f"round via the engine {np.median(engine) * ms:.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", default=None, help="file for the scaling plot")
    parser.add_argument("--only", choices=("rounds", "scaling", "exact", "clients"), default=None)
    args = parser.parse_args()
    if args.only in (None, "rounds"):
        rounds_against_floor(args.quick)
    if args.only in (None, "scaling"):
        scaling(args.quick, args.plot)
    if args.only in (None, "exact"):
        against_exact_gp(args.quick)
    if args.only in (None, "clients"):
        many_small_clients(args.quick)


if __name__ == "__main__":
    main()
