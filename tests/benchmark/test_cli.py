"""The ``skfed benchmark`` command and its summary statistics."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from skfed._cli import main
from skfed.benchmark import Experiment, get_experiments, register, summarize


def test_list(capsys):
    assert main(["benchmark", "--list"]) == 0
    assert "federated_regression" in capsys.readouterr().out


def test_run_writes_report_csv_and_figures(tmp_path, capsys):
    out = tmp_path / "report"
    code = main(["benchmark", "--experiments", "federated_regression", "--seeds", "2",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Local (Ridge)" in printed and "Pooled (Ridge)" in printed and "rmse" in printed
    report = (out / "report.md").read_text()
    assert "| method |" in report and "federated_regression" in report
    with open(out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["seed"] for r in rows} == {"0", "1"}
    assert {"Local (Ridge)", "Pooled (Ridge)", "FedAvg"} <= {r["method"] for r in rows}
    with open(out / "summary.csv") as fh:
        summary = list(csv.DictReader(fh))
    assert all(int(r["n"]) == 2 for r in summary)
    assert os.path.getsize(out / "figures" / "federated_regression.png") > 1000


def test_errors_exit_with_code_2(tmp_path, capsys):
    assert main(["benchmark", "--experiments", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown experiment" in capsys.readouterr().err
    assert main(["benchmark", "--seeds", "0", "--out", str(tmp_path)]) == 2


def test_a_bad_out_is_refused_before_any_experiment_runs(tmp_path, capsys, monkeypatch):
    from skfed.benchmark import _runner

    def run_benchmark(*args, **kwargs):
        raise AssertionError("an experiment ran before --out was checked")

    monkeypatch.setattr(_runner, "run_benchmark", run_benchmark)
    (tmp_path / "file").write_text("")
    for out in (tmp_path / "file", tmp_path / "file" / "report"):
        assert main(["benchmark", "--experiments", "federated_regression",
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("skfed benchmark: --out") and "Traceback" not in err
    assert main(["benchmark", "--experiments", "nope", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("skfed benchmark: --experiments: unknown")


def test_an_error_inside_an_experiment_keeps_its_traceback(tmp_path, monkeypatch):
    from skfed.benchmark import _runner

    def run_benchmark(*args, **kwargs):
        raise ValueError("a defect inside an experiment")

    monkeypatch.setattr(_runner, "run_benchmark", run_benchmark)
    with pytest.raises(ValueError, match="a defect inside"):
        main(["benchmark", "--experiments", "federated_regression", "--out", str(tmp_path)])


def test_python_dash_m_entry_point():
    res = subprocess.run([sys.executable, "-m", "skfed", "benchmark", "--list"],
                         capture_output=True, text=True, check=True)
    assert "federated_regression" in res.stdout


def test_summary_interval_is_the_t_interval_from_five_seeds():
    values = [1.0, 2.0, 4.0, 7.0, 5.0]
    rows = [{"experiment": "e", "setting": "", "method": "m", "seed": i, "metric": "x",
             "value": v} for i, v in enumerate(values)]
    (s,) = summarize(rows)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values),
                                 scale=stats.sem(values))
    assert s["mean"] == pytest.approx(3.8) and s["interval"] == "t"
    assert (s["low"], s["high"]) == pytest.approx((low, high))
    (few,) = summarize(rows[:4])
    assert (few["low"], few["high"], few["interval"]) == (1.0, 7.0, "range")
    (one,) = summarize(rows[:1])
    assert np.isnan(one["low"]) and one["n"] == 1 and one["interval"] == ""


def test_registry_rejects_duplicates_and_bad_directions():
    exp = get_experiments(["federated_regression"])[0]
    with pytest.raises(ValueError, match="already registered"):
        register(exp)
    with pytest.raises(ValueError, match="higher"):
        register(Experiment(name="tmp-bad", title="t", run=None, metrics={"x": "up"}))


def test_groups_and_modes_select_experiments():
    real = get_experiments(["real"])
    assert real and all(e.group == "real" for e in real)
    assert {"real_sleepstudy", "real_wvs"} <= {e.name for e in real}
    quick = {e.name for e in get_experiments(mode="quick")}
    full = {e.name for e in get_experiments(mode="full")}
    assert "real_sleepstudy" in quick and "real_hsb82" not in quick and "real_hsb82" in full
    # a named experiment runs whatever its modes
    assert [e.name for e in get_experiments(["real_hsb82"], mode="quick")] == ["real_hsb82"]
    # a group and one of its members name it once
    names = [e.name for e in get_experiments(["real", "real_wvs"])]
    assert names.count("real_wvs") == 1


def test_target_metric_direction_is_accepted_and_printed():
    from skfed.benchmark._runner import _arrow, _better

    from skfed.benchmark._registry import _REGISTRY

    register(Experiment(name="tmp-target", title="t", run=None, metrics={"cov": 0.95}))
    _REGISTRY.pop("tmp-target")
    assert _arrow(0.95) == " (→0.95)" and "closer to 0.95" in _better(0.95)


def test_summary_clips_to_the_metric_range_and_shows_the_interval_kind():
    from skfed.benchmark._runner import _cell

    rows = [{"experiment": "e", "setting": "", "method": "m", "seed": i, "metric": "coverage95",
             "value": v} for i, v in enumerate([0.9, 1.0, 1.0, 1.0, 1.0, 1.0])]
    (s,) = summarize(rows)
    assert s["high"] == 1.0 and s["low"] < s["mean"] < 1.0
    assert s["sd"] == pytest.approx(np.std([0.9] + [1.0] * 5, ddof=1))
    assert _cell(s) == "0.9833 [0.9405, 1.0000]"
    (few,) = summarize(rows[:2])
    assert _cell(few) == "0.9500 (0.9000..1.0000)"


def test_help_prints_no_doubled_percent(capsys):
    with pytest.raises(SystemExit):
        main(["benchmark", "--help"])
    assert "%%" not in capsys.readouterr().out


def test_real_data_splits_hold_out_sites_and_rows():
    from skfed.benchmark._real_data import _splits

    groups = np.repeat(["a", "b", "c", "d"], 6)
    groups[-1] = "e"  # a one-row site: trains only in the seen-site protocol
    X, y = np.zeros((24, 1)), np.zeros(24)
    folds = _splits(X, y, groups, seed=100)
    assert len(folds["new-site"]) == 5 and len(folds["seen-site"]) == 5
    for train, test in folds["new-site"]:
        assert not set(groups[train]) & set(groups[test])
    for train, test in folds["seen-site"]:
        assert "e" not in set(groups[test]) and "e" in set(groups[train])
    # fewer sites than folds: leave one site out
    four = np.repeat(["a", "b", "c", "d"], 6)
    assert len(_splits(X, y, four, seed=100)["new-site"]) == 4


def test_real_data_anchors_run_in_full_mode_tuned_per_protocol(monkeypatch, caplog):
    import logging

    from sklearn.model_selection import GroupKFold

    from skfed.benchmark import _real_data as rd

    calls = []
    monkeypatch.setattr(rd, "evaluate", lambda name, seed, anchors=False: calls.append(anchors))
    (exp,) = get_experiments(["real_sleepstudy"])
    exp.run(0, "quick")
    exp.run(0, "full")
    assert calls == [False, True]
    labels = [m[0] for m in rd.regression_methods("sleepstudy", 144, 1, ["Days"], 100)]
    assert not any(label.startswith(("GPBoost", "MERF")) for label in labels)
    # a missing package: left out, with one logged note per process
    monkeypatch.setitem(sys.modules, "merf", None)
    monkeypatch.setattr(rd, "_NOTED", set())
    with caplog.at_level(logging.WARNING, logger=rd.__name__):
        for setting in ("seen-site", "new-site", "seen-site"):
            methods = {m[0]: m[1] for m in rd.regression_methods(
                "sleepstudy", 144, 1, ["Days"], 100, setting=setting, anchors=True)}
            assert "MERF" not in methods and "MixedLM" in methods
            if "GPBoost (trees)" in methods:  # gpboost installed: tuned for the protocol
                cv = methods["GPBoost (trees)"].cv
                assert cv == 3 if setting == "seen-site" else isinstance(cv, GroupKFold)
                assert methods["GPBoost (linear)"].random_slopes == [0]
    notes = [r.getMessage() for r in caplog.records if "merf" in r.getMessage()]
    assert len(notes) == 1 and 'python -m pip install -e ".[bench]" in the skfed clone' in notes[0]


def _fake_summary(experiment, settings=("A", "B"), methods=("m1", "m2", "m3")):
    rows = []
    for st in settings:
        for m in methods:
            for k in experiment.metrics:
                rows.append(dict(experiment=experiment.name, setting=st, method=m, metric=k,
                                 n=3, mean=0.5, sd=0.05, low=0.4, high=0.6, interval="range"))
    return rows


def test_published_values_only_beside_a_run_of_the_papers_protocol():
    from skfed.benchmark._runner import _tables

    exp = Experiment(name="tmp-paper", title="t", run=None, metrics={"rmse": "lower"},
                     paper={("A", "m1", "rmse"): 0.25})
    summary = _fake_summary(exp)
    quick = "\n".join(str(r) for _, _, body in _tables(exp, summary, "quick") for r in body)
    full = "\n".join(str(r) for _, _, body in _tables(exp, summary, "full") for r in body)
    assert "paper" not in quick and "(paper 0.2500)" in full


def test_figures_are_a_grid_at_most_1600_px_wide_with_the_legend_off_the_bars(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from skfed.benchmark._runner import _write_figures

    exp = Experiment(name="tmp-fig", title="seven metrics", run=None,
                     metrics={f"m{i}": "lower" for i in range(7)})
    (path,) = _write_figures([exp], _fake_summary(exp), str(tmp_path)).values()
    width, height = Image.open(path).size
    assert width <= 1600 and height < 1.2 * width  # three rows of three, not one long row


def test_warmup_fits_the_named_problems(capsys):
    assert main(["warmup", "--estimators", "dro"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dro ") and "compiled and cached in" in out
    assert main(["warmup", "--estimators", "nope"]) == 2
    assert "unknown nope" in capsys.readouterr().err
