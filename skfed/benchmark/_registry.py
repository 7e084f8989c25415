"""The registry of experiments that ``skfed benchmark`` runs."""

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Experiment", "register", "get_experiments", "report_step", "MODES"]

MODES = ("quick", "full")
_REGISTRY = {}
# set by the runner while a repetition runs: called with the text of each finished step
_STEP_HOOK = ContextVar("skfed_benchmark_step_hook", default=None)


def report_step(text):
    """Tell the benchmark runner that a step of the running repetition is done.

    An experiment's ``run`` calls it after each fit or method (e.g.
    ``"new-site: Local Ridge"``); with progress on, the runner shows it. Outside
    a run, or with progress off, it does nothing.
    """
    hook = _STEP_HOOK.get()
    if hook is not None:
        hook(text)


@dataclass(frozen=True)
class Experiment:
    """One experiment of ``skfed benchmark``.

    Parameters
    ----------
    name : str
        Identifier used on the command line (``--experiments NAME``).
    title : str
        Heading in the report.
    run : callable
        ``run(seed, mode) -> list of dict``: one repetition with the given
        seed, at ``mode`` ``"quick"`` (small, the default of the command) or
        ``"full"`` (the paper's size). Each dict is one method's result:
        ``{"method": str, "setting": str (optional), <metric>: float, ...}``.
    metrics : dict of str to {"higher", "lower"}, float or None
        The metrics ``run`` reports and which direction is better; a number is
        a target value (closer is better, e.g. ``0.95`` for a 95% coverage);
        ``None`` marks a setting reported beside the scores (a noise level, a
        privacy budget), which has no better direction.
    n_seeds : dict, default={"quick": 3, "full": 10}
        Repetitions per mode.
    paper : dict, default={}
        Published values, ``{(setting, method, metric): value}``, printed
        beside ours (``setting`` is ``""`` when ``run`` reports none) only in
        ``paper_modes``.
    paper_modes : tuple of str, default=("full",)
        The modes whose runs follow the paper's protocol; in any other mode
        the published values are not printed (they would sit beside a run
        of other settings).
    description : str, default=""
        What is compared, on what data; shown in the report.
    reference : str, default=""
        The paper (and table or figure) the experiment reproduces.
    group : str, default=""
        A group name: ``--experiments GROUP`` runs every experiment of it.
    modes : tuple of str, default=("quick", "full")
        The modes in which a plain ``skfed benchmark`` (no ``--experiments``)
        runs it; named experiments run in any mode.
    """

    name: str
    title: str
    run: Callable
    metrics: dict
    n_seeds: dict = field(default_factory=lambda: {"quick": 3, "full": 10})
    paper: dict = field(default_factory=dict)
    description: str = ""
    reference: str = ""
    group: str = ""
    modes: tuple = MODES
    paper_modes: tuple = ("full",)


def register(experiment):
    """Add an experiment to the registry (its name must be new)."""
    if experiment.name in _REGISTRY:
        raise ValueError(f"an experiment named {experiment.name!r} is already registered.")
    bad = {m: d for m, d in experiment.metrics.items()
           if d not in ("higher", "lower", None) and not isinstance(d, (int, float))}
    if bad:
        raise ValueError(f"metric directions must be 'higher', 'lower', a target number or "
                         f"None (a setting), got {bad}.")
    if experiment.name in {e.group for e in _REGISTRY.values()}:
        raise ValueError(f"{experiment.name!r} is already a group name.")
    _REGISTRY[experiment.name] = experiment
    return experiment


def get_experiments(names=None, mode=None):
    """Registered experiments: those named (experiment or group names), else all.

    Without names and with a ``mode``, only the experiments that run in that
    mode by default.
    """
    if not names:
        return [e for e in _REGISTRY.values() if mode is None or mode in e.modes]
    groups = {}
    for e in _REGISTRY.values():
        if e.group:
            groups.setdefault(e.group, []).append(e)
    unknown = [n for n in names if n not in _REGISTRY and n not in groups]
    if unknown:
        raise ValueError(
            f"unknown experiment(s) {unknown}; registered: {sorted(_REGISTRY)}; "
            f"groups: {sorted(groups)}."
        )
    chosen = {}
    for n in names:
        for e in groups.get(n, [_REGISTRY.get(n)]):
            chosen.setdefault(e.name, e)
    return list(chosen.values())
