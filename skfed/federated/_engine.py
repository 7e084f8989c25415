"""The in-process engine: runs rounds of client and server steps."""

import contextlib
import enum
import math
import numbers
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..utils._validation import check_fraction
from ._ledger import Ledger
from ._protocol import FederatedAlgorithm, check_message

__all__ = [
    "ClientDropout",
    "FederationResult",
    "InProcessTransport",
    "Stream",
    "client_round",
    "drive_rounds",
    "round_rng",
    "run_federation",
    "run_rounds",
    "seed_entropy",
]

ON_CLIENT_ERROR = ("raise", "skip")


class Stream(enum.IntEnum):
    """The first spawn key of each random stream derived from one seed (see :func:`round_rng`).

    Every transport draws a client's or the server's randomness from the
    stream named here, so the same seed gives the same fit in-process and on
    a distributed engine.
    """

    CLIENT_INIT = 0
    CLIENT_STEP = 1
    SERVER_INIT = 2
    SERVER_STEP = 3
    SAMPLING = 4
    CLIENT_FINAL = 5


class ClientDropout(Exception):
    """Raised by (or on behalf of) a client that does not answer in a round.

    The engine treats it like any other failure of a client step: under
    ``on_client_error="skip"`` the client is left out of that round and the
    event is recorded in ``Ledger.failures``.
    """


@dataclass
class FederationResult:
    """What :func:`run_federation` returns.

    Attributes
    ----------
    server_state : object
        The server's state after the last round.
    client_states : list
        Each client's local state after the last round (indexed like the
        federation's clients). It never crossed to the server; an in-process
        estimator keeps it to predict for seen clients.
    ledger : Ledger
        Every message that crossed.
    n_rounds : int
        Rounds actually run (fewer than asked if the algorithm converged).
    participation : ndarray of shape (n_rounds, n_clients), dtype=bool
        Which clients answered in which round.
    """

    server_state: object
    client_states: list
    ledger: Ledger
    n_rounds: int
    participation: np.ndarray


def seed_entropy(random_state):
    """Turn a scikit-learn ``random_state`` into the entropy of one SeedSequence.

    ``None`` gives fresh entropy, an int is used as is, and a
    ``numpy.random.RandomState`` or ``Generator`` is drawn from once.
    """
    if random_state is None:
        return np.random.SeedSequence().entropy
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be non-negative, got {random_state}.")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int64).max))
    raise ValueError(
        "random_state must be None, an int, a numpy RandomState or Generator; "
        f"got {random_state!r}."
    )


def round_rng(entropy, *key):
    """Generator of the random stream named by ``key`` under ``entropy``.

    Each client, round and role draws from its own stream, so results do not
    depend on ``n_jobs``, thread scheduling or which other clients were
    sampled, and a distributed run can rebuild the same streams on each node.
    """
    # the generator ``default_rng(seed_sequence)`` returns (same stream, same
    # ``spawn``), built directly: one is made per client and round, and
    # ``default_rng``'s argument dispatch costs about a third of it
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy, spawn_key=key)))


def _sample_clients(n_clients, client_fraction, entropy, rnd):
    """Indices of the clients asked in round ``rnd``, sorted (without replacement)."""
    if client_fraction >= 1.0:
        return np.arange(n_clients)  # everyone: the sampling stream is not needed
    m = max(1, math.ceil(client_fraction * n_clients - 1e-12))
    rng = round_rng(entropy, Stream.SAMPLING, rnd)
    return np.sort(rng.choice(n_clients, size=m, replace=False))


class _BlasLimit:
    """The process's BLAS thread limit while any skfed step that asks for one runs.

    OpenBLAS's thread pool is process-wide, so concurrent fits (say, two folds of a
    threaded ``GridSearchCV``) share one limit: the first to enter sets it, the last
    to leave restores it, whichever threads they run on. A limit that ended with the
    first fit would leave the others with more BLAS threads and results that differ
    in the last bits from a serial run. threadpoolctl (>= 3.8) lets only the thread
    that first set OpenBLAS's limit change it again; the thread that restores clears
    that claim first (``clear_controlling_thread(force=True)``) and after.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._users = 0
        self._limiter = None

    def enter(self, n):
        with self._lock:
            self._users += 1
            if self._users == 1:
                from threadpoolctl import threadpool_limits

                try:
                    _release_blas_control()
                    self._limiter = threadpool_limits(limits=n, user_api="blas")
                    _release_blas_control()
                except BaseException:  # not counted in: the next caller sets the limit
                    self._users -= 1
                    raise

    def exit(self):
        with self._lock:
            self._users -= 1
            if self._users == 0:
                _release_blas_control()
                self._limiter.restore_original_limits()
                _release_blas_control()
                self._limiter = None


def _release_blas_control():
    """Let any thread set OpenBLAS's limit next (a no-op before threadpoolctl 3.8)."""
    import threadpoolctl

    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None),
                    "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)


_BLAS_LIMIT = _BlasLimit()


@contextlib.contextmanager
def blas_threads(n):
    """Run the enclosed steps with ``n`` BLAS threads (``None``: leave BLAS alone).

    The limit is the process's (see :class:`_BlasLimit`): within it, nested and
    concurrent calls only count themselves in, so an engine that limits a whole fit
    costs one library scan (threadpoolctl, about 5 ms), and the client steps it runs,
    on its threads too, stay inside that limit. skfed asks for one value (1), so a
    concurrent call never meets another. A BLAS library loaded after the scan is not
    limited: load what the steps need first (:meth:`FederatedAlgorithm.prepare_client`).
    """
    if n is None:
        yield
        return
    _BLAS_LIMIT.enter(int(n))
    try:
        yield
    finally:
        _BLAS_LIMIT.exit()


def client_start(algorithm, data, entropy):
    """A client's ``client_init`` (its initial local state), on every engine."""
    with blas_threads(algorithm.blas_threads):
        return algorithm.client_init(data, round_rng(entropy, Stream.CLIENT_INIT, data.index))


def client_round(algorithm, data, state, broadcast, entropy, rnd, final=False):
    """One client's step of round ``rnd``, on every engine: ``(new_state, message)``.

    The in-process transport and a distributed site (:mod:`skfed.federated.flower`)
    both call this, so a client's randomness and checks are the same wherever it runs.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
        The client steps.
    data : ClientData
        The client's prepared rows; ``data.index`` names its random streams.
    state : object
        The client's local state before the step.
    broadcast : mapping
        The server's message of this round.
    entropy : int
        Seed of the random streams (see :func:`round_rng`).
    rnd : int
        The round (the final broadcast's round with ``final=True``).
    final : bool, default=False
        Run ``client_finalize`` (the reply is empty) instead of ``client_step``.

    Returns
    -------
    state : object
        The client's new local state.
    message : mapping
        The checked reply (``{}`` after ``client_finalize``).
    """
    with blas_threads(algorithm.blas_threads):
        if final:
            rng = round_rng(entropy, Stream.CLIENT_FINAL, data.index, rnd)
            return algorithm.client_finalize(data, state, broadcast, rng), {}
        # no stream for a client step that never draws (FederatedAlgorithm.client_step_draws)
        rng = (round_rng(entropy, Stream.CLIENT_STEP, data.index, rnd)
               if algorithm.client_step_draws else None)
        state, message = algorithm.client_step(data, state, broadcast, rng)
    return state, check_message(message, sender=f"client {data.label!r}")


def _run_client(algorithm, data, state, broadcast, entropy, rnd, final):
    """Plain-Python wrapper so joblib never has to pickle a numba dispatcher."""
    try:
        state, message = client_round(algorithm, data, state, broadcast, entropy, rnd, final)
        return True, state, message
    except Exception as exc:  # reported to the engine's failure policy
        return False, state, exc


class InProcessTransport:
    """Reaches the clients of a :class:`Federation` in this process.

    A transport is how the round loop of :func:`run_federation` reaches the
    clients: ``labels`` names them, ``init`` sets up their local state, and
    ``round(rnd, asked, broadcast)`` runs the client steps of the asked
    clients and returns, per asked client, ``(ok, message_or_error)``. Client
    state never passes through the round loop. This one runs the steps on
    joblib threads; a distributed transport (e.g. Flower) sends the broadcast
    over the network instead.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
        The client steps to run.
    federation : Federation
        The clients and their rows.
    entropy : int
        Seed of the random streams (see :func:`round_rng`).
    n_jobs : int or None
        Number of joblib threads for the client steps of a round.
    """

    def __init__(self, algorithm, federation, entropy, n_jobs=None):
        self.algorithm = algorithm
        self.federation = federation
        self.entropy = entropy
        self.n_jobs = n_jobs
        self.labels = [c.label for c in federation.clients]
        self.clients = None
        self.states = None
        self._parallel = None

    def init(self):
        """Prepare every client's rows and run its ``client_init`` (nothing is sent)."""
        self.clients = [self.algorithm.prepare_client(c) for c in self.federation.clients]
        with blas_threads(self.algorithm.blas_threads):
            self.states = [client_start(self.algorithm, c, self.entropy) for c in self.clients]

    def round(self, rnd, asked, broadcast, final=False):
        """Run the asked clients' steps; keep their new state, return their messages.

        With ``final=True`` run ``client_finalize`` instead (empty replies).
        """
        clients = self.clients
        args = [
            (self.algorithm, clients[k], self.states[k], broadcast, self.entropy, rnd, final)
            for k in asked
        ]
        if self.n_jobs in (None, 1) or len(args) == 1:
            outcomes = [_run_client(*a) for a in args]
        else:
            # imported here: a Flower site's process runs one client and needs no joblib
            from sklearn.utils.parallel import Parallel, delayed

            if self._parallel is None:
                self._parallel = Parallel(n_jobs=self.n_jobs, prefer="threads")
            outcomes = self._parallel(delayed(_run_client)(*a) for a in args)
        results = []
        for k, (ok, state, payload) in zip(asked, outcomes):
            if ok:  # a failed client keeps its previous state
                self.states[k] = state
            results.append((ok, payload))
        return results


def run_federation(
    algorithm,
    federation,
    *,
    n_rounds,
    client_fraction=1.0,
    n_jobs=None,
    on_client_error="raise",
    random_state=None,
    ledger=None,
    verbose=0,
):
    """Run rounds of client steps and server steps; only messages cross.

    In each round the server's broadcast goes to each sampled client, every
    sampled client runs ``algorithm.client_step`` on its own rows and state,
    the ledger records both directions, and ``algorithm.server_step`` sees
    only the messages of the clients that answered.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
        The client and server steps.
    federation : Federation
        The clients and their rows.
    n_rounds : int
        Maximum number of rounds; the algorithm may stop earlier through
        ``algorithm.converged``.
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients asked per round, drawn uniformly without
        replacement (at least one; ``ceil(client_fraction * n_clients)``);
        a round for which ``algorithm.asks_every_client(server_state)`` is
        true asks every client.
    n_jobs : int or None, default=None
        Client steps of a round run on this many joblib threads (numba
        kernels release the GIL). Results do not depend on it.
    on_client_error : {"raise", "skip"}, default="raise"
        Policy for a client step that raises (or a client that does not
        answer, :class:`ClientDropout`). ``"raise"`` re-raises the error with
        a note naming the client and round; ``"skip"`` leaves that client out
        of the round, keeps its previous state, records the failure in
        ``ledger.failures`` and aggregates over the others. A round in which
        no client answered is an error under both policies.
    random_state : int, RandomState instance or None, default=None
        Seed of every random stream (see :func:`round_rng`).
    ledger : Ledger or None, default=None
        Where to record messages; a new one if ``None``.
    verbose : int, default=0
        Print one line per round if positive.

    Returns
    -------
    result : FederationResult

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated import FederatedAlgorithm, Federation, run_federation
    >>> class Mean(FederatedAlgorithm):
    ...     def client_step(self, data, state, broadcast, rng):
    ...         return state, {"sum": data.y.sum(), "n": data.n_samples}
    ...     def server_step(self, state, messages, rng):
    ...         s = sum(m["sum"] for m in messages.values())
    ...         n = sum(m["n"] for m in messages.values())
    ...         return s / n, {"mean": s / n}
    >>> fed = Federation.from_arrays(np.zeros((4, 1)), np.arange(4.0), [0, 0, 1, 1])
    >>> result = run_federation(Mean(), fed, n_rounds=1, random_state=0)
    >>> float(result.server_state), result.ledger.bytes_up
    (1.5, 32)
    """
    if not isinstance(algorithm, FederatedAlgorithm):
        raise TypeError(
            f"algorithm must be a FederatedAlgorithm, got {type(algorithm).__name__}."
        )
    _check_options(n_rounds, client_fraction, on_client_error)
    entropy = seed_entropy(random_state)
    ledger = Ledger() if ledger is None else ledger
    too_small = [
        c.label for c in federation.clients if c.n_samples < algorithm.min_samples_per_client
    ]
    if too_small:
        raise ValueError(
            f"clients {too_small[:10]} have fewer than "
            f"{algorithm.min_samples_per_client} rows, the minimum of this "
            "estimator (groups)."
        )

    transport = InProcessTransport(algorithm, federation, entropy, n_jobs)
    transport.init()
    return run_rounds(algorithm, transport, entropy, n_rounds=n_rounds,
                      client_fraction=client_fraction, on_client_error=on_client_error,
                      ledger=ledger, verbose=verbose)


def _check_options(n_rounds, client_fraction, on_client_error):
    """The engine's options, checked; returns ``client_fraction`` as a float."""
    if on_client_error not in ON_CLIENT_ERROR:
        raise ValueError(
            f"on_client_error must be one of {ON_CLIENT_ERROR}, got {on_client_error!r}."
        )
    if isinstance(n_rounds, bool) or not isinstance(n_rounds, numbers.Integral) or n_rounds < 1:
        raise ValueError(f"n_rounds must be a positive integer, got {n_rounds!r}.")
    return check_fraction(client_fraction, "client_fraction")


def run_rounds(algorithm, transport, entropy, *, n_rounds, client_fraction=1.0,
               on_client_error="raise", ledger=None, verbose=0):
    """Run the rounds of ``algorithm`` over a started transport: the tail of every engine.

    :func:`run_federation` calls it with its in-process transport; a
    distributed engine (:mod:`skfed.federated.flower`) with its own, so both
    share the round semantics of :func:`drive_rounds`.

    Parameters
    ----------
    algorithm : FederatedAlgorithm
        The client and server steps.
    transport : object
        Has ``labels`` (client labels in index order) and
        ``round(rnd, asked, broadcast, final=False)``; its clients are set up.
        Its ``states``, if it has them, are the result's client states.
    entropy : int
        Seed of the random streams (:func:`seed_entropy` of the ``random_state``).
    n_rounds, client_fraction, on_client_error, verbose
        As in :func:`run_federation`.
    ledger : Ledger or None, default=None
        Where to record messages; a new one if ``None``.

    Returns
    -------
    result : FederationResult
        ``client_states`` is ``None`` for a transport that keeps no states here.
    """
    client_fraction = _check_options(n_rounds, client_fraction, on_client_error)
    ledger = Ledger() if ledger is None else ledger
    with blas_threads(algorithm.blas_threads):
        server_state, participation = drive_rounds(
            algorithm, transport, n_rounds, client_fraction, on_client_error, entropy, ledger,
            verbose,
        )
    return FederationResult(
        server_state=server_state,
        client_states=getattr(transport, "states", None),
        ledger=ledger,
        n_rounds=len(participation),
        participation=participation,
    )


def drive_rounds(algorithm, transport, n_rounds, client_fraction, on_client_error, entropy,
                  ledger, verbose):
    """Run the rounds of ``algorithm`` over ``transport``: the round semantics of every engine.

    Sampling, the failure policy, the ledger and early stopping live here, so
    an in-process fit and a distributed one behave the same. A transport has
    ``labels`` (client labels in index order) and
    ``round(rnd, asked, broadcast, final=False)``, which returns one
    ``(ok, message_or_exception)`` pair per asked client.

    Returns
    -------
    server_state : object
        The server's state after the last round.
    participation : ndarray of shape (n_rounds_run, n_clients), dtype=bool
        Which clients answered in which round.
    """
    labels = transport.labels
    n_clients = len(labels)
    server_state, broadcast = algorithm.server_init(round_rng(entropy, Stream.SERVER_INIT))
    broadcast = check_message(broadcast, sender="server")
    participation = []
    for rnd in range(n_rounds):
        tic = time.perf_counter()
        if algorithm.asks_every_client(server_state):
            asked = np.arange(n_clients)
        else:
            asked = _sample_clients(n_clients, client_fraction, entropy, rnd)
        ledger.record_broadcast(rnd, [labels[k] for k in asked], broadcast)
        messages = _collect(transport.round(rnd, asked, broadcast), asked, labels, rnd,
                            on_client_error, ledger)
        answered = np.zeros(n_clients, dtype=bool)
        answered[list(messages)] = True
        if not messages:
            raise RuntimeError(
                f"no client answered in round {rnd}: "
                + "; ".join(f[2] for f in ledger.failures if f[0] == rnd)
            )
        participation.append(answered)
        server_state, broadcast = algorithm.server_step(
            server_state, messages, round_rng(entropy, Stream.SERVER_STEP, rnd)
        )
        broadcast = check_message(broadcast, sender="server")
        ledger.round_seconds.append(time.perf_counter() - tic)
        if verbose:
            print(
                f"[skfed] round {rnd + 1}/{n_rounds}: {len(messages)}/{len(asked)} "
                f"clients answered, {time.perf_counter() - tic:.3f}s"
            )
        if algorithm.converged(server_state):
            break
    if algorithm.finalize_clients:
        # the final broadcast reaches every client; nothing is sent back
        final_round = len(participation)
        everyone = np.arange(n_clients)
        ledger.record_broadcast(final_round, labels, broadcast)
        _collect(transport.round(final_round, everyone, broadcast, final=True), everyone,
                 labels, final_round, on_client_error, ledger, replies=False)
    return server_state, np.array(participation, dtype=bool).reshape(-1, n_clients)


def _collect(outcomes, asked, labels, rnd, on_client_error, ledger, replies=True):
    """Apply the failure policy to one round's outcomes; record and return the replies."""
    messages = {}
    for k, (ok, payload) in zip(asked, outcomes):
        if not ok:
            if on_client_error == "raise":
                if hasattr(payload, "add_note"):
                    payload.add_note(f"(raised by the step of client {labels[k]!r} in round {rnd})")
                raise payload
            ledger.record_failure(rnd, labels[k], payload)
            continue
        if replies:
            ledger.record(rnd, labels[k], "up", payload)
            messages[int(k)] = payload
    return messages
