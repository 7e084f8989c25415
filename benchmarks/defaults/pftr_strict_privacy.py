"""What a strict private PTR fit costs, and why the former strict settings were far off.

Protocol (fixed): the data, truth and Stage-II settings of
``skfed/benchmark/_tensor_regression.py`` at n_k in {50, 250}, replications 1000-1019 (the
tuning replications of ``benchmarks/defaults/pftr_strict_tuning.py``, disjoint from the reported
0-99), (eps, delta) = (20, 0.1). Rows, each changing one thing from the one above:

* "former strict": the strict fit this script measured before (the paper's basic
  composition, ``accountant="paper"``; T_g = 20, eta = 0.08; ``tau_x`` the 0.9-quantile of
  the chi distribution with 50 degrees of freedom, ``tau_e = 1``): 21 releases;
* "+ PLD": the same releases calibrated by the PLD accountant (``accountant="pld"``);
* "+ selected T_g, eta, tau_e": the benchmark's strict rows (``STRICT_*`` of
  ``skfed/benchmark/_tensor_regression.py``: T_g = 2, eta = 1, tau_e = 0.7, tau_x = sqrt(50));
* "same, without noise": those settings at ``epsilon=None`` with ``init="moment"`` (the
  statistical and optimization error of the strict recipe alone);
* "+ split budget": the selected strict rows with the budget split of
  ``benchmarks/defaults/pftr_strict_tuning.py --grid split`` (``SPLIT``: the start's share
  ``init_share`` and the level ``tau_grad`` of each row's projected Stage-I term);
* "split, noiseless start" / "split, noiseless rounds": the split fit with the noise of one
  part removed, to show where its error comes from (diagnostics, not private fits: the start
  is then the noiseless clipped moment passed as ``init``, or the rounds run without noise
  from the split fit's noisy start, drawn as ``MomentInit`` draws it);
* "paper protocol": ``privacy_mode="paper"`` at the authors' settings (the Figure-2 row; no
  DP guarantee), and "single-client" for reference.

Criterion: mean Frobenius errors of A_0 and of the personalized A_k (lower is better) and the
mean per-entry noise standard deviation of a Stage-I release. A measurement, not a tuning
run: no setting is chosen from it. Run from the repository root:
``python benchmarks/defaults/pftr_strict_privacy.py`` (one process, one BLAS thread).
"""

import argparse
import functools
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import chi
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from skfed.benchmark._tensor_regression import (  # noqa: E402
    ADMM, FED, FED_STEP, RANK, SHAPE, SINGLE, STRICT_ROUNDS, STRICT_STEP, STRICT_TAU_E,
    STRICT_TAU_X, _data, _errors,
)
from skfed.privacy import pftr_privacy_spent, pftr_release_plan  # noqa: E402
from skfed.tensor import LocalTwoStageTensorRegressor, PersonalizedTensorRegressor  # noqa: E402
from skfed.tensor._stages import admm_init, clipped_moment  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pftr_strict_tuning import SPLIT  # noqa: E402

SIZES, SEEDS, EPS, DELTA = (50, 250), range(1000, 1020), 20.0, 0.1
FORMER_TAU_X = float(chi.ppf(0.9, 50))


def split_starts(X, y, groups, seed):
    """The clients' mean clipped moment without and with the split fit's start noise."""
    rounds, share, _ = SPLIT
    z = pftr_release_plan(EPS, DELTA, [(1, share), (rounds, 1 - share)], "pld")[0]
    rng = np.random.default_rng(seed)
    clean, noisy, sizes = [], [], []
    for k in np.unique(groups):
        rows = groups == k
        m, _, _ = clipped_moment(X[rows], y[rows], STRICT_TAU_X, STRICT_TAU_E)
        sigma = 2 * STRICT_TAU_E * STRICT_TAU_X / rows.sum() * z
        clean.append(m)
        noisy.append(m + sigma * rng.standard_normal(m.shape))
        sizes.append(rows.sum())
    w = np.array(sizes) / np.sum(sizes)
    return (w @ np.array(clean)).reshape(SHAPE_COEF), (w @ np.array(noisy)).reshape(SHAPE_COEF)


SHAPE_COEF = (5, 5, 10, 5)


@functools.cache
def rounds_epsilon():
    """What the split fit's T_g rounds alone spend at DELTA (PLD): calibrated to it, T_g
    rounds from a given start carry the split fit's round noise (within 1e-4 relative)."""
    rounds, share, _ = SPLIT
    spent = pftr_privacy_spent(EPS, DELTA, rounds + 1, calibration="pld", groups=[
        ("init", 1, share), ("stage_one", rounds, 1 - share)])
    return spent["releases"][1]["epsilon"]


def fits(n_k, init, starts):
    former = dict(epsilon=EPS, delta=DELTA, tau_x=FORMER_TAU_X, tau_e=1.0, step_size=0.08)
    selected = dict(tau_x=STRICT_TAU_X, tau_e=STRICT_TAU_E, step_size=STRICT_STEP,
                    n_rounds=STRICT_ROUNDS)
    rounds, share, fraction = SPLIT
    split = dict(tau_x=STRICT_TAU_X, tau_e=STRICT_TAU_E, step_size=STRICT_STEP,
                 n_rounds=rounds, init_share=share,
                 tau_grad=fraction * STRICT_TAU_E * STRICT_TAU_X)
    return {
        "former strict (paper accountant, T_g=20, eta=0.08)": former,
        "+ PLD": {**former, "accountant": "pld"},
        "+ selected T_g, eta, tau_e (the strict rows)": dict(
            epsilon=EPS, delta=DELTA, accountant="pld", **selected),
        "same, without noise": dict(init="moment", **selected),
        "+ split budget (init_share, tau_grad; the split rows)": dict(
            epsilon=EPS, delta=DELTA, accountant="pld", **split),
        "split, noiseless start (diagnostic)": dict(
            init=starts[0], epsilon=rounds_epsilon(), delta=DELTA, accountant="pld", **split),
        "split, noiseless rounds (diagnostic)": dict(init=starts[1], **split),
        "paper protocol (authors' settings, no guarantee)": dict(
            init=init, epsilon=EPS, delta=DELTA, privacy_mode="paper",
            step_size=2 * FED_STEP[n_k]),
    }


def main():
    t0 = time.perf_counter()
    rows = {}
    with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the paper's protocol, on purpose
        for n_k in SIZES:
            for seed in SEEDS:
                X, y, groups, truth = _data(n_k, seed)
                first = groups == 0
                init = admm_init(X[first], y[first], **ADMM)[0].reshape(
                    truth.shared_coef.shape)
                starts = split_starts(X, y, groups, seed)
                for name, kw in fits(n_k, init, starts).items():
                    m = PersonalizedTensorRegressor(
                        rank=RANK, random_state=512026 + 10000 * seed, **SHAPE,
                        **{**FED, **kw}).fit(X, y, groups=groups)
                    err = _errors(m.shared_coef_, m.deviations_, truth)
                    noise = float(np.nanmean(m.noise_std_))
                    rows.setdefault((n_k, name), []).append(
                        (err["A0_error"], err["A_error"], noise))
                (lam, omega, zeta, rho), eta, omega_ii = SINGLE[n_k]
                single = LocalTwoStageTensorRegressor(
                    rank=RANK, step_size=2 * eta, n_iter=100, alpha=omega_ii / 2,
                    penalty_scaling="none", n_local_iter=30, init_lambda=lam,
                    init_alpha=omega, init_zeta=zeta, init_rho=rho, fit_intercept=False,
                    **SHAPE).fit(X, y, groups=groups)
                err = _errors(single.shared_coefs_, single.deviations_, truth)
                rows.setdefault((n_k, "single-client"), []).append(
                    (err["A0_error"], err["A_error"], 0.0))
    print(f"seeds {SEEDS.start}-{SEEDS.stop - 1}, eps={EPS:g}, delta={DELTA:g}, "
          f"{time.perf_counter() - t0:.0f} s")
    print("| n_k | fit | A0 error | A error | noise sd per entry |\n|---|---|---|---|---|")
    for (n_k, name), errs in rows.items():
        a0, a, noise = np.mean(errs, axis=0)
        print(f"| {n_k} | {name} | {a0:.4f} | {a:.4f} | {noise:.4f} |")


if __name__ == "__main__":
    # no options: --help prints the docstring, any argument is an error (not ignored)
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
