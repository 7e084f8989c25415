"""Check the real-data targets on a ``skfed benchmark`` summary and print markdown tables.

Run the real-data group first, then this script on its summary::

    skfed benchmark --full --experiments real --out real-report
    python benchmarks/real_data/real_data_targets.py real-report/summary.csv

(several summaries may be given, e.g. of separate regression and classification runs).

Targets (regression, every data set): the best skfed personalized estimator at
defaults has seen-site RMSE below the best of Local Ridge, Pooled Ridge and
Local GPR, and at most 1.05x MixedLM's; its new-site RMSE is at most 1.05x
Pooled Ridge's; PFedHGP's seen-site 95% coverage is in [0.90, 0.98].
PFedHGP against the mixed model (its own table): seen-site RMSE at most 1.01x
MixedLM's and below every other baseline's (on at least three of the five sets),
new-site RMSE at most Pooled Ridge's, seen-site 95% coverage in [0.92, 0.97].
Classification: DP-Fed DRO (non-private) seen-site macro-F1 is at least Pooled
LogReg's minus 0.02. Fit times: every skfed default fit under 30 s.
"""

import csv
import sys
from collections import defaultdict

SKFED_REGRESSORS = ("PFedHGP", "PersonalizedTensor")
SKFED = SKFED_REGRESSORS + ("DP-Fed DRO (non-private)",
                            "DP-Fed DRO (private default, rows clipped to norm 1)")
BASELINES = ("Local Ridge", "Pooled Ridge", "Local GPR")


def load(paths):
    cells = defaultdict(dict)
    for path in paths:
        with open(path, newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                if r["experiment"].startswith("real_"):
                    key = (r["experiment"][5:], r["setting"], r["method"])
                    cells[key][r["metric"]] = float(r["mean"])
    return cells


def regression_rows(cells):
    names = sorted({k[0] for k in cells if (k[0], "seen-site", "MixedLM") in cells})
    rows = []
    for name in names:
        seen = {m: cells[(name, "seen-site", m)] for (n, s, m) in cells
                if n == name and s == "seen-site"}
        new = {m: cells[(name, "new-site", m)] for (n, s, m) in cells
               if n == name and s == "new-site"}
        best = min(SKFED_REGRESSORS, key=lambda m: seen[m]["rmse"])
        base = min(BASELINES, key=lambda m: seen[m]["rmse"])
        ok_base = seen[best]["rmse"] < seen[base]["rmse"]
        ratio_mlm = seen[best]["rmse"] / seen["MixedLM"]["rmse"]
        ratio_new = new[best]["rmse"] / new["Pooled Ridge"]["rmse"]
        cov = seen["PFedHGP"].get("coverage95", float("nan"))
        slowest = max(cells[(name, s, m)]["fit_time_s"] for s in ("seen-site", "new-site")
                      for m in SKFED_REGRESSORS)
        rows.append([
            name, best, f"{seen[best]['rmse']:.4g}", f"{base} {seen[base]['rmse']:.4g}",
            _mark(ok_base), f"{ratio_mlm:.3f} {_mark(ratio_mlm <= 1.05)}",
            f"{ratio_new:.3f} {_mark(ratio_new <= 1.05)}",
            f"{cov:.3f} {_mark(0.90 <= cov <= 0.98)}", f"{slowest:.1f} {_mark(slowest < 30)}",
        ])
    header = ["data set", "best skfed (seen)", "its RMSE", "best baseline (seen)",
              "below it", "/ MixedLM (<= 1.05)", "new-site / Pooled Ridge (<= 1.05)",
              "PFedHGP cov95 in [0.90, 0.98]", "slowest skfed fit (s, < 30)"]
    return header, rows


#: every baseline PFedHGP is measured against on seen sites (MixedLM has its own column)
PFEDHGP_OTHERS = ("PersonalizedTensor", "Local Ridge", "Pooled Ridge", "Local GPR", "Pooled GPR")


def pfedhgp_rows(cells):
    """PFedHGP at its defaults against the linear mixed model and the other baselines."""
    names = sorted({k[0] for k in cells if (k[0], "seen-site", "PFedHGP") in cells
                    and (k[0], "seen-site", "MixedLM") in cells})
    rows = []
    for name in names:
        seen = {m: cells[(name, "seen-site", m)]["rmse"] for (n, s, m) in cells
                if n == name and s == "seen-site" and "rmse" in cells[(n, s, m)]}
        new = {m: cells[(name, "new-site", m)]["rmse"] for (n, s, m) in cells
               if n == name and s == "new-site" and "rmse" in cells[(n, s, m)]}
        pf = seen["PFedHGP"]
        others = {m: seen[m] for m in PFEDHGP_OTHERS if m in seen}
        best_other = min(others, key=others.get)
        ratio_mlm = pf / seen["MixedLM"]
        ratio_new = new["PFedHGP"] / new["Pooled Ridge"]
        cov = cells[(name, "seen-site", "PFedHGP")].get("coverage95", float("nan"))
        slowest = max(cells[(name, s, "PFedHGP")]["fit_time_s"] for s in ("seen-site",
                                                                          "new-site"))
        rows.append([
            name, f"{pf:.4g}", f"{seen['MixedLM']:.4g}", f"{ratio_mlm:.3f} "
            f"{_mark(ratio_mlm <= 1.01)}", f"{best_other} {others[best_other]:.4g}",
            _mark(pf < others[best_other]), f"{new['PFedHGP']:.4g}",
            f"{new['Pooled Ridge']:.4g}", f"{ratio_new:.3f} {_mark(ratio_new <= 1.0)}",
            f"{cov:.3f} {_mark(0.92 <= cov <= 0.97)}", f"{slowest:.1f} {_mark(slowest < 30)}",
        ])
    header = ["data set", "PFedHGP seen", "MixedLM", "/ MixedLM (<= 1.01)",
              "best other baseline", "below it", "PFedHGP new", "Pooled Ridge",
              "/ Pooled Ridge (<= 1)", "seen cov95 in [0.92, 0.97]", "slowest fit (s, < 30)"]
    return header, rows


def classification_rows(cells):
    names = sorted({k[0] for k in cells if (k[0], "seen-site", "Pooled LogReg") in cells})
    rows = []
    for name in names:
        dro = cells[(name, "seen-site", "DP-Fed DRO (non-private)")]["macro_f1"]
        pooled = cells[(name, "seen-site", "Pooled LogReg")]["macro_f1"]
        private = cells[(name, "seen-site", SKFED[3])]
        slowest = max(cells[(name, s, m)]["fit_time_s"] for s in ("seen-site", "new-site")
                      for m in SKFED[2:])
        rows.append([name, f"{dro:.3f}", f"{pooled:.3f}", _mark(dro >= pooled - 0.02),
                     f"{private['macro_f1']:.3f}", f"{private.get('epsilon', float('nan')):.3g}",
                     f"{slowest:.1f} {_mark(slowest < 30)}"])
    header = ["data set", "DRO non-private macro-F1", "Pooled LogReg", ">= pooled - 0.02",
              "DRO private default", "its total epsilon", "slowest skfed fit (s, < 30)"]
    return header, rows


def _mark(ok):
    return "yes" if ok else "**no**"


def _markdown(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def main(paths):
    cells = load(paths)
    for table in (regression_rows, pfedhgp_rows, classification_rows):
        header, rows = table(cells)
        if rows:
            print(_markdown(header, rows))
            print()


if __name__ == "__main__":
    main(sys.argv[1:] or ["skfed-report/summary.csv"])
