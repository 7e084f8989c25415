"""Ideas for, and a diagnosis of, PFedHGP's new-site gap to Pooled Ridge on the real regression sets.

The collapsed default's population prediction is the generalized least squares
fixed effects plus the global GP; on Produc it is above Pooled Ridge's
(``doc/results/real_data.md``). On the new-site folds of the real-data
benchmark (``GroupKFold``, split seeds given by ``--seeds``; the selection
seeds are 0-2), new-site RMSE of:

* ``mundlak``: Mundlak's within-between fixed effects, each site's mean of
  ``X`` appended as covariates (a new site's from its own rows), in the mixed
  model (``MixedLMRegressor``) and in Pooled Ridge, beside both without them;
* ``pooled``: PFedHGP's population prediction plus a pooled least-squares line
  fitted to its training residuals (the population-averaged linear trend), beside
  PFedHGP and Pooled Ridge;
* ``combine``: convex combinations of PFedHGP's population prediction and Pooled
  Ridge's: half and half, and the best weight for each seed chosen on its test
  rows (an upper bound on what any weight chosen on the training sites can do);
* ``gls``: where the gap comes from. Pooled Ridge, MixedLM, PFedHGP, and PFedHGP
  with only its local GP and flat slopes (``components=("local",),
  slope_prior="flat", random_effects="none"``), whose population prediction is
  its fixed effects alone: the generalized least squares line under the local
  GP's covariance.

Usage::

    python benchmarks/defaults/pfedhgp_new_site.py mundlak --datasets produc sleepstudy --seeds 0-2
    python benchmarks/defaults/pfedhgp_new_site.py pooled --datasets produc sleepstudy --seeds 0-2
    python benchmarks/defaults/pfedhgp_new_site.py combine --datasets produc sleepstudy --seeds 0-2
    python benchmarks/defaults/pfedhgp_new_site.py gls --datasets sleepstudy exam --seeds 0-2
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.linear_model import LinearRegression, Ridge

from skfed.baselines import MixedLMRegressor, PooledEstimator
from skfed.benchmark._real_data import _splits
from skfed.datasets import load_multilevel
from skfed.gaussian_process import PFedHGPRegressor

sys.path.insert(0, str(Path(__file__).parent))
from pfedhgp_windowed import _seeds  # noqa: E402


def site_means(X, groups):
    """Each row's site mean of ``X``."""
    M = np.empty_like(X)
    for k in np.unique(groups):
        M[groups == k] = X[groups == k].mean(0)
    return M


def mundlak(X, y, g, tr, te):
    out = {}
    Xa_tr = np.hstack([X[tr], site_means(X[tr], g[tr])])
    Xa_te = np.hstack([X[te], site_means(X[te], g[te])])
    for name, make in (("MixedLM", MixedLMRegressor), ("Pooled Ridge",
                                                      lambda: PooledEstimator(Ridge()))):
        out[name] = make().fit(X[tr], y[tr], groups=g[tr]).predict(X[te])
        out[name + " + site means"] = make().fit(Xa_tr, y[tr], groups=g[tr]).predict(Xa_te)
    return out


def pooled(X, y, g, tr, te, seed):
    model = PFedHGPRegressor(random_state=seed).fit(X[tr], y[tr], groups=g[tr])
    mu_tr, mu_te = model.predict(X[tr]), model.predict(X[te])
    line = LinearRegression().fit(X[tr], y[tr] - mu_tr)
    return {"Pooled Ridge": PooledEstimator(Ridge()).fit(X[tr], y[tr], groups=g[tr])
            .predict(X[te]),
            "PFedHGP": mu_te, "PFedHGP + pooled residual line": mu_te + line.predict(X[te])}


def combine(X, y, g, tr, te, seed):
    a = PFedHGPRegressor(random_state=seed).fit(X[tr], y[tr], groups=g[tr]).predict(X[te])
    b = PooledEstimator(Ridge()).fit(X[tr], y[tr], groups=g[tr]).predict(X[te])
    return {"Pooled Ridge": b, "PFedHGP": a, "half and half": (a + b) / 2}


def gls(X, y, g, tr, te, seed):
    lines = PFedHGPRegressor(components=("local",), slope_prior="flat", random_effects="none",
                             random_state=seed).fit(X[tr], y[tr], groups=g[tr])
    return {"Pooled Ridge": PooledEstimator(Ridge()).fit(X[tr], y[tr], groups=g[tr])
            .predict(X[te]),
            "MixedLM": MixedLMRegressor().fit(X[tr], y[tr], groups=g[tr]).predict(X[te]),
            "PFedHGP": PFedHGPRegressor(random_state=seed).fit(X[tr], y[tr], groups=g[tr])
            .predict(X[te]),
            "PFedHGP's fixed effects under its local GP alone": lines.predict(X[te])}


def best_combination(y, a, b):
    """The convex combination ``w a + (1 - w) b`` of least squared error on ``y``, and ``w``."""
    d = a - b
    w = float(np.clip(np.dot(y - b, d) / max(np.dot(d, d), 1e-300), 0.0, 1.0))
    return w * a + (1 - w) * b, w


MODES = {"mundlak": mundlak, "pooled": pooled, "combine": combine, "gls": gls}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=list(MODES))
    p.add_argument("--datasets", nargs="*", default=["produc", "sleepstudy"])
    p.add_argument("--seeds", default="0-2")
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    for name in a.datasets:
        d = load_multilevel(name)
        X, y, g = d.data, d.target, d.groups
        rmse = {}
        weights = []
        for seed in _seeds(a.seeds):
            preds, rows = {}, []
            for tr, te in _splits(X, y, g, seed)["new-site"]:
                args = (X, y, g, tr, te) if a.what == "mundlak" else (X, y, g, tr, te, seed)
                for k, v in MODES[a.what](*args).items():
                    preds.setdefault(k, []).append(v)
                rows.append(te)
            yt = y[np.concatenate(rows)]
            preds = {k: np.concatenate(v) for k, v in preds.items()}
            if a.what == "combine":
                preds["best weight on the test rows"], w = best_combination(
                    yt, preds["PFedHGP"], preds["Pooled Ridge"])
                weights.append(w)
            for k, v in preds.items():
                rmse.setdefault(k, []).append(np.sqrt(np.mean((yt - v) ** 2)))
        print(name, "new-site RMSE, mean over seeds:",
              ", ".join(f"{k} {np.mean(v):.4g}" for k, v in rmse.items()),
              f"(PFedHGP's best weights: {', '.join(f'{w:.2f}' for w in weights)})"
              if weights else "", flush=True)


if __name__ == "__main__":
    main()
