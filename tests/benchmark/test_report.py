"""What the benchmark report shows: intervals within range, error bars, metric directions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skfed.benchmark import Experiment, get_experiments, summarize
from skfed.benchmark._runner import (
    METRIC_RANGES,
    MIN_SEEDS_FOR_INTERVAL,
    _better,
    _experiment_figure,
    _tables,
    _write_figures,
    write_report,
)


def _rows(values, metric="x", experiment="e", method="m", setting=""):
    return [{"experiment": experiment, "setting": setting, "method": method, "seed": i,
             "metric": metric, "value": float(v)} for i, v in enumerate(values)]


def _values_in_range(draw, metric, n):
    lo, hi = METRIC_RANGES[metric]
    lo = -1e6 if lo is None else lo
    hi = 1e6 if hi is None else hi
    return draw(st.lists(st.floats(lo, hi), min_size=n, max_size=n))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), metric=st.sampled_from(sorted(METRIC_RANGES)),
       n=st.integers(1, 12))
def test_interval_never_leaves_the_metric_range(data, metric, n):
    values = _values_in_range(data.draw, metric, n)
    (s,) = summarize(_rows(values, metric))
    if n == 1:
        assert np.isnan(s["low"]) and np.isnan(s["high"]) and s["interval"] == ""
        return
    lo, hi = METRIC_RANGES[metric]
    assert s["interval"] == ("range" if n < MIN_SEEDS_FOR_INTERVAL else "t")
    assert lo is None or s["low"] >= lo
    assert hi is None or s["high"] <= hi
    tol = 1e-9 * max(1.0, abs(s["mean"]))
    assert s["low"] - tol <= s["mean"] <= s["high"] + tol


def test_two_seeds_show_the_seeds_range_not_a_t_interval():
    # the t-interval of these two seeds is [-2.6, 3.6]: outside [0, 1]
    (s,) = summarize(_rows([0.3, 0.8], "macro_f1"))
    assert (s["low"], s["high"], s["interval"]) == (0.3, 0.8, "range")
    (t,) = summarize(_rows([1.0, 0.0, 0.0, 0.0, 0.0, 0.0], "fit_time_s"))
    assert t["interval"] == "t" and t["low"] == 0.0 < t["high"]


def test_every_registered_metric_has_a_declared_range():
    metrics = {m for exp in get_experiments() for m in exp.metrics}
    assert metrics <= set(METRIC_RANGES), sorted(metrics - set(METRIC_RANGES))


def test_coverage_is_best_near_095_and_settings_have_no_direction():
    (pfedhgp,) = get_experiments(["pfedhgp_table2"])
    assert pfedhgp.metrics["cov95"] == 0.95
    assert "closer to 0.95 is better" in _better(pfedhgp.metrics["cov95"])
    summary = summarize(_rows([0.9], "cov95", experiment="pfedhgp_table2"))
    ((_, header, _),) = _tables(pfedhgp, summary)
    assert header == ["method", "cov95 (→0.95)"]
    (fig3,) = get_experiments(["tensor_regression_fig3"])
    (wvs,) = get_experiments(["real_wvs"])
    assert fig3.metrics["noise_std_mean"] is None and fig3.metrics["epsilon_rdp"] is None
    assert wvs.metrics["epsilon"] is None
    summary = summarize(_rows([0.5], "noise_std_mean", experiment=fig3.name))
    ((_, header, _),) = _tables(fig3, summary)
    assert header == ["method", "noise_std_mean"]
    assert "not a score" in _better(None)


def _record_bars(monkeypatch):
    import matplotlib.axes

    calls = []
    original = matplotlib.axes.Axes.bar

    def bar(self, *args, **kwargs):
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    return calls


def _draw(n_seeds, folder, monkeypatch):
    """Figures of two methods x two settings over ``n_seeds``: the recorded bar calls."""
    pytest.importorskip("matplotlib")
    calls = _record_bars(monkeypatch)
    exp = Experiment(name=f"tmp-{n_seeds}", title=f"{n_seeds} seed(s)", run=None,
                     metrics={"fit_time_s": "lower", "macro_f1": "higher"})
    rows = []
    for method, base in (("a", 0.5), ("b", 2.0)):
        for setting in ("s1", "s2"):
            rows += _rows(base + 0.4 * np.arange(n_seeds), "fit_time_s", exp.name, method,
                          setting)
            rows += _rows(np.linspace(0.1, 0.9, n_seeds), "macro_f1", exp.name, method,
                          setting)
    summary = summarize(rows)
    _write_figures([exp], summary, str(folder))
    return calls, exp, summary


def test_one_seed_draws_no_error_bars_and_says_so(tmp_path, monkeypatch):
    calls, exp, summary = _draw(1, tmp_path, monkeypatch)
    assert len(calls) == 4 and all(c["yerr"] is None and c["capsize"] == 0 for c in calls)
    write_report([exp], [], summary, str(tmp_path), "quick", 1.0)
    report = (tmp_path / "report.md").read_text()
    assert "cells: n = 1 seed; the value of the one seed." in report


def test_few_seeds_draw_the_seeds_range_inside_the_metric_range(tmp_path, monkeypatch):
    calls, _, _ = _draw(2, tmp_path, monkeypatch)
    assert len(calls) == 4
    for call in calls:
        below, above = call["yerr"]
        assert np.all(below >= 0) and np.all(above >= 0)
    # whiskers end at the seeds' values: 0.5 - below is the smallest fit time, not negative
    np.testing.assert_allclose(calls[0]["yerr"][0], [0.2, 0.2])


def test_seeds_of_equal_value_draw(tmp_path):
    """The mean of three equal values is an ulp above them: the whiskers stay >= 0."""
    pytest.importorskip("matplotlib")
    value = 0.2473118279569893
    assert np.full(3, value).mean() > value  # the rounding this guards against
    exp = Experiment(name="tmp-equal", title="equal seeds", run=None,
                     metrics={"macro_f1": "higher"})
    rows = _rows(np.full(3, value), "macro_f1", exp.name, "a", "new-site")
    summary = summarize(rows)
    _write_figures([exp], summary, str(tmp_path))  # raised ValueError from matplotlib
    assert list(tmp_path.rglob("*.png"))


def test_figure_title_says_seeds_and_keeps_title_and_legend_inside():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one panel, a long title and long legend labels (as dp_fed_dro_accountant)
    exp = Experiment(name="tmp-narrow", title="A rather long title " * 5, run=None,
                     metrics={"eps_bar": "lower"})
    rows = []
    for method in ("a long method label number one", "another long method label", "third"):
        rows += _rows([3.0], "eps_bar", exp.name, method, "a long setting (eps=0.5, T=50)")
    fig = _experiment_figure(plt, exp, summarize(rows))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    for artist in [fig._suptitle, *fig.legends]:
        extent = artist.get_window_extent(renderer)
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1
        assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1
    assert "n = 1 seed; no error bars" in fig._suptitle.get_text()
    plt.close(fig)


def test_steps_within_a_repetition_are_reported_when_progress_is_on(monkeypatch):
    import io

    from skfed.benchmark import _runner, report_step, run_benchmark

    monkeypatch.setattr(_runner, "_progress", lambda *args: None)  # lines, not a tqdm bar

    def run(seed, mode):
        for method in ("a", "b"):
            report_step(f"method {method}")
        return [{"method": "a", "x": 1.0}, {"method": "b", "x": 2.0}]

    exp = Experiment(name="tmp-steps", title="steps", run=run, metrics={"x": "lower"})
    stream = io.StringIO()
    rows = run_benchmark([exp], n_seeds=2, progress=True, stream=stream)
    assert len(rows) == 4
    text = stream.getvalue()
    for seed in (0, 1):
        for method in ("a", "b"):
            assert f"tmp-steps seed {seed}: method {method} done" in text
    quiet = io.StringIO()
    run_benchmark([exp], n_seeds=1, progress=False, stream=quiet)
    assert quiet.getvalue() == ""
    report_step("outside a run: nothing happens")
