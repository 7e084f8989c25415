"""What fewer coordinate-ascent sweeps would buy the multi-output closed-form round.

The multi-output client's closed form (``IlmmClosedForm.sweeps``, default
``(3, 1)``) runs 3 sweeps of (``q``, loadings) plus a last ``q`` at the
round's start and 1 sweep after each local step. Fewer sweeps cost less per
round but change the fits. For each setting this prints:

* the round against the floor (as ``bench_pfedhgp.py --only rounds``: 20
  clients x 2,000 rows, Q=3, R=2, ``local_steps=1``, 5 pairs), per latent;
* the fit: test RMSE and final ELBO per training row of ``PFedHGPRegressor``
  (closed form, its defaults otherwise, ``n_rounds`` 30) on the same
  generator, 10 clients x 100 training rows and 100 test rows each, seeds
  0-2.

This measures a choice left open (issue 17: the 3-floor target); it tunes no
default. Usage: ``python benchmarks/speed/bench_ilmm_sweeps.py [--quick]``.
"""

import argparse
import warnings

import numpy as np

from bench_pfedhgp import make, paired_round_ratios
from skfed import PFedHGPRegressor
from skfed.gaussian_process._covariance import kernel_matrix
from skfed.gaussian_process._optimizers import IlmmClosedForm

SETTINGS = [(3, 1), (2, 1), (1, 1), (1, 0)]


def fit_quality(seed, n_rounds):
    X, Y, groups = make(10, 200, seed=seed, n_outputs=3)
    train = np.tile(np.arange(200) < 100, 10)
    model = PFedHGPRegressor(inference="variational",
                             n_latents=2, n_rounds=n_rounds, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X[train], Y[train], groups=groups[train])
    pred = model.predict(X[~train], groups=groups[~train])
    rmse = float(np.sqrt(np.mean((pred - Y[~train]) ** 2)))
    return rmse, model.elbo_[-1] / train.sum()


def main(quick):
    X, Y, groups = make(5 if quick else 20, 2000, n_outputs=3)
    kernel_matrix(X[:2], X[:2], np.ones(2), 1.0, 0)  # compile
    for sweeps in SETTINGS:
        IlmmClosedForm.sweeps = sweeps
        _, _, ratio = paired_round_ratios(X, Y, groups, "cavi", repeat=2 if quick else 5,
                                          local_steps=1, n_latents=2)
        fits = [fit_quality(seed, 5 if quick else 30) for seed in range(1 if quick else 3)]
        rmse, elbo = np.array(fits).T
        print(f"sweeps {sweeps}: round {np.median(ratio) / 2:.2f} floors per latent; test RMSE "
              f"{np.round(rmse, 4).tolist()}, final ELBO per row {np.round(elbo, 4).tolist()}",
              flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    main(parser.parse_args().quick)
