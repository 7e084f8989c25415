"""PFedHGP's hierarchy with collapsed site blocks (issue 27): the windowed hierarchy and real data.

``skfed.gaussian_process._collapsed`` integrates each site's blocks (deviation
GP, local GP, random effects) and the fixed effects out exactly and maximizes
the marginal likelihood by L-BFGS, each evaluation two exchanges of site
statistics. This script measures that inference, in process (the same
arithmetic as the protocol), against the references of
``benchmarks/pfedhgp_windowed.py`` and ``doc/results/real_data.md``:

* ``windowed``: the hierarchy drawn from PFedHGP's own model (8 sites of 30
  rows in windows of 60% of the domain), data seeds 0-9, RMSE / NLL /
  coverage against the Bayes oracle, and the spread of RMSE over random
  starts (every initial value times ``10**U(-1, 1)``).
* ``real``: the regression sets of ``skfed.datasets.load_multilevel`` on the
  seen-site and new-site splits of the real-data benchmark (split seeds given
  by ``--seeds``; the selection seeds are 0-2, the reported seed 100), beside
  statsmodels' MixedLM (the benchmark's random slopes) and Pooled Ridge.

Usage::

    python benchmarks/pfedhgp_collapsed.py windowed --seeds 0-9 --starts 5
    python benchmarks/pfedhgp_collapsed.py real --datasets sleepstudy chickweight --seeds 0
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm
from sklearn.cluster import KMeans
from sklearn.linear_model import Ridge

from skfed.gaussian_process import _collapsed as col

sys.path.insert(0, str(Path(__file__).parent))
from pfedhgp_windowed import _seeds, make_windowed_hierarchy, oracle, scores  # noqa: E402

DEFAULT_START = {"ls_g": 1.0, "var_g": 0.5, "phi": 0.1, "ls_l": 0.5, "var_l": 0.1, "s2": 0.3,
                 "re_var": 0.1}


class Collapsed:
    """A minimal in-process estimator around :mod:`skfed.gaussian_process._collapsed`.

    Inputs and targets standardized by their pooled moments (what the sites'
    set-up sums give), ``n_inducing`` global inducing inputs by k-means,
    ``restarts``: further starts, each default scaled by ``10**U(-1, 1)``
    from a fixed stream (not from ``start``); the fit of the lowest NLL is kept.
    """

    def __init__(self, random_effects="linear", fixed_effects="linear", deviation=True,
                 local=True, n_inducing=30, start=None, restarts=0, random_state=0):
        self.random_effects = random_effects
        self.fixed_effects = fixed_effects
        self.deviation = deviation
        self.local = local
        self.n_inducing = n_inducing
        self.start = start
        self.restarts = restarts
        self.random_state = random_state

    def _theta(self, start):
        lay = self.layout_
        s = {**DEFAULT_START, **(start or {})}
        return lay.pack({"ls_g": s["ls_g"], "var_g": s["var_g"], "phi": s["phi"],
                         "ls_l": s["ls_l"], "var_l": s["var_l"], "s2": s["s2"],
                         "L": np.sqrt(s["re_var"]) * np.eye(lay.q)})

    def fit(self, X, y, groups):
        X, y = np.asarray(X, float), np.asarray(y, float)
        self.x_mean_, self.x_std_ = X.mean(0), X.std(0) + 1e-12
        self.y_mean_, self.y_std_ = y.mean(), y.std()
        Xs, ys = (X - self.x_mean_) / self.x_std_, (y - self.y_mean_) / self.y_std_
        self.layout_ = col.Layout(X.shape[1], self.random_effects, self.fixed_effects,
                                  self.deviation, self.local)
        m = min(self.n_inducing, np.unique(Xs, axis=0).shape[0])
        self.Z_ = KMeans(m, n_init=1, random_state=self.random_state).fit(Xs).cluster_centers_
        self.sites_ = {g: (Xs[groups == g], ys[groups == g]) for g in np.unique(groups)}
        # restarts scatter about the fixed defaults, not the given start: a given start
        # adds one candidate, so the answer depends on it only where it finds a better fit
        rng = np.random.default_rng([self.random_state, 27])
        starts = [self.start] + [
            {k: v * 10 ** rng.uniform(-1, 1) for k, v in DEFAULT_START.items()}
            for _ in range(self.restarts)]
        fits = [col.fit_collapsed(list(self.sites_.values()), self.layout_, self.Z_,
                                  self._theta(s)) for s in starts]
        self.opt_ = min(fits, key=lambda r: r.fun)
        self.params_ = p = self.layout_.unpack(self.opt_.x)
        K_inv = col._inverse_kzz(p, self.Z_)[0]
        msgs = [col.site_statistics(Xi, yi, p, self.layout_, self.Z_, K_inv)[0]
                for Xi, yi in self.sites_.values()]
        self.nll_, self.w_, self.Lam_inv_, _ = col.server_objective(p, self.layout_, self.Z_,
                                                                    msgs)
        return self

    def predict(self, X, groups=None, return_std=False):
        Xs = (np.asarray(X, float) - self.x_mean_) / self.x_std_
        mean, var = np.empty(len(Xs)), np.empty(len(Xs))
        g = np.full(len(Xs), None, dtype=object) if groups is None else np.asarray(groups)
        for lab in dict.fromkeys(g.tolist()):
            idx = np.flatnonzero(g == lab) if groups is not None else np.arange(len(Xs))
            mean[idx], var[idx] = col.predict_collapsed(
                self.params_, self.layout_, self.Z_, self.w_, self.Lam_inv_, Xs[idx],
                self.sites_.get(lab))
        mean = mean * self.y_std_ + self.y_mean_
        std = np.sqrt(var) * self.y_std_
        return (mean, std) if return_std else mean


def windowed(seeds, n_starts, params):
    rows = []
    for seed in seeds:
        train, test = make_windowed_hierarchy(seed)
        y_te, g_te = test[1], test[2]
        o = scores(y_te, *oracle(train, test), g_te)
        t0 = time.process_time()
        model = Collapsed(random_state=seed, **params).fit(*train)
        s = scores(y_te, *model.predict(test[0], g_te, return_std=True), g_te)
        s["fit_s"] = time.process_time() - t0
        rng = np.random.default_rng([seed, 2700])
        base = {**DEFAULT_START, **params.get("start", {})}
        r = []
        for _ in range(n_starts):
            start = {k: v * 10 ** rng.uniform(-1, 1) for k, v in base.items()}
            m = Collapsed(random_state=seed, **{**params, "start": start}).fit(*train)
            r.append(scores(y_te, *m.predict(test[0], g_te, return_std=True), g_te)["rmse"])
        if r:
            s["spread"] = (max(r) - min(r)) / np.median(r)
        rows.append({"seed": seed, "oracle": o, "collapsed": s})
        print(f"seed {seed}: oracle {o['rmse']:.3f}  collapsed {s['rmse']:.3f} / "
              f"{s['nll']:.3f} / {s['cov95']:.2f}  spread {s.get('spread', np.nan):.3f}  "
              f"fit {s['fit_s']:.1f} s", flush=True)
    o = np.mean([r["oracle"]["rmse"] for r in rows])
    c = {k: np.mean([r["collapsed"][k] for r in rows]) for k in rows[0]["collapsed"]}
    print(f"mean: oracle RMSE {o:.3f}; collapsed RMSE {c['rmse']:.3f} ({c['rmse'] / o:.3f} of "
          f"the oracle), NLL {c['nll']:.3f}, cov95 {c['cov95']:.3f}, fit {c['fit_s']:.1f} s"
          + (f", spread over {n_starts} starts: mean {c['spread']:.3f}, max "
             f"{max(r['collapsed']['spread'] for r in rows):.3f}" if n_starts else ""))
    return rows


def real(datasets, seeds, params):
    from skfed.baselines import MixedLMRegressor, PooledEstimator
    from skfed.benchmark._real_data import RANDOM_SLOPES, _splits
    from skfed.datasets import load_multilevel

    rows = []
    for name in datasets:
        d = load_multilevel(name)
        X, y, groups = d.data, d.target, d.groups
        slopes = RANDOM_SLOPES.get(name)
        cols = None if slopes is None else [list(d.feature_names).index(f) for f in slopes]
        for seed in seeds:
            split_seed = seed  # selection seeds 0-2; the reported benchmark seed is 100
            for setting, folds in _splits(X, y, groups, split_seed).items():
                models = {"collapsed": lambda: Collapsed(random_state=split_seed, **params),
                          "MixedLM": lambda: MixedLMRegressor(random_slopes=cols),
                          "Pooled Ridge": lambda: PooledEstimator(Ridge())}
                for label, make in models.items():
                    sse = n = covered = 0.0
                    nll = []
                    t0 = time.process_time()
                    for tr, te in folds:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            model = make().fit(X[tr], y[tr], groups=groups[tr])
                        pg = groups[te] if setting == "seen-site" else None
                        if label == "collapsed":
                            mu, sd = model.predict(X[te], groups=pg, return_std=True)
                            covered += np.sum(np.abs(y[te] - mu) <= 1.959964 * sd)
                            nll.append(-norm.logpdf(y[te], mu, sd).sum())
                        else:
                            mu = model.predict(X[te], groups=pg)
                        sse += np.sum((y[te] - mu) ** 2)
                        n += te.size
                    row = {"data": name, "seed": seed, "setting": setting, "method": label,
                           "rmse": float(np.sqrt(sse / n)),
                           "fit_s": (time.process_time() - t0) / len(folds)}
                    if nll:
                        row.update(cov95=covered / n, nll=float(np.sum(nll) / n))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["windowed", "real"])
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--starts", type=int, default=0)
    p.add_argument("--datasets", nargs="*",
                   default=["sleepstudy", "exam", "hsb82", "produc", "chickweight"])
    p.add_argument("--params", default="{}", help="Collapsed(...) parameters as JSON")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    params = json.loads(a.params)
    if a.what == "windowed":
        rows = windowed(_seeds(a.seeds), a.starts, params)
    else:
        rows = real(a.datasets, _seeds(a.seeds), params)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    main()
