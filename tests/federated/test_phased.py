"""PhasedAlgorithm: several algorithms in one run, against running the phases by hand."""

import pickle

import numpy as np
import pytest

from skfed.federated import (
    FederatedAlgorithm,
    Federation,
    PhasedAlgorithm,
    PhaseState,
    round_rng,
    run_federation,
    seed_entropy,
)
from skfed.federated._engine import Stream


FAIL_ONCE = set()  # labels whose second phase-0 step fails, once


class Locate(FederatedAlgorithm):
    """Phase 0: move ``mean`` towards the clients' mean of y (noisy client replies)."""

    def __init__(self, noise, tol=0.0):
        self.noise = noise
        self.tol = tol

    def client_init(self, data, rng):
        return {"steps": 0, "draw": float(rng.standard_normal())}

    def server_init(self, rng):
        return {"mean": 0.0, "step": np.inf}, {"mean": 0.0}

    def client_step(self, data, state, broadcast, rng):
        if data.label in FAIL_ONCE and state["steps"] == 1:
            FAIL_ONCE.discard(data.label)
            raise RuntimeError(f"site {data.label} is down")
        g = float(data.y.mean() - broadcast["mean"]) + self.noise * rng.standard_normal()
        return {**state, "steps": state["steps"] + 1}, {"g": g}

    def server_step(self, state, messages, rng):
        step = 0.5 * float(np.mean([m["g"] for m in messages.values()]))
        return {"mean": state["mean"] + step, "step": step}, {"mean": state["mean"] + step}

    def converged(self, state):
        return abs(state["step"]) < self.tol


class Spread(FederatedAlgorithm):
    """Phase 1: the mean squared deviation of y from the spec's ``center``."""

    def __init__(self, center):
        self.center = center

    def client_init(self, data, rng):
        return {"steps": 0}

    def server_init(self, rng):
        return {"center": self.center, "var": []}, {}

    def client_step(self, data, state, broadcast, rng):
        msd = float(np.mean((data.y - self.center) ** 2))
        return {"steps": state["steps"] + 1}, {"msd": msd + 0.01 * rng.standard_normal()}

    def server_step(self, state, messages, rng):
        var = float(np.mean([m["msd"] for m in messages.values()]))
        return {**state, "var": state["var"] + [var]}, {}


class Standardize(FederatedAlgorithm):
    """Phase 2, local only: each client standardizes its y with the broadcast values."""

    finalize_clients = True

    def __init__(self, center=None, scale=None):
        self.center, self.scale = center, scale

    def server_init(self, rng):
        return None, {"center": self.center, "scale": self.scale}

    def client_finalize(self, data, state, broadcast, rng):
        return (data.y - broadcast["center"]) / broadcast["scale"]


class Toy(PhasedAlgorithm):
    def __init__(self, phase_rounds=(3, 2, 0), noise=0.1, tol=0.0):
        super().__init__(phase_rounds)
        self.noise = noise
        self.tol = tol

    def phase_spec(self, phase, previous):
        if phase == 1:
            return {"center": previous["mean"]}
        return {}

    def build_phase(self, phase, spec, previous=None):
        if phase == 0:
            return Locate(self.noise, self.tol)
        if phase == 1:
            return Spread(float(spec["center"]))
        if previous is None:  # the client side needs nothing but the broadcast
            return Standardize()
        return Standardize(previous["center"], np.sqrt(previous["var"][-1]))


def _federation(labels=(0, 0, 0, 1, 1, 2, 2, 2, 2)):
    y = np.arange(len(labels), dtype=float) ** 1.5
    return Federation.from_arrays(np.zeros((len(labels), 1)), y, np.array(labels))


def _by_hand(fed, seed, rounds=(3, 2)):
    """The phases run one after the other with the engine's streams, rounds continued."""
    entropy = seed_entropy(seed)
    server_rng = round_rng(entropy, Stream.SERVER_INIT)
    phases = [Locate(0.1)]
    server, broadcast = phases[0].server_init(server_rng)
    per_phase = []
    rnd = 0
    for p, n in enumerate(rounds):
        states = [None] * fed.n_clients
        for _ in range(n):
            messages = {}
            for k, c in enumerate(fed.clients):
                rng = round_rng(entropy, Stream.CLIENT_STEP, k, rnd)
                if states[k] is None:
                    states[k] = phases[p].client_init(c, rng.spawn(1)[0])
                states[k], messages[k] = phases[p].client_step(c, states[k], broadcast, rng)
            server_rng = round_rng(entropy, Stream.SERVER_STEP, rnd)
            server, broadcast = phases[p].server_step(server, messages, server_rng)
            rnd += 1
        if p == 0:
            phases.append(Spread(server["mean"]))
        else:
            phases.append(Standardize(server["center"], np.sqrt(server["var"][-1])))
        per_phase.append(states)
        server, broadcast = phases[p + 1].server_init(server_rng.spawn(1)[0])
    final = [
        phases[2].client_finalize(c, None, broadcast, round_rng(entropy, Stream.CLIENT_FINAL, k, rnd))
        for k, c in enumerate(fed.clients)
    ]
    return server, list(zip(*per_phase)), final, phases


def test_phases_run_as_by_hand_with_continuous_rounds():
    fed = _federation()
    result = run_federation(Toy(), fed, n_rounds=Toy().n_rounds, random_state=7)
    _, expected_clients, expected_final, phases = _by_hand(fed, 7)
    state = result.server_state
    assert isinstance(state, PhaseState) and state.phase == 2
    assert state.states[1]["center"] == phases[1].center
    assert state.states[1]["var"][-1] ** 0.5 == phases[2].scale
    for k, client in enumerate(result.client_states):
        assert client.phase == 2
        assert client.states[0] == expected_clients[k][0]
        assert client.states[1] == expected_clients[k][1]
        np.testing.assert_array_equal(client.states[2], expected_final[k])
    ledger = result.ledger
    assert result.n_rounds == 5 and ledger.n_rounds == 6  # + the final broadcast
    assert sorted({r.round for r in ledger.records}) == list(range(6))
    downs = [r for r in ledger.records if r.direction == "down" and r.client == 0]
    assert [r.names[0] for r in downs] == ["phase"] * 6
    assert [r.names for r in downs][3] == ("phase", "phase:center")
    assert [r.names for r in downs][5] == ("phase", "center", "scale")
    ups = {r.round: r.names for r in ledger.records if r.direction == "up" and r.client == 0}
    assert ups == {0: ("g",), 1: ("g",), 2: ("g",), 3: ("msd",), 4: ("msd",)}


def test_a_converged_phase_ends_early_and_the_run_stops_after_the_last():
    fed = _federation()
    toy = Toy(phase_rounds=(50, 2, 0), noise=0.0, tol=1e-3)
    result = run_federation(toy, fed, n_rounds=toy.n_rounds, random_state=0)
    first = result.server_state.states[0]
    assert abs(first["step"]) < 1e-3
    step, n0 = np.mean([c.y.mean() for c in fed.clients]) / 2, 1  # halves every round
    while abs(step) >= 1e-3:
        step, n0 = step / 2, n0 + 1
    assert result.n_rounds == n0 + 2 < toy.n_rounds
    assert [c.states[1]["steps"] for c in result.client_states] == [2, 2, 2]
    assert result.ledger.n_rounds == result.n_rounds + 1


def test_client_fraction_builds_a_phase_on_a_clients_first_step_in_it():
    fed = _federation(np.repeat(np.arange(6), 2))
    result = run_federation(Toy(phase_rounds=(3, 3, 0)), fed, n_rounds=6,
                            client_fraction=0.34, random_state=3)
    asked = result.participation
    assert asked.sum(axis=1).tolist() == [3] * 6
    for k, client in enumerate(result.client_states):
        for p, rows in enumerate((slice(0, 3), slice(3, 6))):
            steps = int(asked[rows, k].sum())
            inner = client.states[p]
            assert (inner is None) == (steps == 0)
            assert steps == 0 or inner["steps"] == steps
        assert client.phase == 2  # the final broadcast reaches every client
        assert client.states[2].shape == (2,)


def test_a_skipped_client_keeps_its_state_and_catches_up():
    fed = _federation(["a", "a", "boom", "boom", "c", "c"])
    FAIL_ONCE.add("boom")
    result = run_federation(Toy(), fed, n_rounds=5, on_client_error="skip", random_state=0)
    assert [(f[0], f[1]) for f in result.ledger.failures] == [(1, "boom")]
    boom = result.client_states[1]
    assert boom.states[0]["steps"] == 1 + 1  # failed in round 1, answered in rounds 0, 2
    assert boom.states[1]["steps"] == 2 and boom.phase == 2
    assert result.participation[:, 1].tolist() == [True, False, True, True, True]


def test_rebuilt_algorithm_gives_the_same_steps_and_drops_its_cache():
    fed = _federation()
    toy = Toy()
    server, broadcast = toy.server_init(np.random.default_rng(0))
    state = toy.client_init(fed.clients[0], None)
    state, _ = toy.client_step(fed.clients[0], state, broadcast, np.random.default_rng(1))
    assert toy._client_cache is not None
    copy = pickle.loads(pickle.dumps(toy))  # what a distributed node holds
    assert copy._client_cache is None and copy.phase_rounds == (3, 2, 0)
    a = toy.client_step(fed.clients[0], state, broadcast, np.random.default_rng(2))
    b = copy.client_step(fed.clients[0], state, broadcast, np.random.default_rng(2))
    assert a == b


@pytest.mark.parametrize("rounds", [(), (0,), (2, 0, 1), (-1, 2), (0, 0)])
def test_bad_phase_rounds(rounds):
    with pytest.raises(ValueError, match="phase_rounds"):
        Toy(phase_rounds=rounds)


def test_reserved_broadcast_names_are_refused():
    class Clash(Locate):
        def server_init(self, rng):
            return {}, {"phase": 1.0}

    class Bad(Toy):
        def build_phase(self, phase, spec, previous=None):
            return Clash(0.0)

    with pytest.raises(ValueError, match="reserved"):
        Bad().server_init(np.random.default_rng(0))
