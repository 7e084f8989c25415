"""PFedHGPRegressor (one client, global component only) beside GPyTorch's SVGP (not a test).

Both fit the same whitened sparse variational GP: squared-exponential kernel
with ARD lengthscales, M inducing inputs (learned, same starting points),
Gaussian likelihood, the same initial hyperparameters, full-batch Adam at
learning rate 0.1 for the same number of steps. For ``PFedHGPRegressor`` with
``components=("global",)`` and ``optimizer="paper"`` one round is one server
Adam step on the global block (the client has no local parameters), so
``n_rounds`` is the step budget. Reports wall time, the ELBO reached (both in
nats over all rows, raw ``y`` scale) and the test NLL; scikit-learn's exact
``GaussianProcessRegressor`` is listed for reference. BLAS and torch run on
one thread each. A two-step warm-up fit of each comes first, untimed (numba
loads, or on a fresh install compiles, its kernels; torch initializes); then
our time is the whole fit, GPyTorch's its optimization loop.

Needs the ``gpytorch`` extra (torch 2.13.0 CPU build and gpytorch:
``pip install -e ".[gpytorch]"``). Run:
``python benchmarks/speed/bench_pfedhgp_gpytorch.py [--rows 1000] [--steps 200] [--inducing 50]``.
"""

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from skfed import PFedHGPRegressor
from skfed.metrics import gaussian_nll


def make(n, d=2, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, d))
    y = np.sin(6 * X[:, 0]) + np.cos(4 * X[:, 1]) + 0.1 * rng.normal(size=n)
    return X, y


def fit_gpytorch(X, y, Z0, steps, lengthscale, noise):
    import gpytorch
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    Xt = torch.as_tensor(X, dtype=torch.float64)
    yt = torch.as_tensor(y, dtype=torch.float64)

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            dist = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            strategy = gpytorch.variational.VariationalStrategy(
                self, Z, dist, learn_inducing_locations=True)  # whitened by default
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=Z.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    model = SVGP(torch.as_tensor(Z0, dtype=torch.float64)).double()
    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    model.covar_module.base_kernel.lengthscale = lengthscale
    model.covar_module.outputscale = 1.0
    likelihood.noise = noise
    model.train()
    likelihood.train()
    optimizer = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=0.1)
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=X.shape[0])
    tic = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = -mll(model(Xt), yt)
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - tic
    with torch.no_grad():
        elbo = float(mll(model(Xt), yt)) * X.shape[0]  # gpytorch averages over rows
    model.eval()
    likelihood.eval()
    return model, likelihood, seconds, elbo


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--inducing", type=int, default=50)
    args = parser.parse_args()
    import torch

    X, y = make(args.rows + 500)
    X, y, Xt, yt = X[:args.rows], y[:args.rows], X[args.rows:], y[args.rows:]
    Z0 = X[np.random.default_rng(0).choice(args.rows, args.inducing, replace=False)]
    ls, noise = 0.3, 0.01

    with threadpool_limits(1, "blas"):
        # warm-up, not timed: numba loads (or, on a fresh install, compiles) its
        # kernels, torch and gpytorch initialize
        PFedHGPRegressor(components=("global",), optimizer="paper", n_rounds=2, ard=True,
                         init_inducing_global=Z0, random_state=0, normalize_y=False,
                         normalize_X=False).fit(X, y)
        fit_gpytorch(X, y, Z0, 2, ls, noise)

        tic = time.perf_counter()
        ours = PFedHGPRegressor(components=("global",), optimizer="paper", n_rounds=args.steps,
                                ard=True, init_inducing_global=Z0, init_lengthscale_global=ls,
                                init_variance_global=1.0, init_noise=noise, server_lr=0.1,
                                random_state=0, normalize_y=False,
                                normalize_X=False).fit(X, y)
        t_ours = time.perf_counter() - tic
        mu, sd = ours.predict(Xt, return_std=True)
        nll_ours = gaussian_nll(yt, mu, sd)

        model, likelihood, t_gp, elbo_gp = fit_gpytorch(X, y, Z0, args.steps, ls, noise)
        with torch.no_grad():
            pred = likelihood(model(torch.as_tensor(Xt, dtype=torch.float64)))
            nll_gp = gaussian_nll(yt, pred.mean.numpy(), np.sqrt(pred.variance.numpy()))

        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, WhiteKernel
        from sklearn.gaussian_process.kernels import ConstantKernel as C

        tic = time.perf_counter()
        exact = GaussianProcessRegressor(C(1.0) * RBF([ls, ls]) + WhiteKernel(noise)).fit(X, y)
        t_sk = time.perf_counter() - tic
        mu_sk, sd_sk = exact.predict(Xt, return_std=True)
        nll_sk = gaussian_nll(yt, mu_sk, sd_sk)
        lml = exact.log_marginal_likelihood_value_

    print(f"{args.rows} rows, d=2, M={args.inducing}, {args.steps} Adam steps (lr 0.1), "
          f"torch {torch.__version__}\n")
    print("| model | fit time (s) | ELBO (nats) | test NLL (per point) |")
    print("|---|---|---|---|")
    print(f"| PFedHGPRegressor, global only, paper mode | {t_ours:.2f} | {ours.elbo_[-1]:.1f} "
          f"| {nll_ours:.3f} |")
    print(f"| GPyTorch SVGP (VariationalStrategy, Cholesky) | {t_gp:.2f} | {elbo_gp:.1f} "
          f"| {nll_gp:.3f} |")
    print(f"| scikit-learn GaussianProcessRegressor (exact, log ML {lml:.1f}) | {t_sk:.2f} | "
          f"- | {nll_sk:.3f} |")
    print(f"\ntime ratio PFedHGP / GPyTorch: {t_ours / t_gp:.2f}")


if __name__ == "__main__":
    main()
