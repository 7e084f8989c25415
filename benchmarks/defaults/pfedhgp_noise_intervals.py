"""Seen-site intervals of ``noise="per_client"`` with the noise offsets' uncertainty added.

``PFedHGPRegressor(noise="per_client")`` predicts a seen site with its own noise
variance ``s2_i`` at the offset's mode. With about ten training rows a site
(sleepstudy, ChickWeight) its seen-site 95% coverage falls below 0.92. Does
adding the offset's posterior uncertainty to the predictive variance bring it
back? On the seen-site folds of the real-data benchmark (split seeds given by
``--seeds``; the selection seeds are 0-2), each row's predictive variance
``sd^2`` of the fit, then ``sd^2 + s2_i (f_i - 1)`` with the factor ``f_i``:

* ``plug``: 1 (the fit's own intervals);
* ``lognormal``: ``exp(v_i / 2)``, the mean of ``exp(e_i)`` about its mode under
  the Laplace approximation the fit uses (posterior variance ``v_i = 1 / (n_i / 2
  + 1 / spread^2)``, ``n_i`` the site's training rows);
* ``chi2``: ``n_i / (n_i - 2)``, the mean of a noise variance over its estimate from
  ``n_i`` Gaussian rows under a flat prior on its log (the largest of the three);
* ``quadrature``: the mean of ``exp(e - mode)`` under the offset's likelihood from
  ``n_i`` rows and its ``N(0, spread^2)`` prior, by quadrature.

Prints the seen-site RMSE, then coverage and NLL per factor, one line per data
set and seed::

    python benchmarks/defaults/pfedhgp_noise_intervals.py --datasets sleepstudy produc --seeds 0-2
"""

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm

from skfed.benchmark._real_data import _splits
from skfed.datasets import load_multilevel
from skfed.gaussian_process import PFedHGPRegressor

sys.path.insert(0, str(Path(__file__).parent))
from pfedhgp_windowed import _seeds  # noqa: E402


def quadrature_factor(n_rows, spread2):
    """Mean of ``exp(e - mode)`` under ``exp(-n e / 2 - n exp(-e) / 2) N(e; 0, spread2)``,
    for each entry of ``n_rows`` (computed once per distinct row count)."""
    e = np.linspace(-6.0, 6.0, 4001)
    counts, index = np.unique(np.atleast_1d(n_rows), return_inverse=True)
    out = []
    for n in counts:
        logp = -n * e / 2 - n * np.exp(-e) / 2 - e**2 / (2 * spread2)
        w = np.exp(logp - logp.max())
        out.append(np.sum(w * np.exp(e - e[np.argmax(logp)])) / np.sum(w))
    return np.array(out)[index]


def factors(n_rows, spread2):
    v = 1.0 / (n_rows / 2 + 1.0 / spread2)
    return {"plug": np.ones_like(v), "lognormal": np.exp(v / 2),
            "chi2": n_rows / np.maximum(n_rows - 2, 1),
            "quadrature": quadrature_factor(n_rows, spread2)}


def measure(name, seed):
    """One data set and split seed: seen-site RMSE, and coverage and NLL per factor."""
    d = load_multilevel(name)
    X, y, g = d.data, d.target, d.groups
    sse = n = 0.0
    acc = {}
    for tr, te in _splits(X, y, g, seed)["seen-site"]:
        model = PFedHGPRegressor(random_state=seed, noise="per_client").fit(
            X[tr], y[tr], groups=g[tr])
        mu, sd = model.predict(X[te], groups=g[te], return_std=True)
        sse += float(np.sum((y[te] - mu) ** 2))
        n += te.size
        site = np.searchsorted(model.clients_, g[te])
        rows = np.array([np.sum(g[tr] == c) for c in model.clients_], dtype=float)[site]
        s2 = model.client_noise_variances_[site]
        for k, f in factors(rows, model.noise_spread_**2).items():
            s = np.sqrt(sd**2 + s2 * (f - 1))
            c = acc.setdefault(k, [0.0, 0.0])
            c[0] += float(np.sum(np.abs(y[te] - mu) <= 1.959964 * s))
            c[1] -= float(norm.logpdf(y[te], mu, s).sum())
    row = {"data": name, "seed": seed, "rmse": round(np.sqrt(sse / n), 5),
           "spread": round(float(model.noise_spread_), 3)}
    row.update({k: {"cov95": round(c[0] / n, 4), "nll": round(c[1] / n, 4)}
                for k, c in acc.items()})
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="*", default=["sleepstudy", "produc", "chickweight"])
    p.add_argument("--seeds", default="0-2")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    for name, seed in ((n, s) for n in args.datasets for s in _seeds(args.seeds)):
        print(json.dumps(measure(name, seed)), flush=True)


if __name__ == "__main__":
    main()
