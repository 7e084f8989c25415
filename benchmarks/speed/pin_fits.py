"""Pin fitted outputs before a refactor, check them after (equal to rounding).

    python benchmarks/speed/pin_fits.py save [name-filter]    # at the base commit
    python benchmarks/speed/pin_fits.py check [name-filter]   # after the change

56 arrays: predictive means, standard deviations and ELBO histories of small
PFedHGPRegressor fits (scalar and multi-output, closed form and paper mode,
with and without ARD, Matern, the ablations, several local steps) and the
predictions of DPFedDROClassifier and PersonalizedTensorRegressor with their
defaults; BLAS on one thread. ``check`` prints every array that differs and
the worst relative difference. The pins go to ``$PINS`` (default
``pins.npz`` in the working directory).

``m_paper`` (multi-output, paper mode, 8 rounds) is chaotic: the same
commit gives results that differ by O(1) depending on which numba
specializations the process compiled before (see doc/performance.md, "Many
small clients"); ``m_paper3`` is the same fit stopped after 3 rounds.
"""
import argparse
import os
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from bench_pfedhgp import make
from skfed import DPFedDROClassifier, PersonalizedTensorRegressor, PFedHGPRegressor

warnings.filterwarnings("ignore")


def gp(name, Q=None, n=30, n_rounds=8, **kw):
    X, y, groups = make(6, n, n_outputs=Q)
    model = PFedHGPRegressor(inference="variational",
                             n_rounds=n_rounds, random_state=0, n_inducing_global=12,
                             n_inducing_local=6, **kw).fit(X, y, groups=groups)
    mu, sd = model.predict(X[:40], groups=groups[:40], return_std=True)
    return {name + "/mu": mu, name + "/sd": sd, name + "/elbo": np.asarray(model.elbo_)}


def dro():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(240, 4))
    X /= 1.01 * np.linalg.norm(X, axis=1).max()  # rows within norm_bound=1
    groups = np.repeat(np.arange(6), 40)
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.1)
    model = DPFedDROClassifier(random_state=0).fit(X, y, groups=groups)
    return {"dro/p": model.predict_proba(X[:40], groups=groups[:40])}


def ptr():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(240, 4, 3))
    groups = np.repeat(np.arange(6), 40)
    y = X[:, 0, 0] - X[:, 1, 2] + 0.1 * rng.normal(size=240)
    model = PersonalizedTensorRegressor(random_state=0).fit(X, y, groups=groups)
    return {"ptr/p": model.predict(X[:40], groups=groups[:40])}


MULTI = {"Q": 3, "n_latents": 2}
CASES = {
    "s_cavi": lambda: gp("s_cavi"),
    "s_cavi_big": lambda: gp("s_cavi_big", n=300),
    "s_paper": lambda: gp("s_paper", optimizer="paper"),
    "s_matern_noard": lambda: gp("s_matern_noard", kernel="matern52", ard=False),
    "s_ls2": lambda: gp("s_ls2", local_steps=2),
    "s_gd": lambda: gp("s_gd", components=("global", "deviation")),
    "s_gl": lambda: gp("s_gl", components=("global", "local")),
    "s_l": lambda: gp("s_l", components=("local",)),
    "s_mean_alt": lambda: gp("s_mean_alt", mean_update="blockwise"),
    "m_cavi": lambda: gp("m_cavi", **MULTI),
    "m_cavi_big": lambda: gp("m_cavi_big", n=300, **MULTI),
    "m_paper": lambda: gp("m_paper", optimizer="paper", **MULTI),
    "m_paper3": lambda: gp("m_paper3", optimizer="paper", n_rounds=3, **MULTI),
    "m_ls3": lambda: gp("m_ls3", local_steps=3, **MULTI),
    "m_gd": lambda: gp("m_gd", components=("global", "deviation"), **MULTI),
    "m_gl": lambda: gp("m_gl", components=("global", "local"), **MULTI),
    "m_l": lambda: gp("m_l", components=("local",), **MULTI),
    "m_dl": lambda: gp("m_dl", ard=False, **MULTI),
    "dro": dro,
    "ptr": ptr,
}


def main(mode, wanted=""):
    path = os.environ.get("PINS", "pins.npz")
    out = {}
    with threadpool_limits(1, "blas"):
        for name, case in CASES.items():
            if wanted in name:
                out.update(case())
    if mode == "save":
        np.savez(path, **out)
        print("saved", len(out), "arrays to", path)
        return
    ref, worst = np.load(path), 0.0
    for key, value in out.items():
        pinned = ref[key]
        if pinned.shape != value.shape:
            print(f"{key}: shape {value.shape}, pinned {pinned.shape}")
            worst = np.inf
            continue
        rel = np.abs(pinned - value) / (np.abs(pinned) + 1e-12)
        diff = float(np.max(rel)) if value.size else 0.0
        worst = max(worst, diff)
        if diff > 0:
            print(f"{key}: max rel diff {diff:.2e}")
    print("checked", len(out), "worst", worst)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("save", "check"),
                        help="save the pins to $PINS, or check the fits against them")
    parser.add_argument("filter", nargs="?", default="", metavar="name-filter",
                        help="only the cases whose name contains it (default: all)")
    args = parser.parse_args()
    main(args.mode, args.filter)
