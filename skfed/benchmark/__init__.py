"""The experiments of ``skfed benchmark`` and the code that runs them.

Each experiment module registers an :class:`Experiment` on import; add a
module per paper and import it here.
"""

from . import _dp_fed_dro  # noqa: F401  (registers its experiments)
from . import _federated_regression  # noqa: F401  (registers its experiment)
from . import _pfedhgp  # noqa: F401  (registers its experiment)
from . import _real_data  # noqa: F401  (registers the real-data group)
from . import _tensor_regression  # noqa: F401  (registers its experiments)
from ._registry import MODES, Experiment, get_experiments, register, report_step
from ._runner import run_benchmark, summarize

__all__ = ["MODES", "Experiment", "get_experiments", "register", "report_step", "run_benchmark",
           "summarize"]
