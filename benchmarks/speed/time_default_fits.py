"""CPU time of one default fit of each skfed estimator on each real grouped data set.

Issue 14's budget: no default fit on these data sets takes more than 30 s on one core. The
benchmark's report times each fold's fit in wall-clock seconds, which a loaded machine
inflates; this script measures process time of one fit on *all* rows of a data set (the
largest fit the data allow), one BLAS thread, after a numba warm-up on a small slice, so it
measures the method, not the load (CPU contention still costs some: state the load beside
the numbers).

Estimators at their defaults, as the real-data benchmark fits them: ``PFedHGPRegressor()``,
``PersonalizedTensorRegressor()`` (regression sets), ``DPFedDROClassifier(epsilon=None)``
(classification sets), all with ``random_state=100``.

Run::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/speed/time_default_fits.py
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/speed/time_default_fits.py \
        --datasets hsb82
"""

import argparse
import os
import time
import warnings

import numpy as np

from skfed import DPFedDROClassifier, PersonalizedTensorRegressor, PFedHGPRegressor
from skfed.datasets import MULTILEVEL_DATASETS, load_multilevel

BUDGET_S = 30.0


def _models(task):
    if task == "classification":
        return {"DPFedDROClassifier(epsilon=None)": lambda: DPFedDROClassifier(
            epsilon=None, random_state=100)}
    return {"PFedHGPRegressor()": lambda: PFedHGPRegressor(random_state=100),
            "PersonalizedTensorRegressor()": lambda: PersonalizedTensorRegressor(
                random_state=100)}


def time_fit(make, X, y, groups):
    """Process seconds of one fit (after a warm-up fit on a small slice)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keep = np.isin(groups, np.unique(groups)[:3])
        make().set_params(n_rounds=2).fit(X[keep], y[keep], groups=groups[keep])
        start = time.process_time()
        make().fit(X, y, groups=groups)
        return time.process_time() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(MULTILEVEL_DATASETS))
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print("| data set | rows | sites | estimator | CPU s (one fit, all rows) | < 30 s |")
    print("|---|---|---|---|---|---|")
    for name in args.datasets:
        data = load_multilevel(name)
        X, y, groups = data.data, data.target, data.groups
        for label, make in _models(data.task).items():
            seconds = time_fit(make, X, y, groups)
            print(f"| {name} | {len(y)} | {np.unique(groups).size} | {label} | {seconds:.1f} | "
                  f"{'yes' if seconds < BUDGET_S else '**no**'} |", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
