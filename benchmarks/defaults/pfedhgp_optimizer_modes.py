"""PFedHGPRegressor's two optimizers on a small problem: ELBO by round and bytes sent (not a test).

The problem of ``tests/gaussian_process/test_pfedhgp.py`` (3 clients x 25 rows,
scalar ``y``, ``M = 8``, ``M_i = 5``, raw inputs and targets). Both optimizers
run all 20 rounds (``tol=None``) at the estimator's other defaults; printed:
the ELBO after rounds 1, 5, 10 and 20 and the bytes each direction of the
communication ledger carried over the whole fit (the set-up exchange and the
last round's release included).

Run: ``python benchmarks/defaults/pfedhgp_optimizer_modes.py`` (a few seconds).
"""

import argparse
import time

from skfed import PFedHGPRegressor
from skfed.datasets import make_hierarchical_gp


def main():
    d = make_hierarchical_gp(n_clients=3, n_outputs=None, n_train=25, n_test=20,
                             local_lengthscales=(1.0,), local_scales=(0.5,), noise=0.1,
                             random_state=0)
    print("| optimizer | ELBO after round 1 | 5 | 10 | 20 | kB up | kB down | fit s |")
    print("|---|---|---|---|---|---|---|---|")
    for optimizer in ("paper", "cavi"):
        model = PFedHGPRegressor(inference="variational",
                                 optimizer=optimizer, n_rounds=20, tol=None,
                                 n_inducing_global=8, n_inducing_local=5, normalize_y=False,
                                 normalize_X=False, random_state=0)
        tic = time.process_time()
        model.fit(d.X_train, d.y_train, groups=d.groups_train)
        seconds = time.process_time() - tic
        elbo = [f"{model.elbo_[r - 1]:.0f}" for r in (1, 5, 10, 20)]
        ledger = model.communication_
        print(f"| {optimizer} | " + " | ".join(elbo)
              + f" | {ledger.bytes_up / 1e3:.1f} | {ledger.bytes_down / 1e3:.1f} | {seconds:.2f} |")


if __name__ == "__main__":
    # no options: --help prints the docstring, any argument is an error (not ignored)
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
