"""Fit an estimator through the protocol: set-up exchange, algorithm, rounds.

Estimators that follow this contract run unchanged in-process
(:func:`fit_federated`) and on a distributed engine
(:mod:`skfed.federated.flower`). An estimator provides:

* ``_federated_algorithm(setup) -> FederatedAlgorithm``, built only from the
  set-up summary (so every node can rebuild the same algorithm);
* ``_engine_params() -> dict`` with ``n_rounds``, ``client_fraction``,
  ``on_client_error``, ``random_state`` (and in-process ``n_jobs``,
  ``verbose``);
* ``_set_federated_result(result, setup, labels)`` to copy the server state
  (and, in-process, the client states) into fitted attributes.
"""

import numpy as np

from ._engine import run_federation
from ._ledger import Ledger
from ._protocol import Federation, check_message

__all__ = ["client_summary", "combine_summaries", "fit_federated"]


def client_summary(X):
    """The set-up message of one client: its row count and row width.

    Parameters
    ----------
    X : ndarray of shape (n_samples, ...)
        The client's validated covariates.

    Returns
    -------
    message : mapping
        ``{"n_samples": int64, "n_features": int64}`` (``n_features`` is the
        product of the trailing dimensions).
    """
    X = np.asarray(X)
    return check_message({
        "n_samples": np.int64(X.shape[0]),
        "n_features": np.int64(np.prod(X.shape[1:], dtype=np.int64)),
    })


def combine_summaries(labels, summaries):
    """Combine the clients' set-up messages into the set-up summary.

    Parameters
    ----------
    labels : sequence
        Client labels, in client-index order.
    summaries : sequence of mapping
        ``client_summary`` of each client, aligned with ``labels``.

    Returns
    -------
    setup : dict
        ``{"n_features": int, "n_samples": ndarray of shape (n_clients,)}``.
    """
    widths = {label: int(s["n_features"]) for label, s in zip(labels, summaries)}
    if len(set(widths.values())) > 1:
        raise ValueError(f"clients disagree on the number of features: {widths}.")
    return {
        "n_features": next(iter(widths.values())),
        "n_samples": np.array([int(s["n_samples"]) for s in summaries], dtype=np.int64),
    }


def fit_federated(estimator, X, y, groups=None, sample_weight=None, min_samples=1):
    """Run an estimator's federated training in-process.

    Parameters
    ----------
    estimator : estimator following the contract of this module
        Provides ``_federated_algorithm``, ``_engine_params``.
    X, y : ndarray
        Validated training data of all clients.
    groups : array-like or None
        Client labels.
    sample_weight : ndarray or None
        Per-row weights.
    min_samples : int, default=1
        Fewest rows per client.

    Returns
    -------
    result : FederationResult
    setup : dict
        The set-up summary the algorithm was built from.
    labels : ndarray
        Sorted client labels.
    """
    federation = Federation.from_arrays(X, y, groups, sample_weight, min_samples=min_samples)
    ledger = Ledger()
    summaries = []
    for client in federation.clients:  # the set-up exchange, recorded like any message
        summary = client_summary(client.X)
        ledger.record(-1, client.label, "up", summary)
        summaries.append(summary)
    setup = combine_summaries([c.label for c in federation.clients], summaries)
    algorithm = estimator._federated_algorithm(setup)
    result = run_federation(algorithm, federation, ledger=ledger, **estimator._engine_params())
    return result, setup, federation.labels
