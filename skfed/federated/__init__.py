"""The federated protocol, written once for every skfed estimator.

A :class:`Federation` holds one :class:`ClientData` per client. A
:class:`FederatedAlgorithm` defines a client step and a server step; only
messages (flat mappings of names to numeric numpy arrays) cross between them.
:func:`run_federation` runs the rounds in-process and records every message
in a :class:`Ledger`. A :class:`PhasedAlgorithm` runs several algorithms one
after the other in one run.
"""

from ._engine import (
    ClientDropout, FederationResult, Stream, client_round, client_start, round_rng,
    run_federation, run_rounds, seed_entropy,
)
from ._fit import (
    FederatedContract, FederatedFit, client_summary, combine_summaries, fit_federated,
    setup_exchange,
)
from ._ledger import Ledger, LedgerRecord
from ._phased import PhasedAlgorithm, PhaseState
from ._protocol import ClientData, FederatedAlgorithm, Federation, check_message

__all__ = [
    "ClientData",
    "ClientDropout",
    "FederatedAlgorithm",
    "FederatedContract",
    "FederatedFit",
    "Federation",
    "FederationResult",
    "Ledger",
    "LedgerRecord",
    "PhaseState",
    "PhasedAlgorithm",
    "Stream",
    "check_message",
    "client_round",
    "client_start",
    "client_summary",
    "combine_summaries",
    "fit_federated",
    "round_rng",
    "run_federation",
    "run_rounds",
    "seed_entropy",
    "setup_exchange",
]
