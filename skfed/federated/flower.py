"""Run a skfed estimator on a Flower federation (SuperLink and SuperNodes).

Install the extra: ``pip install "skfed[flower]"``. The core package does not
import this module.

:class:`FlowerFederation` turns an estimator factory and a per-site data
loader into a Flower ``ServerApp`` and ``ClientApp`` that run the
estimator's *own* client and server steps, unchanged, as Flower messages:
every skfed message becomes an ``ArrayRecord`` of named arrays. The round
semantics (client sampling, the failure policy, the ledger) are those of the
in-process engine, shared code, so with the same ``random_state`` and data a
Flower run and an in-process fit give the same fitted parameters and the
same ``communication_`` totals.

Client-local state (personalized parts, dual variables, noise streams) is
kept in the SuperNode's ``context.state`` and never leaves the site.

Message types: ``query.setup`` (each site validates its data and sends its
set-up summary: row and feature counts, plus the estimator's extras such as
class labels), ``train`` (one round), ``train.finalize`` (the final
broadcast, when the algorithm asks for it). The first message a site gets
after the set-up also carries the combined set-up summary (counted in the
ledger as the in-process set-up exchange is) and the control values seed and
client index (not counted): the site builds the algorithm and its local
state from them. Folding this into the first round saves a whole exchange,
which on Flower costs seconds (each message starts a ``flwr-clientapp``
process).
"""

import copy
import inspect
import json
import os
import pickle
import time
import warnings

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from ..utils._validation import check_fraction
from ._engine import ClientDropout, FederationResult, Stream, drive_rounds, round_rng, seed_entropy
from ._fit import FederatedFit, client_summary, setup_exchange
from ._flower_local import LocalFederation, make_certificates, write_app
from ._flower_memory import InMemoryGrid
from ._protocol import ClientData, check_message

__all__ = ["FlowerFederation", "FlowerTransport", "InMemoryGrid", "LocalFederation", "exchange",
           "make_certificates", "site_model", "supports_federation", "write_app"]

_CONTRACT = ("_check_params", "_validate_site_data", "_federated_algorithm",
             "_engine_params", "_set_fitted")
_STATE_KEY = "skfed"


def _n_positional(func):
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return 2
    return sum(p.kind in kinds for p in params)


def _checked(estimator):
    """``estimator`` with its hyperparameters checked as ``fit`` checks them, on any node."""
    estimator._validate_params()  # scikit-learn's _parameter_constraints
    estimator._check_params()
    return estimator


def supports_federation(estimator):
    """Whether ``estimator`` provides the hooks of :class:`skfed.federated.FederatedContract`.

    Estimators that pool the rows (a centralized reference) set
    ``_pools_rows = True`` and are refused even if they share the hooks.
    """
    return (all(hasattr(estimator, name) for name in _CONTRACT)
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
        The run's result (``run_config["output"]``).
    path : str or path-like
        The site's file.

    Returns
    -------
    model : fitted estimator
        A copy of ``estimator`` whose only client is this site, with its
        personalized parts: ``model.predict(X, groups=[label] * len(X))``
        equals the personalized prediction of an in-process fit. Estimators
        without personalized parts (e.g. ``DPFedDROClassifier``) return an
        unchanged copy.
    """
    with open(path, "rb") as fh:
        saved = pickle.load(fh)
    if type(estimator).__name__ != saved["estimator"]:
        raise ValueError(f"{path} holds the state of a {saved['estimator']} site, not of a "
                         f"{type(estimator).__name__} (estimator).")
    labels = list(getattr(estimator, "clients_", []))
    if saved["label"] not in labels:
        raise ValueError(f"site {saved['label']!r} of {path} is not a client of this fitted "
                         f"estimator (clients_ = {labels}).")
    return _personalize(estimator, saved["label"], saved["state"])


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
        is the run's Flower config (a dict); it is also called once with
        ``{}`` when the app is built, to check the estimator's contract, so
        read keys with defaults.
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
        released) to every site in a ``query.evaluate`` message; each site
        scores its personalized model (``score(X, y, groups=its label)``)
        on those rows and returns only the score and the row count
        (``site_scores_``). Not part of the fit's ``communication_``. A run
        with ``run_config["evaluate"] = false`` skips it.

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
    The fitted estimator is written with ``pickle`` to
    ``run_config["output"]`` if given: an ordinary fitted skfed estimator
    whose ``predict(X)`` is the population prediction. Personalized parts
    stay on the sites.
    """

    def __init__(self, make_estimator, load_data, *, client_key="client-id", min_nodes=None,
                 connect_timeout=120.0, round_timeout=600.0, offline_grace=10.0,
                 site_model_key="model-path", load_test_data=None):
        probe = make_estimator({})
        if getattr(probe, "_pools_rows", False):
            raise TypeError(f"{type(probe).__name__} does not support federation: it pools the "
                            "rows of all sites (a centralized reference).")
        if not supports_federation(probe):
            raise TypeError(
                f"{type(probe).__name__} does not support federation: it needs "
                f"{', '.join(_CONTRACT)} (see skfed.federated.FederatedContract)."
            )
        self.make_estimator = make_estimator
        self.load_data = load_data
        self.client_key = client_key
        self.min_nodes = min_nodes
        self.connect_timeout = connect_timeout
        self.round_timeout = round_timeout
        self.offline_grace = offline_grace
        self.site_model_key = site_model_key
        self.load_test_data = load_test_data
        self.fitted_ = None
        self.site_scores_ = None
        self.server_app = ServerApp()
        self.server_app.main()(self._server_main)
        self.client_app = ClientApp()
        self.client_app.query("setup")(self._client_setup)
        self.client_app.train()(self._client_round)
        self.client_app.train("finalize")(self._client_finalize)
        self.client_app.query("evaluate")(self._client_evaluate)

    # ------------------------------------------------------------------ site side
    def _label(self, node_config):
        """The site's client label (``client_key``, else Flower's ``partition-id``)."""
        return node_config.get(self.client_key, node_config.get("partition-id"))

    def _site(self, context):
        """The site's estimator and validated rows; errors name the site."""
        config = dict(context.node_config)
        label = self._label(config)
        estimator = _checked(self.make_estimator(dict(context.run_config)))
        try:
            X, y = _call_loader(self.load_data, config, context.run_config)
            X, y = estimator._validate_site_data(X, y, reset=True)
        except Exception as exc:
            raise ValueError(f"site {label!r}: its data cannot be used: {exc}") from exc
        return estimator, X, y, label

    def _reply(self, msg, arrays):
        return Message(RecordDict({"arrays": _to_record(arrays)}), reply_to=msg)

    def _client_setup(self, msg, context):
        estimator, X, y, label = self._site(context)
        reply = Message(
            RecordDict({"arrays": _to_record(client_summary(X, y, estimator)),
                        "config": ConfigRecord({"label": label})}),
            reply_to=msg,
        )
        return reply

    def _save_state(self, context, state, index, entropy, algorithm):
        context.state[_STATE_KEY] = ConfigRecord({
            "state": pickle.dumps(state), "index": index, "entropy": str(entropy),
            "algorithm": pickle.dumps(algorithm),
        })

    def _start(self, msg, estimator, X, y, label):
        """Build the algorithm and the initial local state from the set-up summary."""
        config = msg.content["config"]
        index, entropy = int(config["client-index"]), int(config["entropy"])
        setup = check_message(_from_record(msg.content["setup"]), sender="server",
                              allow_text=True)
        algorithm = estimator._federated_algorithm(setup)
        data = algorithm.prepare_client(ClientData(X=X, y=y, label=label, index=index))
        state = algorithm.client_init(data, round_rng(entropy, Stream.CLIENT_INIT, index))
        return algorithm, data, state, index, entropy

    def _step(self, msg, context, final):
        estimator, X, y, label = self._site(context)
        if _STATE_KEY in context.state:
            record = context.state[_STATE_KEY]
            state, index, entropy = (pickle.loads(record["state"]), int(record["index"]),
                                     int(record["entropy"]))
            algorithm = pickle.loads(record["algorithm"])
            data = algorithm.prepare_client(ClientData(X=X, y=y, label=label, index=index))
        elif "setup" in msg.content.array_records:
            algorithm, data, state, index, entropy = self._start(msg, estimator, X, y, label)
        else:
            raise RuntimeError(f"site {label!r} got a {msg.metadata.message_type!r} message "
                               "before the set-up summary.")
        rnd = int(msg.content["config"]["round"])
        broadcast = check_message(_from_record(msg.content["arrays"]), sender="server")
        if final:
            rng = round_rng(entropy, Stream.CLIENT_FINAL, index, rnd)
            state = algorithm.client_finalize(data, state, broadcast, rng)
            message = {}
        else:
            rng = round_rng(entropy, Stream.CLIENT_STEP, index, rnd)
            state, message = algorithm.client_step(data, state, broadcast, rng)
            message = check_message(message, sender=f"client {label!r}")
        self._save_state(context, state, index, entropy, algorithm)
        path = context.node_config.get(self.site_model_key)
        if path:
            self._keep_site_state(str(path), estimator, label, state)
        return self._reply(msg, message)

    @staticmethod
    def _keep_site_state(path, estimator, label, state):
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as fh:
            pickle.dump({"estimator": type(estimator).__name__, "label": label,
                         "state": state}, fh)
        os.replace(tmp, path)  # a reader never sees half a file

    def _client_evaluate(self, msg, context):
        """Score this site's personalized model on its held-out rows; send the score only."""
        config = dict(context.node_config)
        label = self._label(config)
        if _STATE_KEY not in context.state:
            raise RuntimeError(f"site {label!r} has no trained state to evaluate.")
        fitted = pickle.loads(msg.content["config"]["estimator"])
        state = pickle.loads(context.state[_STATE_KEY]["state"])
        try:
            X, y = _call_loader(self.load_test_data, config, context.run_config)
        except Exception as exc:
            raise ValueError(f"site {label!r}: its test data cannot be used: {exc}") from exc
        model = _personalize(fitted, label, state)
        score = model.score(X, y, groups=[label] * len(X))
        return self._reply(msg, {"score": np.float64(score), "n_samples": np.int64(len(X))})

    def _client_round(self, msg, context):
        return self._step(msg, context, final=False)

    def _client_finalize(self, msg, context):
        return self._step(msg, context, final=True)

    # ---------------------------------------------------------------- server side
    def _wait_for_nodes(self, grid, min_nodes):
        deadline = time.monotonic() + self.connect_timeout
        while True:
            nodes = sorted(grid.get_node_ids())
            if len(nodes) >= min_nodes:
                return nodes
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"only {len(nodes)} of {min_nodes} SuperNodes connected within "
                    f"{self.connect_timeout} s."
                )
            time.sleep(0.5)

    def _server_main(self, grid: Grid, context: Context):
        run_config = dict(context.run_config)
        estimator = _checked(self.make_estimator(run_config))
        params = estimator._engine_params()
        min_nodes = self.min_nodes or int(run_config.get("min-nodes", 1))
        nodes = self._wait_for_nodes(grid, max(1, min_nodes))

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
        server_state, participation = drive_rounds(
            algorithm, transport, params["n_rounds"],
            check_fraction(params.get("client_fraction", 1.0), "client_fraction"),
            params.get("on_client_error", "raise"), entropy, ledger, params.get("verbose", 0),
        )
        ledger.wire_bytes = dict(wire)
        result = FederationResult(server_state=server_state, client_states=None, ledger=ledger,
                                  n_rounds=len(participation), participation=participation)
        estimator._set_fitted(FederatedFit(result, setup, np.array(labels), algorithm))
        self.fitted_ = estimator
        output = run_config.get("output")
        if output:
            with open(output, "wb") as fh:
                pickle.dump(estimator, fh)
        if self.load_test_data is not None and run_config.get("evaluate", True):
            self.site_scores_ = self._evaluate(grid, estimator, sites)
            if run_config.get("scores-output"):
                with open(run_config["scores-output"], "w") as fh:
                    json.dump({str(k): list(v) for k, v in self.site_scores_.items()}, fh)
        return estimator

    def _evaluate(self, grid, estimator, sites):
        """Each site's score of its personalized model on its held-out rows."""
        blob = pickle.dumps(estimator)
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
