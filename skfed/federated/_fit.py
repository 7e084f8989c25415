"""Fit an estimator through the protocol: set-up exchange, algorithm, rounds.

Estimators that follow :class:`FederatedContract` run unchanged in-process
(:func:`fit_federated`) and on a distributed engine
(:mod:`skfed.federated.flower`); :class:`skfed.base.FederatedEstimator`
implements ``fit`` on top of it.
"""

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._engine import FederationResult, run_federation
from ._ledger import Ledger
from ._protocol import FederatedAlgorithm, Federation, check_message

__all__ = ["FederatedContract", "FederatedFit", "client_summary", "combine_summaries",
           "fit_federated", "setup_exchange"]


@runtime_checkable
class FederatedContract(Protocol):
    """The hooks an estimator provides to be fitted by the protocol.

    The engines call them in this order, on the coordinator (server) and on
    every site (client) of a distributed run alike; in-process, one object
    plays every part. Each hook sees only what its node may see.

    1. ``_check_params()`` (every node): the hyperparameters, once, after
       scikit-learn's ``_parameter_constraints`` were checked; checks that
       tie several parameters together, and any derived setting the other
       hooks read.
    2. ``_validate_site_data(X, y, reset, groups)`` (each site, on its own
       rows; in-process on the pooled rows with their client labels
       ``groups``, for checks per client, split once by ``fit``: read them with
       ``skfed.utils.check_groups(groups, len(X))``, which does not split
       again): returns the validated ``(X, y)``.
    3. ``_site_summary(X, y)`` (each site): extra entries of the site's
       set-up message (aggregates only: see ``skfed.federated._release``);
       ``{}`` for none.
    4. ``_combine_site_summaries(labels, summaries)`` (server): extra
       entries of the set-up summary broadcast to every site; ``{}`` for
       none.
    5. ``_federated_algorithm(setup)`` (every node): the client and server
       steps, built from the parameters and the set-up summary only, so
       every node builds the same algorithm.
    6. ``_engine_params()`` (server): ``n_rounds``, ``client_fraction``,
       ``on_client_error``, ``random_state`` (in-process also ``n_jobs``,
       ``verbose``).
    7. ``_set_fitted(fit)`` (server): fitted attributes from a
       :class:`FederatedFit` (on a distributed run its client states are
       ``None``: the personalized parts stay on the sites).

    :class:`skfed.base.FederatedEstimator` implements ``fit`` on these hooks
    and gives defaults for ``_check_params``, ``_site_summary`` and
    ``_combine_site_summaries`` (nothing to check, no extra entries) and
    ``_engine_params`` (the usual parameters); the engines call every hook
    above directly.

    Optional: ``_with_site_state(label, state)``, the fitted model with one
    site's personalized parts (``skfed.federated.flower.site_model``);
    ``_privacy_claim()`` (every node), ``None`` for a fit that adds no noise,
    else ``{"epsilon", "delta", "noise_multiplier"}`` of a full fit: a site
    checks it against its own limits, and the client steps of a private fit
    draw their randomness from the site's secret entropy on a distributed
    engine (a private estimator must provide it).
    """

    def _check_params(self) -> None: ...

    def _validate_site_data(self, X, y, reset: bool = False, groups=None) -> tuple: ...

    def _site_summary(self, X, y) -> Mapping: ...

    def _combine_site_summaries(self, labels, summaries) -> Mapping: ...

    def _federated_algorithm(self, setup: Mapping) -> FederatedAlgorithm: ...

    def _engine_params(self) -> Mapping: ...

    def _set_fitted(self, fit: "FederatedFit") -> None: ...


@dataclass(frozen=True)
class FederatedFit:
    """The outcome of a federated fit, handed to ``_set_fitted``.

    Attributes
    ----------
    result : FederationResult
        Server state, client states (``None`` on a distributed run), ledger,
        rounds run, participation.
    setup : mapping
        The set-up summary the algorithm was built from.
    labels : ndarray
        Sorted client labels (``clients_``).
    algorithm : FederatedAlgorithm
        The algorithm that ran, built once from ``setup``.
    """

    result: FederationResult
    setup: Mapping
    labels: Any
    algorithm: FederatedAlgorithm


_BASE_KEYS = ("n_samples", "n_features")


def client_summary(X, y=None, estimator=None):
    """The set-up message of one client: its row count, row width and extras.

    Parameters
    ----------
    X : ndarray of shape (n_samples, ...)
        The client's validated covariates.
    y : ndarray or None, default=None
        The client's validated targets (passed to the estimator's hook).
    estimator : FederatedContract or None, default=None
        Its ``_site_summary(X, y)`` entries are added (e.g. the class labels
        a site holds); ``None``: none.

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
    if estimator is not None:
        extra = dict(estimator._site_summary(X, y))
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
    estimator : FederatedContract or None, default=None
        Its ``_combine_site_summaries(labels, summaries)`` entries are
        added; ``None``: none.

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
    if estimator is not None:
        setup.update(estimator._combine_site_summaries(list(labels), list(summaries)))
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
    estimator : FederatedContract

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
    estimator : FederatedContract
        Provides ``_federated_algorithm``, ``_engine_params`` and the
        set-up hooks.
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
    fit : FederatedFit
        The result, the set-up summary, the sorted client labels and the
        algorithm that ran.
    """
    federation = Federation.from_arrays(X, y, groups, sample_weight, min_samples=min_samples)
    setup, algorithm, ledger = setup_exchange(
        [c.label for c in federation.clients],
        [client_summary(c.X, c.y, estimator) for c in federation.clients],
        estimator,
    )
    result = run_federation(algorithm, federation, ledger=ledger, **estimator._engine_params())
    return FederatedFit(result, setup, federation.labels, algorithm)
