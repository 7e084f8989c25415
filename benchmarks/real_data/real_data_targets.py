"""Check the real-data targets on a ``skfed benchmark`` summary and print markdown tables.

Run the real-data group first, then this script on its summary::

    skfed benchmark --full --experiments real --out real-report
    python benchmarks/real_data/real_data_targets.py real-report/summary.csv

(several summaries may be given, e.g. of separate regression and classification runs).

Targets. Regression, PFedHGP at its defaults against the mixed model: seen-site
RMSE at most 1.01x MixedLM's and below every other baseline's, new-site RMSE at
most Pooled Ridge's, seen-site 95% coverage in [0.92, 0.97], every fit under
30 s. Classification: DP-Fed DRO's non-private seen-site macro-F1 (each site's
adaptation) at least Pooled LogReg's minus 0.01 and above its shared model
alone; the private fit at a total epsilon of 4 keeps at least 0.85 of it; every
fit under 30 s.
"""

import argparse
import csv
from collections import defaultdict

DRO = "DP-Fed DRO (non-private)"
DRO_SHARED = "DP-Fed DRO (non-private, shared model only)"
DRO_PRIVATE = "DP-Fed DRO (private, total eps 4)"


def load(paths):
    cells = defaultdict(dict)
    for path in paths:
        with open(path, newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                if r["experiment"].startswith("real_"):
                    key = (r["experiment"][5:], r["setting"], r["method"])
                    cells[key][r["metric"]] = float(r["mean"])
    return cells


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
            name, f"{pf:#.4g}", f"{seen['MixedLM']:#.4g}", f"{ratio_mlm:.3f} "
            f"{_mark(ratio_mlm <= 1.01)}", f"{best_other} {others[best_other]:#.4g}",
            _mark(pf < others[best_other]), f"{new['PFedHGP']:#.4g}",
            f"{new['Pooled Ridge']:#.4g}", f"{ratio_new:.3f} {_mark(ratio_new <= 1.0)}",
            f"{cov:.3f} {_mark(0.92 <= cov <= 0.97)}", f"{slowest:.1f} {_mark(slowest < 30)}",
        ])
    header = ["data set", "PFedHGP seen", "MixedLM", "/ MixedLM (<= 1.01)",
              "best other baseline", "below it", "PFedHGP new", "Pooled Ridge",
              "/ Pooled Ridge (<= 1)", "seen cov95 in [0.92, 0.97]", "slowest fit (s, < 30)"]
    return header, rows


def classification_rows(cells):
    """DP-Fed DRO's seen-site macro-F1: with the sites' adaptation, its shared model alone,
    and private, against Pooled LogReg."""
    names = sorted({k[0] for k in cells if (k[0], "seen-site", "Pooled LogReg") in cells})
    rows = []
    for name in names:
        f1 = {m: cells[(name, "seen-site", m)]["macro_f1"]
              for m in (DRO, DRO_SHARED, DRO_PRIVATE, "Pooled LogReg")}
        ok = f1[DRO] >= f1["Pooled LogReg"] - 0.01 and f1[DRO] > f1[DRO_SHARED]
        kept = f1[DRO_PRIVATE] / f1[DRO]
        slowest = max(c["fit_time_s"] for (n, s, m), c in cells.items()
                      if n == name and m.startswith("DP-Fed DRO"))
        rows.append([name, f"{f1[DRO]:.4f}", f"{f1[DRO_SHARED]:.4f}",
                     f"{f1['Pooled LogReg']:.4f}", _mark(ok), f"{f1[DRO_PRIVATE]:.4f}",
                     f"{kept:.2f} {_mark(kept >= 0.85)}", f"{slowest:.1f} {_mark(slowest < 30)}"])
    header = ["data set", "DRO non-private (site adaptation)", "its shared model alone",
              "Pooled LogReg", ">= pooled - 0.01 and > shared", "DRO private, total eps 4",
              "/ non-private (>= 0.85)", "slowest DRO fit (s, < 30)"]
    return header, rows


def _mark(ok):
    return "yes" if ok else "**no**"


def _markdown(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def main(paths):
    cells = load(paths)
    for table in (pfedhgp_rows, classification_rows):
        header, rows = table(cells)
        if rows:
            print(_markdown(header, rows))
            print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summary", nargs="*", default=["skfed-report/summary.csv"],
                        metavar="summary.csv", help="default: skfed-report/summary.csv")
    main(parser.parse_args().summary)
