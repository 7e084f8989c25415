"""Run a skfed estimator on a Flower federation (SuperLink and SuperNodes).

Install the extra: ``python -m pip install -e ".[flower]"`` in the skfed clone. The core
package does not import this module.

:class:`FlowerFederation` turns an estimator factory and a per-site data
loader into a Flower ``ServerApp`` and ``ClientApp`` that run the
estimator's *own* client and server steps, unchanged, as Flower messages:
every skfed message becomes an ``ArrayRecord`` of named arrays. The round
semantics (client sampling, the failure policy, the ledger) are those of the
in-process engine, shared code, so with the same ``random_state`` and data a
non-private Flower run and an in-process fit give the same fitted parameters
and the same ``communication_`` totals.

What the coordinator cannot do to a site (see :doc:`/threat_model`):

* learn its noise: a private fit's client steps draw their randomness from
  the site's own secret entropy (the operating system's CSPRNG), kept in the
  site's ``context.state``; the run's seed serves shared randomness only
  (client sampling, the server's draws, non-private client steps);
* choose its noise scale or budget: the site checks the set-up against its
  own rows (row and feature counts) and the run's privacy against the limits
  of its node config (``max-epsilon``, ``max-delta``,
  ``min-noise-multiplier``), and refuses anything else;
* run code on it: nothing received is unpickled (the fitted estimator
  travels in skops format, loaded with an explicit list of trusted types);
* read data values in its errors: a site's error reply names the check that
  failed and the error type; the details go to the site's own log.

Client-local state (personalized parts, dual variables, the secret entropy)
is kept in the SuperNode's ``context.state`` and never leaves the site.

Message types: ``query.setup`` (each site validates its data and sends its
set-up summary: row and feature counts, plus the estimator's extras such as
class labels), ``train`` (one round), ``train.finalize`` (the final
broadcast, when the algorithm asks for it). The first message a site gets
after the set-up also carries the combined set-up summary (counted in the
ledger as the in-process set-up exchange is) and the control values seed and
client index (not counted): the site verifies them and builds the algorithm
and its local state from them. Folding this into the first round saves a
whole exchange, which on Flower costs seconds (each message starts a
``flwr-clientapp`` process).
"""

import contextlib
import copy
import inspect
import json
import logging
import math
import os
import pickle
import secrets
import time
import warnings
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ..utils import check_params
from . import (
    ClientData, ClientDropout, FederatedContract, FederatedFit, check_message,
    client_round, client_start, client_summary, run_rounds, seed_entropy, setup_exchange,
)
from ._flower_local import LocalFederation, make_certificates, write_app
from ._flower_memory import InMemoryGrid

__all__ = ["FlowerFederation", "FlowerTransport", "InMemoryGrid", "LocalFederation", "SiteError",
           "TRUSTED_TYPES", "exchange", "load_fitted", "make_certificates", "save_fitted",
           "site_model", "supports_federation", "write_app"]

_log = logging.getLogger(__name__)

# the hooks of the protocol, read from it (for the error naming the missing ones)
_CONTRACT = tuple(name for name, value in vars(FederatedContract).items()
                  if callable(value) and not name.startswith("__"))
_STATE_KEY = "skfed"
SITE_NOISE = ("secret", "shared")
#: Node-config keys of a site's privacy limits (see :class:`FlowerFederation`).
LIMIT_KEYS = ("max-epsilon", "max-delta", "min-noise-multiplier")
#: A site keeps its validated rows in its Flower state between messages up to this size
#: (larger sites load and validate them again at every message).
KEEP_ROWS_BYTES = 32 * 2**20

#: The types a fitted estimator sent to a site may hold besides numpy's and
#: scikit-learn's (skops trusts those by default): :func:`load_fitted` refuses
#: any other, so a crafted file can build nothing but these plain objects.
TRUSTED_TYPES = frozenset({
    "skfed.baselines._fedavg.FedAvgRegressor",
    "skfed.federated._ledger.Ledger",
    "skfed.federated._ledger.LedgerRecord",
    "skfed.gaussian_process._baselines.PFedGPRegressor",
    "skfed.gaussian_process._collapsed.Layout",
    "skfed.gaussian_process._elbo.ModelConfig",
    "skfed.gaussian_process._ilmm.IlmmConfig",
    "skfed.gaussian_process._pfedhgp.PFedHGPRegressor",
    "skfed.linear_model._baselines.DPFedERMClassifier",
    "skfed.linear_model._baselines.DPFedSGDClassifier",
    "skfed.linear_model._baselines.FedOvADROClassifier",
    "skfed.linear_model._dp_fed_dro.DPFedDROClassifier",
    "skfed.linear_model._fed_mixedlm.FedMixedLMRegressor",
    "skfed.linear_model._privacy_plan.Plan",
    "skfed.tensor._baselines.FedAvgTensorRegressor",
    "skfed.tensor._baselines.FedCommonTensorRegressor",
    "skfed.tensor._baselines.LocalTwoStageTensorRegressor",
    "skfed.tensor._pftr.PersonalizedTensorRegressor",
})


class SiteError(RuntimeError):
    """A site's error as the coordinator sees it: which check failed, no data values.

    Raised on the site in place of the original error (logged there in full
    by the ``skfed.federated.flower`` logger); Flower forwards its text.
    """


class _Refusal(Exception):
    """A site refuses the run; ``check`` is the public reason (no data values)."""

    def __init__(self, check, detail):
        super().__init__(detail)
        self.check = check


@contextlib.contextmanager
def _stage(name):
    """Name the site-side step an error comes from (the first name sticks)."""
    try:
        yield
    except Exception as exc:
        if not hasattr(exc, "_skfed_stage"):
            exc._skfed_stage = name
        raise


def _public_reason(exc):
    """The text a coordinator may see of a site's error: the check and the error type."""
    if isinstance(exc, _Refusal):
        return f"refused the run: {exc.check}"
    stage = getattr(exc, "_skfed_stage", "its step")
    return f"{stage} failed ({type(exc).__name__}; details in the site's log)"


def _n_positional(func):
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 2
    return sum(p.kind in kinds for p in params)


def supports_federation(estimator):
    """Whether ``estimator`` provides the hooks of :class:`skfed.federated.FederatedContract`.

    Estimators that pool the rows (a centralized reference) set
    ``_pools_rows = True`` and are refused even if they share the hooks.
    """
    return (isinstance(estimator, FederatedContract)
            and not getattr(estimator, "_pools_rows", False))


def site_model(estimator, path):
    """A site's personalized model, in the site's own process.

    During a Flower run each site whose node config names a file under
    :class:`FlowerFederation`'s ``site_model_key`` (``"model-path"`` by
    default) keeps its local state there, updated after each of its steps;
    nothing of it is sent. This combines that file with the fitted estimator
    the run returned (the shared parts, as released to the sites).

    Parameters
    ----------
    estimator : fitted skfed estimator
        The run's result (``run_config["output"]``, read with
        :func:`load_fitted`).
    path : str or path-like
        The site's own file (written by this site's steps, never received).

    Returns
    -------
    model : fitted estimator
        A copy of ``estimator`` whose only client is this site, with its
        personalized parts: ``model.predict(X, groups=[label] * len(X))``
        equals the personalized prediction of an in-process fit. Estimators
        without personalized parts (e.g. ``DPFedDROClassifier``) return an
        unchanged copy.
    """
    with open(path, "rb") as fh:  # the site's own file, written by its own steps
        saved = pickle.load(fh)
    if type(estimator).__name__ != saved["estimator"]:
        raise ValueError(f"{path} holds the state of a {saved['estimator']} site, not of a "
                         f"{type(estimator).__name__} (estimator).")
    labels = list(getattr(estimator, "clients_", []))
    if saved["label"] not in labels:
        raise ValueError(f"site {saved['label']!r} of {path} is not a client of this fitted "
                         f"estimator (clients_ = {labels}).")
    return _personalize(estimator, saved["label"], saved["state"])


def save_fitted(estimator, file):
    """Write a fitted estimator in skops format (no pickle), for :func:`load_fitted`.

    Parameters
    ----------
    estimator : fitted skfed estimator
    file : str, path-like or None
        Where to write; ``None`` returns the bytes instead.

    Returns
    -------
    data : bytes or None
    """
    import skops.io as sio

    if file is None:
        return sio.dumps(estimator)
    sio.dump(estimator, file)
    return None


def load_fitted(file):
    """Read a fitted estimator written by :func:`save_fitted`, without running its code.

    Nothing is unpickled: skops rebuilds the objects, and only numpy's and
    scikit-learn's types and the skfed types of :data:`TRUSTED_TYPES` are
    allowed; a file holding any other type is refused.

    Parameters
    ----------
    file : str, path-like or bytes
        The file, or its contents.

    Returns
    -------
    estimator : fitted skfed estimator

    Raises
    ------
    ValueError
        If the file holds a type outside the trusted list.

    Examples
    --------
    >>> from skfed.baselines import FedAvgRegressor
    >>> from skfed.datasets import make_federated_regression
    >>> from skfed.federated.flower import load_fitted, save_fitted
    >>> X, y, groups = make_federated_regression(n_clients=2, n_samples=20, random_state=0)
    >>> model = FedAvgRegressor(n_rounds=2, random_state=0).fit(X, y, groups=groups)
    >>> back = load_fitted(save_fitted(model, None))
    >>> bool((back.predict(X) == model.predict(X)).all())
    True
    """
    import skops.io as sio

    data = file if isinstance(file, (bytes, bytearray)) else Path(file).read_bytes()
    found = set(sio.get_untrusted_types(data=data))
    unknown = sorted(found - TRUSTED_TYPES)
    if unknown:
        raise ValueError(f"file holds types outside skfed's trusted list: {unknown}; it was "
                         "not written by save_fitted from a skfed estimator.")
    return sio.loads(data, trusted=sorted(found))


def _personalize(estimator, label, state):
    """``estimator`` (fitted) with the personalized parts of one site."""
    hook = getattr(estimator, "_with_site_state", None)
    if hook is None:  # nothing personalized
        return copy.deepcopy(estimator)
    return hook(label, state)


def _call_loader(loader, node_config, run_config):
    """``loader(node_config)``, or ``loader(node_config, run_config)`` if it takes two."""
    if _n_positional(loader) >= 2:
        return loader(node_config, dict(run_config))
    return loader(node_config)


def _to_record(message):
    # np.ascontiguousarray would turn 0-d arrays into 1-d ones
    return ArrayRecord({name: Array(np.require(arr, requirements="C"))
                        for name, arr in message.items()})


def _from_record(record):
    return {name: record[name].numpy() for name in record}


def _payload_bytes(message):
    """Bytes of the serialized arrays of a message (its ``ArrayRecord`` contents)."""
    if message.has_error():
        return 0
    return sum(len(record[name].data) for record in message.content.array_records.values()
               for name in record)


def exchange(grid, messages, timeout, poll=0.25, wire=None, offline_grace=10.0):
    """Send messages and collect replies, giving up early on SuperNodes that left.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    messages : dict
        Key (e.g. client index) to the message for it.
    timeout : float
        Seconds to wait for all replies.
    poll : float, default=0.25
        Seconds between pulls (``Grid.send_and_receive`` waits 3 s).
    wire : dict or None, default=None
        If given, ``wire["down"]`` and ``wire["up"]`` are increased by the
        serialized array bytes sent and received.
    offline_grace : float, default=10.0
        A SuperNode counts as gone only after the SuperLink has listed it
        offline for this many seconds without a break: on a busy machine a
        live node's heartbeat can be late.

    Returns
    -------
    replies : dict
        Key to reply, for the replies that arrived.
    lost : dict
        Key to the reason there is no reply (offline, or not within the
        timeout).
    """
    start = time.monotonic()
    deadline = start + timeout
    absent_since = {}

    def gone(node, now, online):
        if node in online:
            absent_since.pop(node, None)
            return False
        return now - absent_since.setdefault(node, now) >= offline_grace

    # a node offline at the start of the exchange gets the grace period too
    waiting = {key: m.metadata.dst_node_id for key, m in messages.items()}
    lost = {}
    while True:
        now, online = time.monotonic(), set(grid.get_node_ids())
        for key, node in list(waiting.items()):
            if node in online:
                del waiting[key]
            elif gone(node, now, online) or now > deadline:
                lost[key] = "is offline"
                del waiting[key]
        if not waiting:
            break
        time.sleep(poll)
    to_send = {key: m for key, m in messages.items() if key not in lost}
    keys = list(to_send)
    ids = list(grid.push_messages([to_send[key] for key in keys])) if keys else []
    if wire is not None:
        wire["down"] += sum(_payload_bytes(to_send[key]) for key in keys)
    pending = dict(zip(ids, keys))
    nodes = {key: to_send[key].metadata.dst_node_id for key in keys}
    replies = {}
    while pending:
        for reply in grid.pull_messages(list(pending)):
            key = pending.pop(reply.metadata.reply_to_message_id, None)
            if key is not None:
                replies[key] = reply
                if wire is not None:
                    wire["up"] += _payload_bytes(reply)
        if not pending:
            break
        now, online = time.monotonic(), set(grid.get_node_ids())
        for msg_id, key in list(pending.items()):
            if gone(nodes[key], now, online):  # left during the round (e.g. SIGTERM)
                lost[key] = "went offline before answering"
                del pending[msg_id]
        if now > deadline:
            for key in pending.values():
                lost[key] = f"did not answer within {timeout} s"
            break
        time.sleep(poll)
    return replies, lost


class FlowerTransport:
    """Reaches the clients through a Flower ``Grid`` (one SuperNode per client).

    Used by the ``ServerApp`` of :class:`FlowerFederation` in place of the
    in-process transport; the round loop is the same.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The run's grid.
    node_ids : list of int
        SuperNode id of each client, in client-index order.
    labels : list
        Client labels, in client-index order.
    timeout : float
        Seconds to wait for the replies of a round; a client that has not
        answered by then did not answer (:class:`ClientDropout`).
    wire : dict or None, default=None
        Byte counters ``{"up", "down"}`` to add the serialized payloads to.
    offline_grace : float, default=10.0
        See :func:`exchange`.
    setup : mapping or None, default=None
        The combined set-up summary. Until a site has answered once, its
        messages carry it (and ``entropy``), so the site can build the
        algorithm and its local state first.
    entropy : int or None, default=None
        Seed of the random streams (see :func:`skfed.federated.round_rng`).
    """

    def __init__(self, grid, node_ids, labels, timeout, wire=None, offline_grace=10.0,
                 setup=None, entropy=None):
        self.grid = grid
        self.node_ids = list(node_ids)
        self.labels = list(labels)
        self.timeout = timeout
        self.wire = {"up": 0, "down": 0} if wire is None else wire
        self.offline_grace = offline_grace
        self.setup = setup
        self.entropy = entropy
        self.started = set()

    def _message(self, k, message_type, arrays, config):
        content = {"arrays": _to_record(arrays),
                   "config": ConfigRecord({**config, "client-index": int(k)})}
        if self.setup is not None and k not in self.started:
            content["setup"] = _to_record(self.setup)
            content["config"]["entropy"] = str(self.entropy)
        return Message(RecordDict(content), dst_node_id=self.node_ids[k],
                       message_type=message_type)

    def _exchange(self, asked, message_type, arrays, config):
        messages = {int(k): self._message(int(k), message_type, arrays, config) for k in asked}
        replies, lost = exchange(self.grid, messages, self.timeout, wire=self.wire,
                                 offline_grace=self.offline_grace)
        outcomes = []
        for k in asked:
            where = f"client {self.labels[k]!r} (node {self.node_ids[k]})"
            reply = replies.get(int(k))
            if reply is None:
                outcomes.append((False, ClientDropout(f"{where} {lost[int(k)]}")))
            elif reply.has_error():
                outcomes.append((False, ClientDropout(f"{where} failed: {reply.error.reason}")))
            else:
                self.started.add(int(k))
                outcomes.append((True, check_message(_from_record(reply.content["arrays"]),
                                                     sender=f"client {self.labels[k]!r}")))
        return outcomes

    def round(self, rnd, asked, broadcast, final=False):
        """Send the broadcast to the asked clients; return their replies."""
        message_type = "train.finalize" if final else "train"
        return self._exchange(asked, message_type, broadcast, {"round": int(rnd)})


class FlowerFederation:
    """Build a Flower ``ServerApp`` and ``ClientApp`` for a skfed estimator.

    Parameters
    ----------
    make_estimator : callable
        ``make_estimator(run_config) -> estimator``: an unfitted skfed
        estimator (the same on the server and on every site). ``run_config``
        is the run's Flower config (a dict). It is called when a run starts
        (on the coordinator) and by each site at its set-up and first round,
        not when the app is built: a site's later rounds run without it, so
        their processes do not import the estimator (nor scikit-learn). Import
        the estimator inside it; :meth:`check` calls it to test it early.
    load_data : callable
        ``load_data(node_config) -> (X, y)``: the site's own rows, read on
        the SuperNode from its node config (e.g. a file path). A function of
        two arguments is called as ``load_data(node_config, run_config)``, so
        one site can serve different data sets to different runs.
    client_key : str, default="client-id"
        Node-config key holding the site's client label (falls back to
        ``"partition-id"``).
    min_nodes : int or None, default=None
        SuperNodes to wait for before training (``run_config["min-nodes"]``
        if ``None``; at least 1).
    connect_timeout : float, default=120
        Seconds to wait for ``min_nodes`` SuperNodes.
    round_timeout : float, default=600
        Seconds to wait for the replies of one round.
    offline_grace : float, default=10
        Seconds a SuperNode must stay offline before it counts as gone (a
        live node's heartbeat can be late on a busy machine).
    site_model_key : str, default="model-path"
        Node-config key naming a file on the site where the site keeps its
        local state after each of its steps (never sent); :func:`site_model`
        turns it into the site's personalized model. Sites without the key
        keep nothing.
    load_test_data : callable or None, default=None
        ``load_test_data(node_config) -> (X, y)`` (or with ``run_config`` as
        second argument): a site's held-out rows. If given, after training
        the coordinator sends the fitted estimator (the shared parts, as
        released, in skops format) to every site in a ``query.evaluate``
        message; each site scores its personalized model (``score(X, y,
        groups=its label)``) on those rows and returns only the score and
        the row count (``site_scores_``). Not part of the fit's
        ``communication_``. A run with ``run_config["evaluate"] = false``
        skips it.
    sites : sequence, mapping or None, default=None
        The coordinator's allow-list. A sequence of client labels: only
        SuperNodes declaring one of them take part (others are left out,
        with a warning), and each must be present. A mapping from label to
        SuperNode id (what ``flwr supernode register`` printed for the
        site's key): a label is accepted only from that node, which binds
        the self-declared label to the node's authenticated identity when
        the SuperLink runs with ``--enable-supernode-auth``. ``None`` takes
        ``run_config["sites"]`` if given (``"a,b"`` or ``"a=12,b=34"``),
        else every connected SuperNode.
    site_noise : {"secret", "shared"}, default="secret"
        Where a private fit's client steps draw their randomness. ``"secret"``:
        from each site's own entropy (the operating system's CSPRNG), so the
        coordinator cannot subtract the noise; runs are not reproducible.
        ``"shared"``: from the run's seed, as in-process, so a Flower run
        equals the in-process fit; **for tests only**: the coordinator knows
        the seed, hence the noise, and the fit's ``privacy_spent_`` says so
        (``"against_coordinator": False``) with a warning. Non-private fits
        draw from the run's seed either way.

    Attributes
    ----------
    server_app : flwr.serverapp.ServerApp
    client_app : flwr.clientapp.ClientApp
    fitted_ : estimator or None
        The estimator fitted by the last run whose ``ServerApp`` ran in this
        process (with Flower's simulation engine, the caller's process).
    site_scores_ : dict or None
        With ``load_test_data``: each site's label to ``(score, n_samples)``
        of its personalized model on its held-out rows, for the last run
        served in this process; also written as JSON to
        ``run_config["scores-output"]`` if given.

    Notes
    -----
    **A site's limits.** A site operator may set, in the SuperNode's node
    config, ``max-epsilon`` and ``max-delta`` (the largest total budget the
    site spends in one fit, as ``privacy_spent_`` reports it) and
    ``min-noise-multiplier`` (the least noise standard deviation over L2
    sensitivity of any release). With any of them set, the site refuses a
    run whose estimator is not private or exceeds them, before it sends
    anything. Every site also checks that the set-up it receives holds its
    own row and feature counts, which set its noise scale.

    The fitted estimator is written in skops format to
    ``run_config["output"]`` if given (:func:`save_fitted`; read it with
    :func:`load_fitted`): an ordinary fitted skfed estimator whose
    ``predict(X)`` is the population prediction. Personalized parts stay on
    the sites.
    """

    def __init__(self, make_estimator, load_data, *, client_key="client-id", min_nodes=None,
                 connect_timeout=120.0, round_timeout=600.0, offline_grace=10.0,
                 site_model_key="model-path", load_test_data=None, sites=None,
                 site_noise="secret"):
        if site_noise not in SITE_NOISE:
            raise ValueError(f"site_noise must be one of {SITE_NOISE}, got {site_noise!r}.")
        self.make_estimator = make_estimator
        self.load_data = load_data
        self.client_key = client_key
        self.min_nodes = min_nodes
        self.connect_timeout = connect_timeout
        self.round_timeout = round_timeout
        self.offline_grace = offline_grace
        self.site_model_key = site_model_key
        self.load_test_data = load_test_data
        self.sites = None if sites is None else _allow_list(sites)
        self.site_noise = site_noise
        self.fitted_ = None
        self.site_scores_ = None
        self.server_app = ServerApp()
        self.server_app.main()(self._server_main)
        self.client_app = ClientApp()
        self.client_app.query("setup")(self._guarded(self._client_setup))
        self.client_app.train()(self._guarded(self._client_round))
        self.client_app.train("finalize")(self._guarded(self._client_finalize))
        self.client_app.query("evaluate")(self._guarded(self._client_evaluate))

    def check(self, run_config=None):
        """Build the run's estimator and check that it supports federation.

        Runs start with this check on the coordinator and on each site; call
        it to test ``make_estimator`` before a run.

        Parameters
        ----------
        run_config : dict or None, default=None
            The run config passed to ``make_estimator`` (``{}`` if None).

        Returns
        -------
        estimator : skfed estimator
            The estimator, its parameters validated.

        Raises
        ------
        TypeError
            If the estimator pools the rows of all sites or lacks a hook of
            :class:`skfed.federated.FederatedContract`.
        """
        estimator = self.make_estimator({} if run_config is None else dict(run_config))
        if getattr(estimator, "_pools_rows", False):
            raise TypeError(f"{type(estimator).__name__} does not support federation: it "
                            "pools the rows of all sites (a centralized reference).")
        if not supports_federation(estimator):
            raise TypeError(
                f"{type(estimator).__name__} does not support federation: it needs "
                f"{', '.join(n for n in _CONTRACT if not hasattr(estimator, n))} "
                "(see skfed.federated.FederatedContract)."
            )
        return check_params(estimator)

    # ------------------------------------------------------------------ site side
    def _label(self, node_config):
        """The site's client label (``client_key``, else Flower's ``partition-id``)."""
        return node_config.get(self.client_key, node_config.get("partition-id"))

    def _guarded(self, handler):
        """``handler`` whose errors reach the coordinator without data values."""

        def run(msg, context):
            try:
                return handler(msg, context)
            except Exception as exc:
                label = self._label(dict(context.node_config))
                _log.error("site %r: %s", label, _public_reason(exc), exc_info=exc)
                raise SiteError(f"site {label!r}: {_public_reason(exc)}") from None

        return run

    def _site(self, context, check_limits=False):
        """The site's estimator and validated rows."""
        config = dict(context.node_config)
        label = self._label(config)
        with _stage("building the estimator"):
            estimator = self.check(context.run_config)
        if check_limits:
            with _stage("checking the privacy limits"):
                _check_limits(estimator, config)
        with _stage("loading its data"):
            X, y = _call_loader(self.load_data, config, context.run_config)
        with _stage("validating its rows"):
            X, y = estimator._validate_site_data(X, y, reset=True)
        return estimator, X, y, label

    def _reply(self, msg, arrays):
        return Message(RecordDict({"arrays": _to_record(arrays)}), reply_to=msg)

    def _client_setup(self, msg, context):
        # the limits first: a site that refuses the run sends nothing
        estimator, X, y, label = self._site(context, check_limits=True)
        with _stage("summarizing its rows"):
            summary = client_summary(X, y, estimator)
        return Message(RecordDict({"arrays": _to_record(summary),
                                   "config": ConfigRecord({"label": label})}), reply_to=msg)

    def _save_state(self, context, run):
        # site-local: context.state stays on the SuperNode (never on the wire). The rows
        # are kept when small, so that later rounds need neither the loader nor the
        # estimator's validation (and the site's process imports no scikit-learn)
        X, y = run["X"], run["y"]
        small = X.nbytes + np.asarray(y).nbytes <= KEEP_ROWS_BYTES
        context.state[_STATE_KEY] = ConfigRecord({
            "state": pickle.dumps(run["state"]), "index": run["index"],
            "entropy": str(run["entropy"]), "algorithm": pickle.dumps(run["algorithm"]),
            "last-round": run["last_round"], "finalized": run["finalized"],
            "n-rounds": run["n_rounds"], "estimator": run["estimator"],
            "rows": pickle.dumps((X, y)) if small else b"",
        })

    def _start(self, msg, context):
        """Verify the set-up, then build the algorithm and the initial local state."""
        estimator, X, y, label = self._site(context)
        config = msg.content["config"]
        index = int(config["client-index"])
        with _stage("reading the set-up"):
            setup = check_message(_from_record(msg.content["setup"]), sender="server",
                                  allow_text=True)
        _verify_setup(setup, index, X)
        claim = estimator._privacy_claim()  # once: a PLD accountant takes seconds
        _check_limits(estimator, dict(context.node_config), claim)
        entropy = int(config["entropy"])
        if self.site_noise == "secret" and claim is not None:
            # the noise of a private fit: from the site's own CSPRNG, never from the
            # coordinator's seed (which would let the coordinator subtract it)
            entropy = secrets.randbits(128)
        with _stage("building the algorithm"):
            algorithm = estimator._federated_algorithm(setup)
            data = algorithm.prepare_client(ClientData(X=X, y=y, label=label, index=index))
        with _stage("the site's first step"):
            state = client_start(algorithm, data, entropy)
        n_rounds = int(estimator._engine_params()["n_rounds"])
        return dict(algorithm=algorithm, data=data, state=state, index=index,
                    entropy=entropy, X=X, y=y, label=label, n_rounds=n_rounds,
                    estimator=type(estimator).__name__, last_round=-1, finalized=False)

    def _resume(self, context):
        """The site's run as its last step left it (the site's own state, never sent)."""
        record = context.state[_STATE_KEY]
        if record["rows"]:
            X, y = pickle.loads(record["rows"])
            label = self._label(dict(context.node_config))
        else:
            _, X, y, label = self._site(context)
        run = dict(state=pickle.loads(record["state"]), index=int(record["index"]),
                   entropy=int(record["entropy"]), algorithm=pickle.loads(record["algorithm"]),
                   last_round=int(record["last-round"]), finalized=bool(record["finalized"]),
                   n_rounds=int(record["n-rounds"]), estimator=str(record["estimator"]),
                   X=X, y=y, label=label)
        run["data"] = run["algorithm"].prepare_client(
            ClientData(X=X, y=y, label=label, index=run["index"]))
        return run

    def _step(self, msg, context, final):
        if _STATE_KEY in context.state:
            run = self._resume(context)
        elif "setup" in msg.content.array_records:
            run = self._start(msg, context)
        else:
            raise _Refusal("a training message came before the set-up",
                           f"a {msg.metadata.message_type!r} message came before the set-up")
        rnd = int(msg.content["config"]["round"])
        # one reply per round, rounds in order, no more than the run's: the budget the site
        # checked covers n_rounds releases, and a round asked twice with another broadcast
        # would give two releases with the same noise (their difference is noise-free)
        n_rounds, last_round, finalized = run["n_rounds"], run["last_round"], run["finalized"]
        if finalized or rnd <= last_round or rnd > n_rounds or (rnd == n_rounds and not final):
            raise _Refusal("a round the site already answered or beyond the run's rounds",
                           f"round {rnd} after round {last_round} of {n_rounds} "
                           f"(finalized: {finalized})")
        with _stage("reading the broadcast"):
            broadcast = check_message(_from_record(msg.content["arrays"]), sender="server")
        with _stage(f"the client step of round {rnd}"):
            run["state"], message = client_round(run["algorithm"], run["data"], run["state"],
                                                 broadcast, run["entropy"], rnd, final)
        run.update(last_round=rnd, finalized=final)
        self._save_state(context, run)
        path = context.node_config.get(self.site_model_key)
        if path:
            self._keep_site_state(str(path), run["estimator"], run["label"], run["state"])
        return self._reply(msg, message)

    @staticmethod
    def _keep_site_state(path, estimator_name, label, state):
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as fh:
            pickle.dump({"estimator": estimator_name, "label": label, "state": state}, fh)
        os.replace(tmp, path)  # a reader never sees half a file

    def _client_evaluate(self, msg, context):
        """Score this site's personalized model on its held-out rows; send the score only."""
        config = dict(context.node_config)
        label = self._label(config)
        if _STATE_KEY not in context.state:
            raise _Refusal("no trained state to evaluate", "evaluate before training")
        with _stage("reading the fitted estimator"):
            fitted = load_fitted(msg.content["config"]["estimator"])
            expected = type(self.make_estimator(dict(context.run_config)))
            if type(fitted) is not expected:
                raise _Refusal("the fitted estimator is not the run's",
                               f"got a {type(fitted).__name__}, not a {expected.__name__}")
        state = pickle.loads(context.state[_STATE_KEY]["state"])  # the site's own state
        with _stage("loading its test data"):
            X, y = _call_loader(self.load_test_data, config, context.run_config)
        with _stage("scoring"):
            model = _personalize(fitted, label, state)
            score = model.score(X, y, groups=[label] * len(X))
        return self._reply(msg, {"score": np.float64(score), "n_samples": np.int64(len(X))})

    def _client_round(self, msg, context):
        return self._step(msg, context, final=False)

    def _client_finalize(self, msg, context):
        return self._step(msg, context, final=True)

    # ---------------------------------------------------------------- server side
    def _wait_for_nodes(self, grid, min_nodes, wanted=None):
        deadline = time.monotonic() + self.connect_timeout
        while True:
            nodes = sorted(grid.get_node_ids())
            if wanted is not None:
                nodes = [n for n in nodes if n in wanted]
                if len(nodes) == len(wanted):
                    return nodes
            elif len(nodes) >= min_nodes:
                return nodes
            if time.monotonic() > deadline:
                need = len(wanted) if wanted is not None else min_nodes
                raise RuntimeError(
                    f"only {len(nodes)} of {need} SuperNodes connected within "
                    f"{self.connect_timeout} s."
                )
            time.sleep(0.5)

    def _accepted(self, sites, allow):
        """The set-up replies of the allowed sites; the others are left out, with a warning."""
        if allow is None:
            return sites
        kept, dropped = [], []
        for label, node, summary in sites:
            key = str(label)
            if key in allow and allow[key] in (None, node):
                kept.append((label, node, summary))
            else:
                dropped.append((label, node))
        if dropped:
            warnings.warn(f"SuperNodes left out, not on the allow-list (label, node): {dropped}",
                          stacklevel=2)
        missing = sorted(set(allow) - {str(label) for label, _, _ in kept})
        if missing:
            raise RuntimeError(f"sites of the allow-list did not join the run: {missing}.")
        return kept

    def _server_main(self, grid: Grid, context: Context):
        run_config = dict(context.run_config)
        estimator = self.check(run_config)
        params = estimator._engine_params()
        allow = self.sites
        if allow is None and run_config.get("sites"):
            allow = _allow_list(str(run_config["sites"]))
        bound = None if allow is None else {n for n in allow.values() if n is not None}
        if bound and len(bound) != len(allow):
            raise ValueError("sites: give a SuperNode id for every label, or for none.")
        min_nodes = self.min_nodes or int(run_config.get("min-nodes", 1))
        nodes = self._wait_for_nodes(grid, max(1, min_nodes), wanted=bound or None)

        # set-up exchange: a site that cannot load or validate its data stops the run
        messages = {n: Message(RecordDict({}), dst_node_id=n, message_type="query.setup")
                    for n in nodes}
        wire = {"up": 0, "down": 0}
        replies, lost = exchange(grid, messages, self.round_timeout, wire=wire,
                                 offline_grace=self.offline_grace)
        sites = []
        for node in nodes:
            reply = replies.get(node)
            if reply is None:
                raise RuntimeError(f"SuperNode {node} {lost[node]} at set-up.")
            if reply.has_error():
                raise RuntimeError(f"SuperNode {node} failed the set-up: {reply.error.reason}")
            summary = check_message(_from_record(reply.content["arrays"]),
                                    sender=f"SuperNode {node}", allow_text=True)
            sites.append((reply.content["config"]["label"], node, summary))
        sites = self._accepted(sites, allow)
        try:
            sites.sort(key=lambda site: site[0])
        except TypeError:
            raise ValueError("client labels of the SuperNodes are not comparable: "
                             f"{[s[0] for s in sites]}.") from None
        labels = [s[0] for s in sites]
        if len(set(labels)) != len(labels):
            raise ValueError(f"two SuperNodes share a client label: {labels}.")
        setup, algorithm, ledger = setup_exchange(labels, [s[2] for s in sites], estimator)
        entropy = seed_entropy(params["random_state"])

        transport = FlowerTransport(grid, [s[1] for s in sites], labels, self.round_timeout,
                                    wire=wire, offline_grace=self.offline_grace, setup=setup,
                                    entropy=entropy)
        result = run_rounds(
            algorithm, transport, entropy, n_rounds=params["n_rounds"],
            client_fraction=params.get("client_fraction", 1.0),
            on_client_error=params.get("on_client_error", "raise"), ledger=ledger,
            verbose=params.get("verbose", 0),
        )
        ledger.wire_bytes = dict(wire)
        estimator._set_fitted(FederatedFit(result, setup, np.array(labels), algorithm))
        self._note_noise_source(estimator)
        self.fitted_ = estimator
        output = run_config.get("output")
        if output:
            save_fitted(estimator, output)
        if self.load_test_data is not None and run_config.get("evaluate", True):
            self.site_scores_ = self._evaluate(grid, estimator, sites)
            if run_config.get("scores-output"):
                with open(run_config["scores-output"], "w") as fh:
                    json.dump({str(k): list(v) for k, v in self.site_scores_.items()}, fh)
        return estimator

    def _note_noise_source(self, estimator):
        """Say in ``privacy_spent_`` whether the guarantee holds against the coordinator."""
        spent = getattr(estimator, "privacy_spent_", None)
        if estimator._privacy_claim() is None or not isinstance(spent, dict):
            return
        secret = self.site_noise == "secret"
        estimator.privacy_spent_ = {**spent, "against_coordinator": secret}
        if not secret:
            warnings.warn(
                "site_noise='shared': the sites drew their noise from the run's seed, which the "
                "coordinator knows; privacy_spent_ holds against others, not against the "
                "coordinator (privacy_spent_['against_coordinator'] is False).",
                UserWarning, stacklevel=2)

    def _evaluate(self, grid, estimator, sites):
        """Each site's score of its personalized model on its held-out rows."""
        blob = save_fitted(estimator, None)
        messages = {
            k: Message(RecordDict({"config": ConfigRecord({"estimator": blob})}),
                       dst_node_id=node, message_type="query.evaluate")
            for k, (_, node, _) in enumerate(sites)
        }
        replies, lost = exchange(grid, messages, self.round_timeout,
                                 offline_grace=self.offline_grace)
        scores = {}
        for k, (label, node, _) in enumerate(sites):
            reply = replies.get(k)
            if reply is None or reply.has_error():
                reason = lost.get(k) if reply is None else reply.error.reason
                scores[label] = (float("nan"), 0)  # recorded, not dropped silently
                warnings.warn(f"site {label!r} (node {node}) was not evaluated: {reason}",
                              stacklevel=2)
                continue
            out = _from_record(reply.content["arrays"])
            scores[label] = (float(out["score"]), int(out["n_samples"]))
        return scores


def _allow_list(sites):
    """``sites`` (labels, ``{label: node id}`` or ``"a,b"``/``"a=12,b=34"``) as ``{str: id}``."""
    if isinstance(sites, str):
        items = [part.strip() for part in sites.split(",") if part.strip()]
        pairs = [item.split("=", 1) if "=" in item else (item, None) for item in items]
        try:
            return {label.strip(): None if node is None else int(node) for label, node in pairs}
        except ValueError:
            raise ValueError(f"sites: expected 'label,label' or 'label=node_id,...', got "
                             f"{sites!r}.") from None
    if hasattr(sites, "items"):
        return {str(label): int(node) for label, node in sites.items()}
    if isinstance(sites, (list, tuple, set, frozenset, np.ndarray)):
        return {str(label): None for label in sites}
    raise TypeError(f"sites must be a list of labels, a mapping label -> node id or None, got "
                    f"{type(sites).__name__}.")


def _verify_setup(setup, index, X):
    """A site's check of the set-up it received against its own rows."""
    counts = np.asarray(setup.get("n_samples", ()))
    if counts.ndim != 1 or not 0 <= index < counts.size:
        raise _Refusal("the set-up's client index", f"index {index} of {counts.shape}")
    if int(counts[index]) != X.shape[0]:
        # the noise scale of a private fit follows the row count
        raise _Refusal("the set-up's row count is not the site's",
                       f"set-up says {int(counts[index])} rows, the site has {X.shape[0]}")
    width = int(np.prod(X.shape[1:], dtype=np.int64))
    if int(np.asarray(setup.get("n_features", -1))) != width:
        raise _Refusal("the set-up's feature count is not the site's",
                       f"set-up says {setup.get('n_features')}, the site has {width}")


def _check_limits(estimator, node_config, claim=None):
    """Refuse a run whose privacy is below the site's limits (its node config).

    ``claim`` is ``estimator._privacy_claim()`` if the caller has it already.
    """
    limits = {key: float(node_config[key]) for key in LIMIT_KEYS if key in node_config}
    if not limits:
        return
    if claim is None:
        claim = estimator._privacy_claim()
    if claim is None:
        raise _Refusal("the run is not private and the site sets privacy limits",
                       f"{type(estimator).__name__} adds no noise; limits {limits}")
    broken = [key for key, ok in (
        ("max-epsilon", claim["epsilon"] <= limits.get("max-epsilon", math.inf)),
        ("max-delta", claim["delta"] <= limits.get("max-delta", math.inf)),
        ("min-noise-multiplier",
         claim["noise_multiplier"] >= limits.get("min-noise-multiplier", -math.inf)),
    ) if not ok]
    if broken:
        raise _Refusal(f"the run's privacy is outside the site's {', '.join(broken)}",
                       f"run: {claim}; site limits: {limits}")
