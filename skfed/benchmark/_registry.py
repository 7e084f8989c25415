"""The registry of experiments that ``skfed benchmark`` runs."""

from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Experiment", "register", "get_experiments", "MODES"]

MODES = ("quick", "full")
_REGISTRY = {}


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
    metrics : dict of str to {"higher", "lower"}
        The metrics ``run`` reports and which direction is better.
    n_seeds : dict, default={"quick": 3, "full": 10}
        Repetitions per mode.
    paper : dict, default={}
        Published values, ``{(setting, method, metric): value}``, printed
        beside ours (``setting`` is ``""`` when ``run`` reports none).
    description : str, default=""
        What is compared, on what data; shown in the report.
    reference : str, default=""
        The paper (and table or figure) the experiment reproduces.
    """

    name: str
    title: str
    run: Callable
    metrics: dict
    n_seeds: dict = field(default_factory=lambda: {"quick": 3, "full": 10})
    paper: dict = field(default_factory=dict)
    description: str = ""
    reference: str = ""


def register(experiment):
    """Add an experiment to the registry (its name must be new)."""
    if experiment.name in _REGISTRY:
        raise ValueError(f"an experiment named {experiment.name!r} is already registered.")
    bad = {m: d for m, d in experiment.metrics.items() if d not in ("higher", "lower")}
    if bad:
        raise ValueError(f"metric directions must be 'higher' or 'lower', got {bad}.")
    _REGISTRY[experiment.name] = experiment
    return experiment


def get_experiments(names=None):
    """Registered experiments, all (in registration order) or those named."""
    if not names:
        return list(_REGISTRY.values())
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        raise ValueError(
            f"unknown experiment(s) {unknown}; registered: {sorted(_REGISTRY)}."
        )
    return [_REGISTRY[n] for n in names]
