"""Run registered experiments over seeds; summarize; write report, CSV and figures."""

import csv
import os
import platform
import sys
import time
import warnings
from collections import defaultdict

import numpy as np
from scipy import stats

from ._registry import MODES

__all__ = ["run_benchmark", "summarize", "format_table"]


def _progress(total, enabled, stream):
    """A tqdm bar if tqdm is installed (the ``bench`` extra), else plain lines."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, file=stream, unit="run", dynamic_ncols=True)
    except ImportError:  # pragma: no cover - tqdm is in the bench extra
        return None


def run_benchmark(experiments, mode="quick", n_seeds=None, progress=True, stream=None):
    """Run each experiment over its seeds and return the long-format results.

    Parameters
    ----------
    experiments : list of Experiment
        What to run.
    mode : {"quick", "full"}, default="quick"
        Problem sizes: small (minutes) or the papers' (hours).
    n_seeds : int or None, default=None
        Repetitions per experiment; ``None`` uses each experiment's own.
    progress : bool, default=True
        Show a progress bar.
    stream : file-like or None, default=None
        Where progress goes (``sys.stderr`` by default).

    Returns
    -------
    rows : list of dict
        One row per (experiment, setting, method, seed, metric) with keys
        ``experiment, setting, method, seed, metric, value``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
    stream = sys.stderr if stream is None else stream
    plan = [
        (exp, seed)
        for exp in experiments
        for seed in range(n_seeds if n_seeds is not None else exp.n_seeds[mode])
    ]
    bar = _progress(len(plan), progress, stream)
    rows = []
    for i, (exp, seed) in enumerate(plan):
        if bar is not None:
            bar.set_description(f"{exp.name} seed {seed}")
        elif progress:
            print(f"[{i + 1}/{len(plan)}] {exp.name} seed {seed}", file=stream, flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = exp.run(seed, mode)
        for result in results:
            for metric in exp.metrics:
                if metric in result:
                    rows.append({
                        "experiment": exp.name,
                        "setting": result.get("setting", ""),
                        "method": result["method"],
                        "seed": seed,
                        "metric": metric,
                        "value": float(result[metric]),
                    })
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return rows


# metric name -> (low, high) of its range: a summary interval is clipped to it
METRIC_RANGES = {
    "rmse": (0.0, None), "fit_time_s": (0.0, None), "crps": (0.0, None),
    "coverage95": (0.0, 1.0), "cov95": (0.0, 1.0), "macro_f1": (0.0, 1.0),
    "accuracy": (0.0, 1.0), "mccr": (0.0, 1.0), "worst_recall": (0.0, 1.0),
    "r2": (None, 1.0), "epsilon": (0.0, None),
}
# below this many seeds a t-interval is too wide to read: report mean +- sd
MIN_SEEDS_FOR_INTERVAL = 5


def summarize(rows, confidence=0.95, ranges=None):
    """Mean, standard deviation and t-interval over seeds per cell.

    Parameters
    ----------
    rows : list of dict
        Output of :func:`run_benchmark`.
    confidence : float, default=0.95
        Coverage of the interval ``mean +/- t * sd / sqrt(n)``.
    ranges : dict or None, default=None
        ``{metric: (low, high)}`` (``None`` for an open end): the interval
        is clipped to the metric's range. Defaults to ``METRIC_RANGES``.

    Returns
    -------
    summary : list of dict
        Keys ``experiment, setting, method, metric, n, mean, sd, low, high``
        per (experiment, setting, method, metric); ``sd``, ``low`` and
        ``high`` are NaN with a single seed.
    """
    ranges = METRIC_RANGES if ranges is None else ranges
    groups = defaultdict(list)
    for r in rows:
        groups[(r["experiment"], r["setting"], r["method"], r["metric"])].append(r["value"])
    out = []
    for (exp, setting, method, metric), values in groups.items():
        v = np.asarray(values, dtype=float)
        n = v.size
        mean = float(np.mean(v))
        if n > 1:
            sd = float(np.std(v, ddof=1))
            half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / np.sqrt(n))
        else:
            sd = half = float("nan")
        lo, hi = ranges.get(metric, (None, None))
        low, high = mean - half, mean + half
        if n > 1:
            low = low if lo is None else max(low, lo)
            high = high if hi is None else min(high, hi)
        out.append({
            "experiment": exp, "setting": setting, "method": method, "metric": metric,
            "n": n, "mean": mean, "sd": sd, "low": low, "high": high,
        })
    return out


def _fmt(x):
    if not np.isfinite(x):
        return "nan"
    ax = abs(x)
    if ax != 0 and (ax < 1e-3 or ax >= 1e5):
        return f"{x:.3g}"
    return f"{x:.4f}" if ax < 10 else f"{x:.2f}"


def _cell(s, paper=None):
    text = _fmt(s["mean"])
    if MIN_SEEDS_FOR_INTERVAL > s["n"] > 1:
        text += f" ± {_fmt(s['sd'])}"
    elif s["n"] > 1:
        text += f" [{_fmt(s['low'])}, {_fmt(s['high'])}]"
    if paper is not None:
        text += f" (paper {_fmt(paper)})"
    return text


def _arrow(direction):
    if direction == "higher":
        return "↑"
    if direction == "lower":
        return "↓"
    return f"→{direction:g}"


def _better(direction):
    if direction in ("higher", "lower"):
        return f"{direction} is better"
    return f"closer to {direction:g} is better"


def _tables(experiment, summary, mode=None):
    """Per setting: header and rows (method x metric) of formatted cells.

    The published values are shown only for a run of the paper's protocol
    (``mode in experiment.paper_modes``).
    """
    published = experiment.paper if mode in experiment.paper_modes else {}
    mine = [s for s in summary if s["experiment"] == experiment.name]
    settings = list(dict.fromkeys(s["setting"] for s in mine))
    metrics = [m for m in experiment.metrics if any(s["metric"] == m for s in mine)]
    tables = []
    for setting in settings:
        cells = {(s["method"], s["metric"]): s for s in mine if s["setting"] == setting}
        methods = list(dict.fromkeys(s["method"] for s in mine if s["setting"] == setting))
        header = ["method"] + [f"{m} ({_arrow(experiment.metrics[m])})" for m in metrics]
        body = []
        for method in methods:
            row = [method]
            for m in metrics:
                s = cells.get((method, m))
                paper = published.get((setting, method, m))
                row.append(_cell(s, paper) if s is not None else "")
            body.append(row)
        tables.append((setting, header, body))
    return tables


def format_table(header, body):
    """Plain-text table with aligned columns."""
    widths = [max(len(str(r[i])) for r in [header] + body) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in body])


def _markdown_table(header, body):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in body]
    return "\n".join(out)


def print_results(experiments, summary, stream=None, mode=None):
    """Print one table per experiment and setting (published values only in the paper's mode)."""
    stream = sys.stdout if stream is None else stream
    for exp in experiments:
        print(f"\n== {exp.title} [{exp.name}] ==", file=stream)
        for setting, header, body in _tables(exp, summary, mode):
            if setting:
                print(f"-- {setting}", file=stream)
            print(format_table(header, body), file=stream)


def write_report(experiments, rows, summary, out, mode, elapsed, n_seeds=None, wall=None):
    """Write ``report.md``, ``results.csv``, ``summary.csv`` and figures to ``out``."""
    os.makedirs(out, exist_ok=True)
    _write_csv(os.path.join(out, "results.csv"), rows,
               ["experiment", "setting", "method", "seed", "metric", "value"])
    _write_csv(os.path.join(out, "summary.csv"), summary,
               ["experiment", "setting", "method", "metric", "n", "mean", "sd", "low", "high"])
    figures = _write_figures(experiments, summary, os.path.join(out, "figures"))
    from .. import __version__

    lines = [
        "# skfed benchmark report",
        "",
        f"skfed {__version__}, mode `{mode}`, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; experiments ran in {elapsed:.1f} s"
        + (f", {wall:.1f} s wall-clock in all." if wall is not None else "."),
        f"Cells: mean ± standard deviation over seeds below {MIN_SEEDS_FOR_INTERVAL} seeds, "
        f"mean [95% t-interval, clipped to the metric's range] from {MIN_SEEDS_FOR_INTERVAL} "
        "seeds on; `(paper x)`: the published value, shown only in a run of the paper's "
        "protocol. `fit_time_s` excludes compilation: each estimator configuration runs once "
        "untimed per process before its timed fits.",
        "",
    ]
    for exp in experiments:
        seeds = n_seeds if n_seeds is not None else exp.n_seeds[mode]
        lines += [f"## {exp.title}", "", f"Experiment `{exp.name}`, n = {seeds} seed(s)."]
        if exp.reference:
            lines += ["", f"Reproduces: {exp.reference}."]
        if exp.description:
            lines += ["", exp.description]
        if exp.paper and mode not in exp.paper_modes:
            shown = " or ".join(f"`--{m}`" for m in exp.paper_modes)
            lines += ["", f"Published values are shown with {shown} (the paper's protocol) "
                      "only."]
        for setting, header, body in _tables(exp, summary, mode):
            heading = [f"**{setting}**", ""] if setting else []
            lines += [""] + heading + [_markdown_table(header, body)]
        if exp.name in figures:
            lines += ["", f"![{exp.name}](figures/{os.path.basename(figures[exp.name])})"]
        lines.append("")
    path = os.path.join(out, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))
    return path


def _write_csv(path, rows, fields):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _crop_wild_intervals(ax, centres, bottoms, tops):
    """Keep the axis on the bars when an interval is far wider than the bars' range.

    One wild interval (e.g. an NLL blowing up on one seed) would otherwise
    flatten every bar; its error bar then runs off the panel, which says so,
    and the table holds its numbers.
    """
    values = np.asarray([v for v in centres if np.isfinite(v)])
    if values.size == 0:
        return
    lo, hi = min(values.min(), 0.0), max(values.max(), 0.0)
    span = hi - lo or 1.0
    if max(tops, default=hi) > hi + 2 * span or min(bottoms, default=lo) < lo - 2 * span:
        ax.set_ylim(lo - 0.15 * span * (lo < 0), hi + 0.25 * span)
        ax.set_title(ax.get_title() + "; some intervals cut", fontsize=9)


def _error_bar(cell):
    """(below, above) the mean: the sd below MIN_SEEDS_FOR_INTERVAL seeds, else the interval."""
    if cell["n"] < 2:
        return 0.0, 0.0
    if cell["n"] < MIN_SEEDS_FOR_INTERVAL:
        return cell["sd"], cell["sd"]
    return cell["mean"] - cell["low"], cell["high"] - cell["mean"]


FIG_COLUMNS, FIG_DPI, FIG_MAX_PX = 3, 110, 1600


def _write_figures(experiments, summary, folder):
    """One PNG per experiment: a panel per metric, bars per setting and method."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the bench extra
        print("matplotlib is not installed: no figures (pip install 'skfed[bench]').",
              file=sys.stderr)
        return {}
    os.makedirs(folder, exist_ok=True)
    written = {}
    for exp in experiments:
        mine = [s for s in summary if s["experiment"] == exp.name]
        metrics = [m for m in exp.metrics if any(s["metric"] == m for s in mine)]
        if not metrics:
            continue
        settings = list(dict.fromkeys(s["setting"] for s in mine))
        methods = list(dict.fromkeys(s["method"] for s in mine))
        # a grid of at most FIG_COLUMNS panels a row, one metric each, and one
        # legend below the panels (never over the bars); at most FIG_MAX_PX wide
        ncols = min(len(metrics), FIG_COLUMNS)
        nrows = -(-len(metrics) // ncols)
        width = min(4.4 * ncols, FIG_MAX_PX / FIG_DPI)
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, 3.1 * nrows + 0.9),
                                 squeeze=False, layout="constrained")
        bar = 0.8 / max(len(methods), 1)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for ax, metric in zip(axes.flat, metrics):
            tops, bottoms, centres = [], [], []
            for j, method in enumerate(methods):
                cells = {
                    s["setting"]: s
                    for s in mine
                    if s["method"] == method and s["metric"] == metric
                }
                x = [i + j * bar for i, st in enumerate(settings) if st in cells]
                means = [cells[st]["mean"] for st in settings if st in cells]
                err = np.array([_error_bar(cells[st]) for st in settings if st in cells]).T
                err = err.reshape(2, -1)
                ax.bar(x, means, bar, yerr=err, capsize=2, label=method,
                       color=colors[j % len(colors)])
                centres += means
                bottoms += list(np.asarray(means) - err[0])
                tops += list(np.asarray(means) + err[1])
            ax.set_xticks([i + 0.4 - bar / 2 for i in range(len(settings))])
            ax.set_xticklabels([s or "all" for s in settings], rotation=20, ha="right", fontsize=8)
            ax.set_title(f"{metric} ({_better(exp.metrics[metric])})", fontsize=9)
            _crop_wild_intervals(ax, centres, bottoms, tops)
            ax.grid(axis="y", alpha=0.3)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        spare = list(axes.flat)[len(metrics):]
        for ax in spare:
            ax.axis("off")
        if spare:  # the legend fills the first empty panel
            spare[0].legend(handles, labels, loc="center", fontsize=9, frameon=False)
        else:
            fig.legend(handles, labels, loc="outside lower center", fontsize=8,
                       ncol=min(len(methods), 4), frameon=False)
        fig.suptitle(exp.title, fontsize=10)
        path = os.path.join(folder, f"{exp.name}.png")
        fig.savefig(path, dpi=FIG_DPI)
        plt.close(fig)
        written[exp.name] = path
    return written


def main_benchmark(names=None, mode="quick", out="skfed-report", n_seeds=None, progress=True,
                   started=None):
    """Run, print, and write the report; return the summary rows.

    ``started`` is the ``time.perf_counter()`` value at which the command
    started (imports included), for the wall-clock time in the report.
    """
    from ._registry import get_experiments

    started = time.perf_counter() if started is None else started
    experiments = get_experiments(names, mode=mode)
    tic = time.perf_counter()
    rows = run_benchmark(experiments, mode=mode, n_seeds=n_seeds, progress=progress)
    elapsed = time.perf_counter() - tic
    summary = summarize(rows)
    print_results(experiments, summary, mode=mode)
    wall = time.perf_counter() - started
    path = write_report(experiments, rows, summary, out, mode, elapsed, n_seeds, wall=wall)
    wall = time.perf_counter() - started
    print(f"\nReport: {path} (with results.csv, summary.csv, figures/); "
          f"{wall:.1f} s wall-clock ({elapsed:.1f} s in the experiments).")
    return summary
