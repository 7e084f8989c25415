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
  (and, in-process, the client states) into fitted attributes;
* ``_validate_site_data(X, y, reset)``: the checks a site runs on its own
  rows (the in-process ``fit`` runs them on the pooled rows);
* optionally ``_site_summary(X, y)`` and
  ``_combine_site_summaries(labels, summaries)``: extra set-up entries
  (e.g. each site's class labels and their union).
"""

import numpy as np

from ._engine import run_federation
from ._ledger import Ledger
from ._protocol import Federation, check_message

__all__ = ["client_summary", "combine_summaries", "fit_federated", "setup_exchange"]


_BASE_KEYS = ("n_samples", "n_features")


def client_summary(X, y=None, estimator=None):
    """The set-up message of one client: its row count, row width and extras.

    Parameters
    ----------
    X : ndarray of shape (n_samples, ...)
        The client's validated covariates.
    y : ndarray or None, default=None
        The client's validated targets (passed to the estimator's hook).
    estimator : object or None, default=None
        If it has ``_site_summary(X, y) -> mapping``, those entries are
        added (e.g. the class labels a site holds).

    Returns
    -------
    message : mapping
        ``{"n_samples": int64, "n_features": int64, ...}`` (``n_features`` is
        the product of the trailing dimensions).
    """
    X = np.asarray(X)
    message = {
        "n_samples": np.int64(X.shape[0]),
        "n_features": np.int64(np.prod(X.shape[1:], dtype=np.int64)),
    }
    hook = getattr(estimator, "_site_summary", None)
    if hook is not None:
        extra = dict(hook(X, y))
        clash = set(extra) & set(_BASE_KEYS)
        if clash:
            raise ValueError(f"_site_summary may not redefine {sorted(clash)}.")
        message.update(extra)
    return check_message(message, sender="site", allow_text=True)


def combine_summaries(labels, summaries, estimator=None):
    """Combine the clients' set-up messages into the set-up summary.

    The summary is itself a message (it is broadcast to every client, which
    builds the same algorithm from it).

    Parameters
    ----------
    labels : sequence
        Client labels, in client-index order.
    summaries : sequence of mapping
        ``client_summary`` of each client, aligned with ``labels``.
    estimator : object or None, default=None
        If it has ``_combine_site_summaries(labels, summaries) -> mapping``,
        those entries are added.

    Returns
    -------
    setup : mapping
        ``{"n_features": int64, "n_samples": ndarray of shape (n_clients,), ...}``.
    """
    widths = {label: int(s["n_features"]) for label, s in zip(labels, summaries)}
    if len(set(widths.values())) > 1:
        raise ValueError(f"clients disagree on the number of features: {widths}.")
    setup = {
        "n_features": np.int64(next(iter(widths.values()))),
        "n_samples": np.array([int(s["n_samples"]) for s in summaries], dtype=np.int64),
    }
    hook = getattr(estimator, "_combine_site_summaries", None)
    if hook is not None:
        setup.update(hook(list(labels), list(summaries)))
    return check_message(setup, sender="server", allow_text=True)


def setup_exchange(labels, summaries, estimator):
    """The set-up exchange of every engine: combine the sites' summaries, build the algorithm.

    Each site's :func:`client_summary` goes up and the combined summary comes
    down to every site; both directions are recorded in a new ledger as round
    -1. The in-process engine and :mod:`skfed.federated.flower` both call this,
    so a distributed fit starts from the same set-up as an in-process one.

    Parameters
    ----------
    labels : sequence
        Client labels, sorted, in client-index order.
    summaries : sequence of mapping
        Each client's :func:`client_summary`, aligned with ``labels``.
    estimator : estimator following the contract of this module

    Returns
    -------
    setup : mapping
        The set-up summary.
    algorithm : FederatedAlgorithm
        ``estimator._federated_algorithm(setup)``.
    ledger : Ledger
        A new ledger holding the set-up messages.
    """
    ledger = Ledger()
    for label, summary in zip(labels, summaries):
        ledger.record(-1, label, "up", summary)
    setup = combine_summaries(labels, summaries, estimator)
    for label in labels:
        ledger.record(-1, label, "down", setup)
    return setup, estimator._federated_algorithm(setup), ledger


def fit_federated(estimator, X, y, groups=None, sample_weight=None, min_samples=1):
    """Run an estimator's federated training in-process.

    The set-up exchange (each client's :func:`client_summary` up, the
    combined summary down) is recorded in the ledger as round -1, as on a
    distributed engine.

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
    setup : mapping
        The set-up summary the algorithm was built from.
    labels : ndarray
        Sorted client labels.
    """
    federation = Federation.from_arrays(X, y, groups, sample_weight, min_samples=min_samples)
    setup, algorithm, ledger = setup_exchange(
        [c.label for c in federation.clients],
        [client_summary(c.X, c.y, estimator) for c in federation.clients],
        estimator,
    )
    result = run_federation(algorithm, federation, ledger=ledger, **estimator._engine_params())
    return result, setup, federation.labels
