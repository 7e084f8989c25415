"""The federated protocol: client data, messages and the algorithm interface.

Every skfed estimator trains by rounds of a *client step* and a *server step*.
Only :data:`Message` objects (flat mappings of names to numeric numpy arrays)
cross between the two, so the same steps can run in-process (see
:func:`run_federation`) or on a distributed engine such as Flower, where a
message maps one-to-one onto an ``ArrayRecord``.
"""

import functools
import numbers
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from ..utils._validation import check_groups

__all__ = ["ClientData", "Federation", "FederatedAlgorithm", "check_message", "lower_indices",
           "pack_lower", "unpack_lower"]


@dataclass(frozen=True, eq=False)
class ClientData:
    """The rows held by one client; they never leave it.

    Parameters
    ----------
    X : ndarray of shape (n_samples, ...)
        The client's covariates.
    y : ndarray of shape (n_samples, ...) or None
        The client's targets.
    sample_weight : ndarray of shape (n_samples,) or None
        Optional per-row weights.
    label : object
        The client's label as given in ``groups``.
    index : int
        The client's position in the sorted labels (``clients_``).
    """

    X: np.ndarray
    y: np.ndarray | None
    sample_weight: np.ndarray | None = None
    label: object = 0
    index: int = 0

    @property
    def n_samples(self):
        """Number of rows held by this client."""
        return self.X.shape[0]


@dataclass(frozen=True, eq=False)
class Federation:
    """A set of clients, each holding only its own rows.

    Build one with :meth:`from_arrays`. ``clients[k]`` holds the rows whose
    label is ``labels[k]``; labels are sorted like ``classes_`` in
    scikit-learn.

    Parameters
    ----------
    clients : tuple of ClientData
        One entry per client, in the order of ``labels``.
    labels : ndarray of shape (n_clients,)
        Sorted unique client labels.
    row_index : tuple of ndarray
        For client ``k``, the positions of its rows in the pooled arrays; used
        only by the caller to scatter per-row results back, never sent.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated import Federation
    >>> fed = Federation.from_arrays(np.eye(4), np.arange(4.0), ["a", "b", "a", "b"])
    >>> fed.labels.tolist(), [c.n_samples for c in fed.clients]
    (['a', 'b'], [2, 2])
    """

    clients: tuple
    labels: np.ndarray
    row_index: tuple = field(default=())

    @classmethod
    def from_arrays(cls, X, y=None, groups=None, sample_weight=None, min_samples=1):
        """Split pooled arrays into one client per distinct label of ``groups``.

        Parameters
        ----------
        X : ndarray of shape (n_samples, ...)
            Validated covariates.
        y : ndarray of shape (n_samples, ...) or None
            Validated targets.
        groups : array-like of shape (n_samples,) or None
            Client labels; ``None`` makes a single client.
        sample_weight : ndarray of shape (n_samples,) or None
            Optional per-row weights, split like ``X``.
        min_samples : int, default=1
            Fewest rows a client may hold; a smaller client is an error.

        Returns
        -------
        federation : Federation
        """
        labels, client_index = check_groups(groups, X.shape[0])
        order = np.argsort(client_index, kind="stable")
        bounds = np.searchsorted(client_index[order], np.arange(len(labels) + 1))
        clients, rows = [], []
        for k, label in enumerate(labels.tolist()):  # plain Python labels
            idx = order[bounds[k] : bounds[k + 1]]
            if idx.size < min_samples:
                raise ValueError(
                    f"client {label!r} has {idx.size} row(s) (n_samples={idx.size}) but "
                    f"this estimator needs at least {min_samples} per client (groups)."
                )
            # rows already grouped by client are taken as (read-only) views, not copies
            take = slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] + 1 == idx.size else idx
            clients.append(
                ClientData(
                    X=_rows(X, take),
                    y=_rows(y, take),
                    sample_weight=_rows(sample_weight, take),
                    label=label,
                    index=k,
                )
            )
            rows.append(idx)
        return cls(clients=tuple(clients), labels=labels, row_index=tuple(rows))

    @property
    def n_clients(self):
        """Number of clients."""
        return len(self.clients)

    @property
    def n_samples(self):
        """Rows per client, as an int array."""
        return np.array([c.n_samples for c in self.clients], dtype=np.int64)


def _rows(a, take):
    if a is None:
        return None
    part = a[take]
    if isinstance(take, slice):
        part.flags.writeable = False  # a step must not write into the caller's arrays
    return part


class FederatedAlgorithm:
    """Interface of a federated training algorithm: a client and a server step.

    Subclasses hold hyperparameters only (plain Python values and arrays), so
    that the same object can be rebuilt on every node of a distributed run.
    All state lives in the values the methods pass around:

    * ``client_init(data, rng) -> client_state``: local set-up; nothing is sent.
    * ``server_init(rng) -> (server_state, broadcast)``: the first broadcast.
    * ``client_step(data, state, broadcast, rng) -> (state, message)``: sees
      only this client's rows, its own state and the broadcast.
    * ``server_step(state, messages, rng) -> (state, broadcast)``: sees only
      the messages of the clients that answered, keyed by client index.
    * ``converged(server_state) -> bool``: optional early stop.
    * ``asks_every_client(server_state) -> bool``: optional; true for a round
      that needs every client's reply (a set-up statistic, a vote, a
      release), which then asks every client even when the engine samples a
      fraction of them (``client_fraction < 1``).
    * ``client_finalize(data, state, broadcast, rng) -> state``: optional last
      local step on the final broadcast, with no reply (e.g. fitting a
      personalized part given the final shared model). The engine calls it
      on every client when ``finalize_clients`` is true; the final broadcast
      is recorded in the ledger as round ``n_rounds``.
    * ``prepare_client(data) -> ClientData``: optional site-local,
      deterministic rewrite of a client's rows before any step (e.g. encoding
      labels against the set-up's classes, appending an intercept column).
      It runs where the rows are, once per client in-process and on every
      message on a distributed engine; nothing is sent.

    ``broadcast`` and ``message`` are :data:`Message` mappings: names to
    numeric numpy arrays. Client state may be any picklable object; it stays
    with the client. Steps must not mutate their inputs: return new state.
    """

    #: Fewest rows a client needs for this algorithm.
    min_samples_per_client = 1

    #: Whether the final broadcast goes to every client's ``client_finalize``.
    finalize_clients = False

    #: Whether ``client_step`` may draw from its ``rng``. An algorithm whose client
    #: step never draws may say so (False): the in-process engine then passes
    #: ``rng=None`` instead of building the client's stream of the round (a seed
    #: sequence and a generator, about 20 us per client and round). The streams
    #: are keyed by client and round (:func:`~skfed.federated.round_rng`), so no
    #: other draw changes.
    client_step_draws = True

    #: BLAS threads of every step wherever it runs (in process, on a Flower
    #: coordinator or site); ``None`` leaves the BLAS libraries as they are. A
    #: threaded LAPACK routine may round differently with another thread count
    #: (OpenBLAS's ``dpotri`` does, even on a 25 x 25 matrix), so an algorithm whose
    #: steps must give the same bits on every machine (a Flower run equal to the
    #: in-process fit) fixes it; ``1`` also suits many small BLAS calls.
    blas_threads = None

    def client_init(self, data, rng):
        """Return the initial local state of one client (default: ``None``)."""
        return None

    def server_init(self, rng):
        """Return ``(server_state, first_broadcast)`` (default: empty)."""
        return None, {}

    def client_step(self, data, state, broadcast, rng):
        """Run one local update; return ``(new_state, message)``."""
        raise NotImplementedError

    def server_step(self, state, messages, rng):
        """Aggregate the messages; return ``(new_state, next_broadcast)``."""
        raise NotImplementedError

    def converged(self, server_state):
        """Return True to stop before the round limit (default: never)."""
        return False

    def asks_every_client(self, server_state):
        """Whether the next round asks every client, sampled or not (default: no)."""
        return False

    def client_finalize(self, data, state, broadcast, rng):
        """Last local step on the final broadcast; return the new state."""
        return state

    def prepare_client(self, data):
        """Site-local view of a client's rows used by every step (default: as is)."""
        return data


def check_message(message, *, sender="client", allow_text=False):
    """Validate a message and return it as a read-only mapping of arrays.

    A message is a flat mapping from ``str`` names to numeric numpy arrays
    (booleans, integers, floats or complex). Python scalars are converted to
    0-d arrays. Object, string and structured arrays are refused, so that
    nothing but named numbers can cross between a client and the server.

    Parameters
    ----------
    message : mapping of str to array-like
        The message returned by a step.
    sender : str
        Who produced it, for error messages.
    allow_text : bool, default=False
        Also accept fixed-width unicode arrays (dtype ``U``). Only the set-up
        exchange uses it, for class labels given as strings.

    Returns
    -------
    message : mappingproxy of str to ndarray
        Read-only C-ordered arrays owning their memory: copies, except for
        arrays that were already so (such as this function returns), which are
        kept as they are: the sender made them read-only, so they are taken as
        immutable (a step must not write to them through an older view).
    """
    if not hasattr(message, "items"):
        raise TypeError(
            f"a {sender} message must be a mapping of names to numpy arrays, got "
            f"{type(message).__name__}."
        )
    out = {}
    for name, value in message.items():
        if not isinstance(name, str):
            raise TypeError(f"{sender} message keys must be str, got {name!r}.")
        if type(value) is float:  # the commonest entry: a new 0-d float64 array
            arr = np.array(value)
            arr.setflags(write=False)
            out[name] = arr
            continue
        arr = np.asarray(value)
        if arr.dtype.kind not in ("biufcU" if allow_text else "biufc"):
            raise TypeError(
                f"{sender} message entry {name!r} has dtype {arr.dtype}; only "
                "numeric arrays may cross between clients and server."
            )
        if arr is not value and isinstance(value, (np.generic, numbers.Number)):
            arr.setflags(write=False)  # a scalar's array is new: nobody else holds it
        elif arr.flags.writeable or arr.base is not None or not arr.flags.c_contiguous:
            # a private read-only copy: later mutation by a step cannot change
            # what was recorded as sent. In C order, as a distributed engine
            # delivers it: a product with an F-ordered array rounds differently
            arr = np.array(arr, copy=True, order="C")
            arr.setflags(write=False)
        out[name] = arr
    return MappingProxyType(out)


@functools.lru_cache(maxsize=64)
def lower_indices(size):
    """``np.tril_indices(size)``, read-only and kept: a fit packs matrices of a few sizes
    tens of thousands of times, and building the indices costs more than the packing."""
    rows, cols = np.tril_indices(size)
    rows.flags.writeable = cols.flags.writeable = False
    return rows, cols


def pack_lower(A):
    """The lower triangle of the square matrix ``A[..., :, :]``, row by row.

    A symmetric matrix crosses as this half of its entries (``unpack_lower``
    mirrors it back exactly).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated._protocol import pack_lower, unpack_lower
    >>> A = np.array([[2.0, 1.0], [1.0, 3.0]])
    >>> pack_lower(A)
    array([2., 1., 3.])
    >>> np.array_equal(unpack_lower(pack_lower(A), 2), A)
    True
    """
    A = np.asarray(A)
    return A[(Ellipsis,) + lower_indices(A.shape[-1])]


def unpack_lower(v, size):
    """The symmetric matrices whose lower triangles (row by row) are ``v[..., :]``."""
    v = np.asarray(v, dtype=float)
    rows, cols = lower_indices(size)
    out = np.zeros(v.shape[:-1] + (size, size))
    out[..., rows, cols] = v
    out[..., cols, rows] = v
    return out
