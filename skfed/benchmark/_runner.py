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

from ..utils._validation import install_hint
from ._registry import _STEP_HOOK, MODES

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


def _step_hook(bar, enabled, stream, prefix):
    """What :func:`report_step` does in this repetition: the bar's postfix, or a line."""
    if not enabled:
        return None
    started = time.perf_counter()

    def hook(text):
        elapsed = time.perf_counter() - started
        if bar is not None:
            bar.set_postfix_str(f"{text} ({elapsed:.0f} s)")
        else:
            print(f"    {prefix}: {text} done, {elapsed:.1f} s", file=stream, flush=True)

    return hook


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
        Show a progress bar (a line per repetition without tqdm), and the
        steps that experiments report within a repetition
        (:func:`~skfed.benchmark.report_step`).
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
        token = _STEP_HOOK.set(_step_hook(bar, progress, stream, f"{exp.name} seed {seed}"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results = exp.run(seed, mode)
        finally:
            _STEP_HOOK.reset(token)
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


# metric name -> (low, high) of its range (None: an open end); a t-interval is clipped to it
METRIC_RANGES = {
    **dict.fromkeys(["rmse", "crps", "fit_time_s", "log_loss", "width95", "coverr",
                     "A0_error", "B_error", "A_error", "test_mse", "epsilon", "eps_bar",
                     "epsilon_rdp", "noise_std_mean"], (0.0, None)),
    **dict.fromkeys(["coverage95", "cov95", "macro_f1", "accuracy", "mccr", "worst_recall",
                     "ab_confusion", "ab_to_normal"], (0.0, 1.0)),
    "r2": (None, 1.0), "nll": (None, None),
}
# From this many seeds on a cell's interval is the 95% t-interval of the mean (clipped to
# the metric's range); below it the range of the seeds: with 2 seeds the t-interval is 12.7
# times as wide as the seeds' range and often leaves the metric's range.
MIN_SEEDS_FOR_INTERVAL = 5


def _interval(values, metric, confidence, ranges):
    """``(low, high, kind)`` of a cell: no interval, the seeds' range, or a clipped t-interval."""
    n = values.size
    if n < 2:
        return float("nan"), float("nan"), ""
    if n < MIN_SEEDS_FOR_INTERVAL:
        return float(values.min()), float(values.max()), "range"
    mean = values.mean()
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * values.std(ddof=1) / np.sqrt(n)
    lo, hi = ranges.get(metric, (None, None))
    low = mean - half if lo is None else max(mean - half, lo)
    high = mean + half if hi is None else min(mean + half, hi)
    return float(low), float(high), "t"


def summarize(rows, confidence=0.95, ranges=None):
    """Mean, standard deviation and an interval over seeds per cell.

    The interval never leaves the metric's range: below
    ``MIN_SEEDS_FOR_INTERVAL`` seeds it is the range of the seeds (smallest
    to largest value), from there on the t-interval
    ``mean +/- t * sd / sqrt(n)`` clipped to the metric's range.

    Parameters
    ----------
    rows : list of dict
        Output of :func:`run_benchmark`.
    confidence : float, default=0.95
        Coverage of the t-interval.
    ranges : dict or None, default=None
        ``{metric: (low, high)}`` (``None`` for an open end) to clip the
        t-interval to. Defaults to ``METRIC_RANGES``.

    Returns
    -------
    summary : list of dict
        Keys ``experiment, setting, method, metric, n, mean, sd, low, high,
        interval`` per (experiment, setting, method, metric); ``interval`` is
        ``"range"`` (seeds' range), ``"t"`` (clipped t-interval) or ``""``
        with a single seed, where ``sd``, ``low`` and ``high`` are NaN.
    """
    ranges = METRIC_RANGES if ranges is None else ranges
    groups = defaultdict(list)
    for r in rows:
        groups[(r["experiment"], r["setting"], r["method"], r["metric"])].append(r["value"])
    out = []
    for (exp, setting, method, metric), values in groups.items():
        v = np.asarray(values, dtype=float)
        low, high, kind = _interval(v, metric, confidence, ranges)
        out.append({
            "experiment": exp, "setting": setting, "method": method, "metric": metric,
            "n": v.size, "mean": float(v.mean()),
            "sd": float(v.std(ddof=1)) if v.size > 1 else float("nan"),
            "low": low, "high": high, "interval": kind,
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
    if s["interval"] == "range":
        text += f" ({_fmt(s['low'])}..{_fmt(s['high'])})"
    elif s["interval"] == "t":
        text += f" [{_fmt(s['low'])}, {_fmt(s['high'])}]"
    if paper is not None:
        text += f" (paper {_fmt(paper)})"
    return text


_INTERVAL_WORDS = {
    "": ("the value of the one seed", "no error bars"),
    "range": ("mean (smallest..largest value over the seeds)",
              "bars: mean; whiskers: smallest to largest value over the seeds"),
    "t": ("mean [95% t-interval, clipped to the metric's range]",
          "bars: mean; whiskers: 95% t-interval clipped to the metric's range"),
}


def _interval_note(cells, figure=False):
    """How many seeds the cells have and what their interval is, for a caption."""
    ns = sorted({s["n"] for s in cells})
    seeds = f"n = {ns[0]}" if len(ns) == 1 else f"n = {ns[0]} to {ns[-1]}"
    seeds += " seed" if ns == [1] else " seeds"
    kinds = [k for k in ("", "range", "t") if any(s["interval"] == k for s in cells)]
    return f"{seeds}; " + "; ".join(_INTERVAL_WORDS[k][int(figure)] for k in kinds)


def _arrow(direction):
    if direction is None:  # a setting beside the scores: no direction
        return ""
    if direction == "higher":
        return " (↑)"
    if direction == "lower":
        return " (↓)"
    return f" (→{direction:g})"


def _better(direction):
    if direction is None:
        return " (a setting, not a score)"
    if direction in ("higher", "lower"):
        return f" ({direction} is better)"
    return f" (closer to {direction:g} is better)"


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
        header = ["method"] + [m + _arrow(experiment.metrics[m]) for m in metrics]
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
        mine = [s for s in summary if s["experiment"] == exp.name]
        if mine:
            print(f"cells: {_interval_note(mine)}", file=stream)
        for setting, header, body in _tables(exp, summary, mode):
            if setting:
                print(f"-- {setting}", file=stream)
            print(format_table(header, body), file=stream)


class UsageError(ValueError):
    """A bad argument of the benchmark command, found before any experiment runs."""


def check_out(out):
    """Create the report folder ``out`` (and its parents) now, or say why it cannot be.

    Checked before the experiments run, so a bad ``--out`` costs nothing; the
    report is written there at the end.
    """
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} is a file, not a folder for the report.")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out {out!r}: cannot create the report folder "
                         f"({exc.strerror or exc}).") from exc
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out!r}: the report folder is not writable.")


def write_report(experiments, rows, summary, out, mode, elapsed, wall=None):
    """Write ``report.md``, ``results.csv``, ``summary.csv`` and figures to ``out``."""
    os.makedirs(out, exist_ok=True)
    _write_csv(os.path.join(out, "results.csv"), rows,
               ["experiment", "setting", "method", "seed", "metric", "value"])
    _write_csv(os.path.join(out, "summary.csv"), summary,
               ["experiment", "setting", "method", "metric", "n", "mean", "sd", "low", "high",
                "interval"])
    figures = _write_figures(experiments, summary, os.path.join(out, "figures"))
    from .. import __version__

    lines = [
        "# skfed benchmark report",
        "",
        f"skfed {__version__}, mode `{mode}`, Python {platform.python_version()}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; experiments ran in {elapsed:.1f} s"
        + (f", {wall:.1f} s wall-clock in all." if wall is not None else "."),
        "Cells: the value with one seed; mean (smallest..largest value over the seeds) "
        f"below {MIN_SEEDS_FOR_INTERVAL} seeds; mean [95% t-interval, clipped to the metric's "
        f"range] from {MIN_SEEDS_FOR_INTERVAL} seeds on; each experiment says which. "
        "Figures draw the same intervals as whiskers (none with one seed). "
        "`(paper x)`: the published value, shown only in a run of the paper's "
        "protocol. Arrows: ↑ higher is better, ↓ lower is better, →x closer to x is better; "
        "a column without one is a setting, not a score. `fit_time_s` excludes compilation: "
        "each estimator configuration runs once untimed per process before its timed fits.",
        "",
    ]
    for exp in experiments:
        mine = [s for s in summary if s["experiment"] == exp.name]
        note = _interval_note(mine) if mine else "no results"
        lines += [f"## {exp.title}", "", f"Experiment `{exp.name}`; cells: {note}."]
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


def _error_bars(cells):
    """``yerr`` of one method's bars: (below, above) each mean, or None.

    A cell of one seed has no interval and gets no whisker (NaN); a method
    with no interval at all gets ``None``: no error bars, not zero-width caps.
    Whiskers are at least 0: the mean of equal values can lie an ulp outside
    them, which matplotlib refuses.
    """
    if not any(c["interval"] for c in cells):
        return None
    return np.maximum(np.array([[c["mean"] - c["low"], c["high"] - c["mean"]] if c["interval"]
                                else [np.nan, np.nan] for c in cells]).T, 0.0)


FIG_COLUMNS, FIG_DPI, FIG_MAX_PX = 3, 110, 1600
# a figure is at least this wide (inches): a one-panel figure still holds its title and legend
FIG_MIN_WIDTH = 6.4
# characters of 8-10 pt text per inch of figure width, for wrapping the title and the legend
FIG_CHARS_PER_INCH = 13


def _draw_panel(ax, metric, direction, settings, methods, mine, bar, colors):
    """Bars per setting and method of one metric, whiskers where the cells have an interval."""
    tops, bottoms, centres = [], [], []
    for j, method in enumerate(methods):
        cells = {s["setting"]: s for s in mine if s["method"] == method and s["metric"] == metric}
        shown = [cells[st] for st in settings if st in cells]
        x = [i + j * bar for i, st in enumerate(settings) if st in cells]
        means = np.array([c["mean"] for c in shown])
        err = _error_bars(shown)
        ax.bar(x, means, bar, yerr=err, capsize=0 if err is None else 2, label=method,
               color=colors[j % len(colors)])
        centres += means.tolist()
        if err is not None:
            bottoms += np.nan_to_num(means - err[0], nan=np.inf).tolist()
            tops += np.nan_to_num(means + err[1], nan=-np.inf).tolist()
    ax.set_xticks([i + 0.4 - bar / 2 for i in range(len(settings))])
    ax.set_xticklabels([s or "all" for s in settings], rotation=20, ha="right", fontsize=8)
    ax.set_title(metric + _better(direction), fontsize=9)
    _crop_wild_intervals(ax, centres, bottoms, tops)
    ax.grid(axis="y", alpha=0.3)


def _write_figures(experiments, summary, folder):
    """One PNG per experiment (see :func:`_experiment_figure`); ``{name: path}``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the bench extra
        print(f"matplotlib is not installed: no figures ({install_hint('bench')}).",
              file=sys.stderr)
        return {}
    os.makedirs(folder, exist_ok=True)
    written = {}
    for exp in experiments:
        fig = _experiment_figure(plt, exp, [s for s in summary if s["experiment"] == exp.name])
        if fig is None:
            continue
        path = os.path.join(folder, f"{exp.name}.png")
        # constrained layout keeps the title and legend inside; "tight" is the safety net
        fig.savefig(path, dpi=FIG_DPI, bbox_inches="tight")
        plt.close(fig)
        written[exp.name] = path
    return written


def _experiment_figure(plt, exp, mine):
    """A panel per metric, bars per setting and method; None without results.

    The title says how many seeds each bar summarizes and what its whiskers
    are (none with one seed).
    """
    import textwrap

    metrics = [m for m in exp.metrics if any(s["metric"] == m for s in mine)]
    if not metrics:
        return None
    settings = list(dict.fromkeys(s["setting"] for s in mine))
    methods = list(dict.fromkeys(s["method"] for s in mine))
    # a grid of at most FIG_COLUMNS panels a row, one metric each, and one
    # legend below the panels (never over the bars); at most FIG_MAX_PX wide
    ncols = min(len(metrics), FIG_COLUMNS)
    nrows = -(-len(metrics) // ncols)
    width = min(max(4.4 * ncols, FIG_MIN_WIDTH), FIG_MAX_PX / FIG_DPI)
    chars = int(width * FIG_CHARS_PER_INCH)
    title = textwrap.wrap(exp.title, chars) + textwrap.wrap(_interval_note(mine, True), chars)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(width, 3.1 * nrows + 0.9 + 0.2 * len(title)))
    bar = 0.8 / max(len(methods), 1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes.flat, metrics):
        _draw_panel(ax, metric, exp.metrics[metric], settings, methods, mine, bar, colors)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    spare = list(axes.flat)[len(metrics):]
    for ax in spare:
        ax.axis("off")
    if spare:  # the legend fills the first empty panel
        spare[0].legend(handles, labels, loc="center", fontsize=9, frameon=False)
    else:  # as many columns as the labels fit across the figure
        longest = max(len(label) for label in labels) + 6
        fig.legend(handles, labels, loc="outside lower center", fontsize=8, frameon=False,
                   ncol=max(1, min(len(methods), 4, chars // longest)))
    fig.suptitle("\n".join(title), fontsize=10)
    return fig


def main_benchmark(names=None, mode="quick", out="skfed-report", n_seeds=None, progress=True,
                   started=None):
    """Run, print, and write the report; return the summary rows.

    ``started`` is the ``time.perf_counter()`` value at which the command
    started (imports included), for the wall-clock time in the report.
    """
    from ._registry import get_experiments

    started = time.perf_counter() if started is None else started
    # the arguments, before anything runs (a full run takes hours)
    try:
        experiments = get_experiments(names, mode=mode)
    except ValueError as exc:
        raise UsageError(f"--experiments: {exc}") from exc
    try:
        check_out(out)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    tic = time.perf_counter()
    rows = run_benchmark(experiments, mode=mode, n_seeds=n_seeds, progress=progress)
    elapsed = time.perf_counter() - tic
    summary = summarize(rows)
    print_results(experiments, summary, mode=mode)
    wall = time.perf_counter() - started
    path = write_report(experiments, rows, summary, out, mode, elapsed, wall=wall)
    wall = time.perf_counter() - started
    print(f"\nReport: {path} (with results.csv, summary.csv, figures/); "
          f"{wall:.1f} s wall-clock ({elapsed:.1f} s in the experiments).")
    return summary
