"""Time and accuracy of the noise calibration (not a test; issue 16, item 2).

Criterion: a calibration returns a noise multiplier whose epsilon, computed
directly with dp-accounting (RDP or PLD accountant at the default
discretization), is <= the target and within 0.1% of it, in seconds.

1. ``calibrate_noise_multiplier`` on a fixed grid of (target_epsilon, count,
   sampling_probability) with ``target_delta=1e-5``, RDP and PLD: time, the
   multiplier and the directly computed epsilon.
2. ``DPFedDROClassifier(accountant=acc, target_epsilon=3.7299, target_delta=1e-6)``
   (T=50 rounds, the paper's budget): time of the privacy plan alone (cache
   cleared), the per-round epsilon, the spent epsilon; then the fit time on a
   small data set (5 clients x 100 rows, 10 features, 3 classes).

Run: ``python benchmarks/speed/calibration.py [--skip-grid] [--skip-fit]``.
"""

import argparse
import math
import time

import numpy as np

from skfed.linear_model import DPFedDROClassifier
from skfed.linear_model import _privacy_plan
from skfed.privacy import calibrate_noise_multiplier, epsilon_spent, gaussian_event

GRID = [  # (target_epsilon, count, sampling_probability)
    (1.0, 1, 1.0), (10.0, 1, 1.0), (3.0, 5, 1.0), (2.0, 20, 1.0), (1.0, 100, 1.0),
    (8.0, 1000, 0.01), (50.0, 3, 1.0),
]


def run_grid():
    print("target_eps count q accountant | seconds multiplier epsilon(direct) rel.gap")
    for target, count, q in GRID:
        for acc in ("rdp", "pld"):
            t0 = time.perf_counter()
            try:
                z = calibrate_noise_multiplier(target, 1e-5, count, q, accountant=acc)
            except Exception as exc:  # noqa: BLE001 - the "before" code crashes here
                print(f"{target} {count} {q} {acc} | {time.perf_counter() - t0:.2f} s "
                      f"{type(exc).__name__}: {str(exc)[:60]}")
                continue
            seconds = time.perf_counter() - t0
            eps = epsilon_spent(gaussian_event(z, count, q), 1e-5, acc)
            print(f"{target} {count} {q} {acc} | {seconds:.2f} s z={z:.5f} "
                  f"eps={eps:.5f} gap={(target - eps) / target:+.2e}", flush=True)


def make_data(seed=0, n_clients=5, n_per=100, n_features=10, n_classes=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_clients * n_per, n_features))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    W = rng.standard_normal((n_classes, n_features))
    y = np.argmax(X @ W.T + 0.3 * rng.standard_normal((len(X), n_classes)), axis=1)
    return X, y, np.repeat(np.arange(n_clients), n_per)


def run_dro(skip_fit):
    X, y, groups = make_data()
    for acc in ("paper", "rdp", "pld"):
        clf = DPFedDROClassifier(accountant=acc, target_epsilon=3.7299, target_delta=1e-6,
                                 random_state=0)
        _privacy_plan._cached_plan.cache_clear()
        t0 = time.perf_counter()
        eps_round, _, _ = clf._privacy_plan()
        plan_s = time.perf_counter() - t0
        line = (f"DRO {acc}: plan {plan_s:.2f} s, per-round eps "
                f"{math.hypot(*eps_round):.5f}")
        if not skip_fit:
            _privacy_plan._cached_plan.cache_clear()
            t0 = time.perf_counter()
            clf.fit(X, y, groups=groups)
            line += (f", fit {time.perf_counter() - t0:.2f} s, spent "
                     f"{clf.privacy_spent_['epsilon']:.5f}")
        print(line, flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-grid", action="store_true")
    parser.add_argument("--skip-fit", action="store_true")
    args = parser.parse_args()
    if not args.skip_grid:
        run_grid()
    run_dro(args.skip_fit)
