"""The communication ledger: a record of every message that crossed."""

import contextlib
from typing import NamedTuple

import numpy as np

__all__ = ["Ledger", "LedgerRecord", "keeping_payloads"]

# the default of Ledger(keep_payloads=None); switched on only by keeping_payloads()
_KEEP_PAYLOADS = [False]


@contextlib.contextmanager
def keeping_payloads():
    """Make every :class:`Ledger` created inside the block keep its payloads.

    For audits and tests of estimators that create their own ledger (e.g.
    to check that no released number equals a raw value of any row); the
    ledgers of normal fits keep only names, shapes and sizes.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated import Ledger
    >>> from skfed.federated._ledger import keeping_payloads
    >>> with keeping_payloads():
    ...     ledger = Ledger()
    >>> ledger.record(0, "site-a", "up", {"grad": np.ones(2)})
    >>> ledger.payloads[0]["grad"].tolist()
    [1.0, 1.0]
    """
    previous = _KEEP_PAYLOADS[0]
    _KEEP_PAYLOADS[0] = True
    try:
        yield
    finally:
        _KEEP_PAYLOADS[0] = previous

DIRECTIONS = ("down", "up")

_DTYPE_STR = {}  # dtype -> dtype.str (the property builds a new string on each access)


def _dtype_str(dtype):
    s = _DTYPE_STR.get(dtype)
    if s is None:
        s = _DTYPE_STR[dtype] = dtype.str
    return s


class LedgerRecord(NamedTuple):
    """One message between the server and one client.

    ``direction`` is ``"down"`` (server to client) or ``"up"`` (client to
    server); ``round`` is ``-1`` for the set-up exchange before the first
    round (each client's row and feature counts); ``client`` is the
    client's label; ``names``, ``shapes`` and
    ``dtypes`` describe the arrays and ``nbytes`` is their total size.
    """

    round: int
    client: object
    direction: str
    names: tuple
    shapes: tuple
    dtypes: tuple
    nbytes: int


class Ledger:
    """Every message that crossed between clients and server, in order.

    A fitted estimator exposes its ledger as ``communication_``. The totals
    count payload bytes (array data), the quantity a wire format such as
    Flower's ``ArrayRecord`` carries plus a small per-array header.

    Parameters
    ----------
    keep_payloads : bool or None, default=None
        Also keep a read-only copy of every message (for audits and tests,
        e.g. to prove that no raw rows crossed). ``None``: off, except inside
        :func:`keeping_payloads` (how a test reaches the ledger an estimator
        creates). Off by default: it holds everything that was sent.

    Attributes
    ----------
    records : list of LedgerRecord
        One record per message and recipient.
    payloads : list of mapping or None
        The messages themselves, aligned with ``records``, when
        ``keep_payloads=True``.
    failures : list of tuple
        ``(round, client, error message)`` for each client step that failed
        and was skipped.
    round_seconds : list of float
        Wall-clock seconds of each round, from sending the broadcast to the
        end of the server step (the set-up and the final broadcast excluded).
    wire_bytes : dict or None
        On a distributed engine, the bytes of the serialized array payloads
        actually sent, ``{"up": int, "down": int}``, set-up and control
        messages included (for Flower: the ``.npy`` encoding of each array in
        the messages' ``ArrayRecord``); ``None`` in-process.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated import Ledger
    >>> ledger = Ledger()
    >>> ledger.record(0, "site-a", "up", {"grad": np.zeros(3)})
    >>> ledger.bytes_up, ledger.bytes_down
    (24, 0)
    """

    def __init__(self, keep_payloads=None):
        if keep_payloads is None:
            keep_payloads = _KEEP_PAYLOADS[0]
        self.keep_payloads = bool(keep_payloads)
        self.records = []
        self.payloads = [] if keep_payloads else None
        self.failures = []
        self.n_rounds = 0
        self.round_seconds = []
        self.wire_bytes = None

    def record(self, round, client, direction, message):
        """Append one message (a mapping of names to arrays)."""
        self._append(round, (client,), direction, message)

    def record_broadcast(self, round, clients, message):
        """Append the same server message sent to each of ``clients`` (one record each).

        Equivalent to :meth:`record` for every client in turn, with the
        message described once.
        """
        self._append(round, clients, "down", message)

    def _append(self, round, clients, direction, message):
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}.")
        names = tuple(message)
        arrays = [np.asarray(message[n]) for n in names]
        shapes, dtypes, nbytes = [], [], 0
        for a in arrays:  # one pass (a message per client and round)
            shapes.append(a.shape)
            dtypes.append(_dtype_str(a.dtype))
            nbytes += a.nbytes
        shapes, dtypes = tuple(shapes), tuple(dtypes)
        round = int(round)
        if self.keep_payloads:  # a copy: a sender may reuse or change its arrays later
            kept = {}
            for n, a in zip(names, arrays):
                a = np.array(a, copy=True)
                a.flags.writeable = False
                kept[n] = a
            message = kept
        for client in clients:
            self.records.append(LedgerRecord(round, client, direction, names, shapes, dtypes,
                                             nbytes))
            if self.keep_payloads:
                self.payloads.append(message)
            self.n_rounds = max(self.n_rounds, round + 1)  # set-up (-1) is not a round

    def record_failure(self, round, client, error):
        """Note that a client's step failed in a round and was skipped."""
        self.failures.append((int(round), client, f"{type(error).__name__}: {error}"))
        self.n_rounds = max(self.n_rounds, int(round) + 1)

    def _total(self, direction):
        return sum(r.nbytes for r in self.records if r.direction == direction)

    def _per_round(self, direction):
        out = np.zeros(self.n_rounds, dtype=np.int64)
        for r in self.records:
            if r.direction == direction and r.round >= 0:
                out[r.round] += r.nbytes
        return out

    @property
    def bytes_up(self):
        """Total bytes sent by clients to the server."""
        return self._total("up")

    @property
    def bytes_down(self):
        """Total bytes sent by the server to clients."""
        return self._total("down")

    @property
    def total_bytes(self):
        """Bytes in both directions."""
        return self.bytes_up + self.bytes_down

    @property
    def bytes_setup(self):
        """Bytes of the set-up exchange (round -1), included in the totals."""
        return sum(r.nbytes for r in self.records if r.round < 0)

    @property
    def bytes_up_per_round(self):
        """Bytes sent up in each round, shape ``(n_rounds,)`` (set-up excluded)."""
        return self._per_round("up")

    @property
    def bytes_down_per_round(self):
        """Bytes sent down in each round, shape ``(n_rounds,)``."""
        return self._per_round("down")

    @property
    def n_messages(self):
        """Number of messages (one per recipient for a broadcast)."""
        return len(self.records)

    def summary(self):
        """Return the totals as a plain dict (JSON-friendly)."""
        return {
            "n_rounds": self.n_rounds,
            "n_messages": self.n_messages,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_setup": self.bytes_setup,
            "total_bytes": self.total_bytes,
            "bytes_up_per_round": self.bytes_up_per_round.tolist(),
            "bytes_down_per_round": self.bytes_down_per_round.tolist(),
            "n_failures": len(self.failures),
            "round_seconds": list(self.round_seconds),
            "wire_bytes": None if self.wire_bytes is None else dict(self.wire_bytes),
        }

    def __repr__(self):
        return (
            f"Ledger(n_rounds={self.n_rounds}, n_messages={self.n_messages}, "
            f"bytes_up={self.bytes_up}, bytes_down={self.bytes_down}, "
            f"n_failures={len(self.failures)})"
        )
