"""A sequence of federated algorithms (phases) run as one algorithm, in one run.

Multi-stage methods (initialize, train, personalize) become one
:class:`FederatedAlgorithm`, so one engine run (in-process or distributed)
covers all of them, the ledger numbers rounds continuously and the round
budget is known before training.
"""

from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from ._engine import blas_threads
from ._protocol import FederatedAlgorithm, check_message

__all__ = ["PhaseState", "PhasedAlgorithm"]

_PHASE = "phase"
_SPEC = "phase:"


class PhaseState(NamedTuple):
    """State of a :class:`PhasedAlgorithm` on the server or on one client.

    Attributes
    ----------
    phase : int
        The current phase (``-1`` on a client before its first step).
    rounds : int
        Rounds run in the current phase (on a client: its steps in it).
    states : tuple
        The state of every phase, indexed by phase: the final state of the
        phases before ``phase``, the current state of ``phase``, ``None``
        after it (and for a phase a client never took part in).
    spec : mapping or None
        On the server, the current phase's spec (see
        :meth:`PhasedAlgorithm.phase_spec`); ``None`` on a client.
    """

    phase: int
    rounds: int
    states: tuple
    spec: object = None


def _with(states, phase, value):
    return states[:phase] + (value,) + states[phase + 1:]


def _spec_key(spec):
    return tuple((name, a.dtype.str, a.shape, a.tobytes()) for name, a in sorted(spec.items()))


class PhasedAlgorithm(FederatedAlgorithm):
    """Run several federated algorithms one after the other as one algorithm.

    Phase ``p`` runs ``phase_rounds[p]`` rounds (fewer if its ``converged``
    says so; the next phase then starts in the following round). The server
    builds phase ``p + 1`` from the final server state of phase ``p``, so
    what one phase learns starts the next. Every broadcast carries the phase
    index (``"phase"``) and the phase's *spec* (entries ``"phase:<name>"``):
    the values a client needs to build the client side of the phase. A
    client builds it from the broadcast on its first step in the phase (also
    when it was not asked in the phase's first round), runs the phase's
    ``client_init`` there, and keeps every phase's state in its own client
    state (a :class:`PhaseState`). Client replies go unchanged to the current
    phase's ``server_step``.

    A last phase of 0 rounds is local-only: its first broadcast is the
    engine's final broadcast and its ``client_finalize`` runs on every
    client (``finalize_clients`` is then true). Rows are prepared once by
    this object's ``prepare_client``; the phases' own are not called. Each
    phase's steps run with its own ``blas_threads`` (unless this object
    declares some, which then hold for every phase).

    Subclasses hold hyperparameters only and implement:

    * ``phase_spec(phase, previous) -> mapping``: on the server, the spec of
      ``phase`` from the final server state ``previous`` of the phase before
      (``None`` for phase 0); keep it small, it is sent every round.
    * ``build_phase(phase, spec, previous=None) -> FederatedAlgorithm``: the
      algorithm of ``phase``. The server passes ``previous`` (for values only
      the server side needs, e.g. a starting model); a client passes
      ``None``, so the client side may depend on ``spec`` only.

    Parameters
    ----------
    phase_rounds : sequence of int
        Round budget of each phase; only the last may be 0.

    Attributes
    ----------
    n_rounds : int
        Total round budget (``sum(phase_rounds)``), the engine's ``n_rounds``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.federated import FederatedAlgorithm, Federation, run_federation
    >>> from skfed.federated import PhasedAlgorithm
    >>> class Add(FederatedAlgorithm):  # every round, add the mean of the clients' y
    ...     def __init__(self, start):
    ...         self.start = start
    ...     def server_init(self, rng):
    ...         return self.start, {}
    ...     def client_step(self, data, state, broadcast, rng):
    ...         return state, {"y": data.y.mean()}
    ...     def server_step(self, state, messages, rng):
    ...         return state + np.mean([m["y"] for m in messages.values()]), {}
    >>> class Twice(PhasedAlgorithm):
    ...     def phase_spec(self, phase, previous):
    ...         return {}
    ...     def build_phase(self, phase, spec, previous=None):
    ...         return Add(0.0 if previous is None else previous)
    >>> fed = Federation.from_arrays(np.zeros((4, 1)), np.arange(4.0), [0, 0, 1, 1])
    >>> result = run_federation(Twice([2, 1]), fed, n_rounds=3, random_state=0)
    >>> [float(s) for s in result.server_state.states], result.ledger.n_rounds
    ([3.0, 4.5], 3)
    """

    def __init__(self, phase_rounds):
        rounds = tuple(int(r) for r in phase_rounds)
        if not rounds or any(r < 0 for r in rounds) or 0 in rounds[:-1] or sum(rounds) < 1:
            raise ValueError(
                "phase_rounds must be non-negative round budgets, only the last may be 0 "
                f"(a local-only phase) and at least one round in all; got {phase_rounds!r}."
            )
        self.phase_rounds = rounds
        self.finalize_clients = rounds[-1] == 0

    @property
    def n_rounds(self):
        """Total round budget of all phases."""
        return sum(self.phase_rounds)

    @property
    def n_phases(self):
        """Number of phases."""
        return len(self.phase_rounds)

    def phase_spec(self, phase, previous):
        """Spec of ``phase`` (a mapping of names to arrays) from the previous final state."""
        raise NotImplementedError

    def build_phase(self, phase, spec, previous=None):
        """The algorithm of ``phase``; ``previous`` is ``None`` on a client."""
        raise NotImplementedError

    # the client side of a phase is cached per spec: in-process, the clients of
    # a round then share one phase object (and whatever it caches per broadcast),
    # and the phases of a run one object each
    _client_cache = None

    def __getstate__(self):
        # a cache is not a hyperparameter: a rebuilt node starts without it
        state = dict(self.__dict__)
        state.pop("_client_cache", None)
        return state

    # -- server side ----------------------------------------------------------

    def _server_phase(self, state):
        previous = state.states[state.phase - 1] if state.phase else None
        return self.build_phase(state.phase, state.spec, previous)

    def _wrap(self, phase, spec, broadcast):
        clash = [name for name in broadcast if name == _PHASE or name.startswith(_SPEC)]
        if clash:
            raise ValueError(f"phase {phase} broadcasts reserved names {clash}.")
        return {_PHASE: np.int64(phase), **{_SPEC + k: v for k, v in spec.items()},
                **broadcast}

    def _start(self, phase, states, rng):
        previous = states[phase - 1] if phase else None
        spec = check_message(self.phase_spec(phase, previous), sender="server")
        algorithm = self.build_phase(phase, spec, previous)
        with blas_threads(algorithm.blas_threads):
            inner, broadcast = algorithm.server_init(rng)
        return (PhaseState(phase, 0, _with(states, phase, inner), spec),
                self._wrap(phase, spec, broadcast))

    def server_init(self, rng):
        return self._start(0, (None,) * self.n_phases, rng)

    def server_step(self, state, messages, rng):
        phase = state.phase
        algorithm = self._server_phase(state)
        with blas_threads(algorithm.blas_threads):
            inner, broadcast = algorithm.server_step(state.states[phase], messages, rng)
        state = state._replace(rounds=state.rounds + 1,
                               states=_with(state.states, phase, inner))
        ended = state.rounds >= self.phase_rounds[phase] or algorithm.converged(inner)
        if ended and phase + 1 < self.n_phases:
            # the next phase's server_init draws from a stream of its own
            return self._start(phase + 1, state.states, rng.spawn(1)[0])
        return state, self._wrap(phase, state.spec, broadcast)

    def converged(self, server_state):
        """True once the last phase with rounds has ended (the engine then stops)."""
        phase = server_state.phase
        if self.phase_rounds[phase] == 0:
            return True
        if phase + 1 < self.n_phases:
            return False
        return (server_state.rounds >= self.phase_rounds[phase]
                or self._server_phase(server_state).converged(server_state.states[phase]))

    def asks_every_client(self, server_state):
        """The current phase's answer for its next round."""
        phase = server_state.phase
        if self.phase_rounds[phase] == 0:
            return False
        return self._server_phase(server_state).asks_every_client(server_state.states[phase])

    # -- client side ----------------------------------------------------------

    def _client_phase(self, broadcast):
        """``(phase, algorithm, inner broadcast)`` from a broadcast."""
        cached = self._client_cache
        shared = isinstance(broadcast, MappingProxyType)
        if shared and cached is not None and cached[0] is broadcast:
            # in-process, the clients of a round share the engine's read-only
            # broadcast (the cache holds it, so its id is not reused)
            return cached[2], cached[3], cached[4]
        phase = int(broadcast[_PHASE])
        spec, inner = {}, {}
        for name, value in broadcast.items():
            if name.startswith(_SPEC):
                spec[name[len(_SPEC):]] = value
            elif name != _PHASE:
                inner[name] = value
        key = (phase, _spec_key(spec))
        if cached is not None and cached[1] == key:
            algorithm = cached[3]
        else:
            algorithm = self.build_phase(phase, spec)
        self._client_cache = (broadcast, key, phase, algorithm, inner)  # one atomic store
        return phase, algorithm, inner

    def _enter(self, data, state, broadcast, rng):
        """Build the client side of the broadcast's phase; start it if it is new here."""
        phase, algorithm, inner = self._client_phase(broadcast)
        if phase != state.phase:
            # the phase's client_init draws from a stream of its own
            with blas_threads(algorithm.blas_threads):
                local = algorithm.client_init(data, rng.spawn(1)[0])
            state = PhaseState(phase, 0, _with(state.states, phase, local))
        return state, algorithm, inner

    def client_init(self, data, rng):
        return PhaseState(-1, 0, (None,) * self.n_phases)

    def client_step(self, data, state, broadcast, rng):
        state, algorithm, inner = self._enter(data, state, broadcast, rng)
        with blas_threads(algorithm.blas_threads):
            local, message = algorithm.client_step(data, state.states[state.phase], inner, rng)
        return (PhaseState(state.phase, state.rounds + 1,
                           _with(state.states, state.phase, local)), message)

    def client_finalize(self, data, state, broadcast, rng):
        state, algorithm, inner = self._enter(data, state, broadcast, rng)
        with blas_threads(algorithm.blas_threads):
            local = algorithm.client_finalize(data, state.states[state.phase], inner, rng)
        return state._replace(states=_with(state.states, state.phase, local))
