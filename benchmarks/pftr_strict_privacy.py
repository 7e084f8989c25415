"""Strict private PTR fits against the paper's protocol on the Figure-2 design (n_k = 250).

Protocol (fixed): the data, truth, step size (0.08), rounds (20) and Stage-II settings of
``skfed/benchmark/_tensor_regression.py`` at n_k = 250, seeds 0-4, eps = 20, delta = 0.1.
Rows:

* "paper": ``privacy_mode="paper"`` with the benchmark's ADMM start (the paper rows of
  ``doc/results/tensor_regression.md``; no DP guarantee);
* "non-private, init=admm / moment": the two starts without noise;
* "strict, tau_e=c": the default strict fit (private moment start, 21 releases) with
  ``tau_x`` the 0.9-quantile of the chi distribution with p = 50 degrees of freedom (a public
  bound: the design's covariate entries are i.i.d. N(0, 1)) and ``tau_e`` in {1, 2, 4}.

Criterion: mean Frobenius errors of A_0 and of the personalized A_k over the 5 seeds (lower is
better). It is a measurement of what strictness costs, not a tuning run: no default is chosen
from it. Run from the repository root: ``python benchmarks/pftr_strict_privacy.py``.
"""

import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import chi

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skfed.benchmark._tensor_regression import (  # noqa: E402
    ADMM, FED, FED_STEP, RANK, SHAPE, _data, _errors,
)
from skfed.tensor import PersonalizedTensorRegressor  # noqa: E402
from skfed.tensor._stages import admm_init  # noqa: E402

N_K, SEEDS, EPS, DELTA = 250, range(5), 20.0, 0.1
TAU_X = float(chi.ppf(0.9, 50))


def main():
    rows = {}
    for seed in SEEDS:
        X, y, groups, truth = _data(N_K, seed)
        first = groups == 0
        init = admm_init(X[first], y[first], **ADMM)[0].reshape(truth.shared_coef.shape)
        base = dict(rank=RANK, step_size=2 * FED_STEP[N_K], random_state=512026 + 10000 * seed,
                    **SHAPE, **FED)
        fits = {
            "paper (eps=20, no guarantee)": dict(init=init, epsilon=EPS, delta=DELTA,
                                                  privacy_mode="paper"),
            "non-private, init=admm": dict(init="admm"),
            "non-private, init=moment": dict(init="moment"),
        }
        for tau_e in (1.0, 2.0, 4.0):
            fits[f"strict (eps=20), tau_e={tau_e:g}"] = dict(
                epsilon=EPS, delta=DELTA, tau_x=TAU_X, tau_e=tau_e)
        for name, kw in fits.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                m = PersonalizedTensorRegressor(**base, **kw).fit(X, y, groups=groups)
            err = _errors(m.shared_coef_, m.deviations_, truth)
            rows.setdefault(name, []).append((err["A0_error"], err["A_error"]))
    print(f"n_k={N_K}, seeds {list(SEEDS)}, tau_x={TAU_X:.3f}")
    print("| fit | A0 error | A error |\n| --- | --- | --- |")
    for name, errs in rows.items():
        a0, a = np.mean(errs, axis=0)
        print(f"| {name} | {a0:.4f} | {a:.4f} |")


if __name__ == "__main__":
    main()
