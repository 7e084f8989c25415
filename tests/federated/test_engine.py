"""The in-process engine: ledger bytes, sampling, failures, determinism, privacy of rows."""

import numpy as np
import pytest

from skfed.federated import (
    ClientDropout,
    FederatedAlgorithm,
    Federation,
    Ledger,
    check_message,
    run_federation,
)


class GradientMean(FederatedAlgorithm):
    """Federated gradient descent on least squares: sends gradients, not rows."""

    def __init__(self, n_features, lr=0.1, fail=(), noise=0.0):
        self.n_features = n_features
        self.lr = lr
        self.fail = set(fail)
        self.noise = noise

    def client_init(self, data, rng):
        return {"n_steps": 0}

    def server_init(self, rng):
        w = np.zeros(self.n_features)
        return w, {"coef": w}

    def client_step(self, data, state, broadcast, rng):
        if data.label in self.fail:
            raise ClientDropout(f"client {data.label} is offline")
        resid = data.X @ broadcast["coef"] - data.y
        grad = data.X.T @ resid / data.n_samples
        grad = grad + self.noise * rng.standard_normal(grad.shape)
        return {"n_steps": state["n_steps"] + 1}, {"grad": grad, "n": np.int64(data.n_samples)}

    def server_step(self, state, messages, rng):
        n = sum(int(m["n"]) for m in messages.values())
        grad = sum(m["grad"] * int(m["n"]) for m in messages.values()) / n
        w = state - self.lr * grad
        return w, {"coef": w}


@pytest.fixture
def federation():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.01 * rng.normal(size=90)
    groups = np.repeat(["a", "b", "c"], 30)
    return Federation.from_arrays(X, y, groups), X, y


def test_federation_splits_rows_by_label(federation):
    fed, X, y = federation
    assert fed.labels.tolist() == ["a", "b", "c"]
    assert fed.n_samples.tolist() == [30, 30, 30]
    for client, rows in zip(fed.clients, fed.row_index):
        np.testing.assert_array_equal(client.X, X[rows])
        np.testing.assert_array_equal(client.y, y[rows])


def test_ledger_counts_bytes_of_every_message(federation):
    fed, _, _ = federation
    result = run_federation(GradientMean(3), fed, n_rounds=4, random_state=0)
    ledger = result.ledger
    # down: coef (3 float64) to 3 clients; up: grad (3 float64) + n (int64)
    assert ledger.bytes_down_per_round.tolist() == [3 * 24] * 4
    assert ledger.bytes_up_per_round.tolist() == [3 * 32] * 4
    assert ledger.bytes_up == 4 * 96 and ledger.bytes_down == 4 * 72
    assert ledger.total_bytes == ledger.bytes_up + ledger.bytes_down
    assert ledger.n_messages == 4 * 6
    up = [r for r in ledger.records if r.direction == "up"]
    assert up[0].names == ("grad", "n") and up[0].shapes == ((3,), ())
    assert ledger.summary()["n_rounds"] == 4


def test_training_converges(federation):
    fed, _, _ = federation
    result = run_federation(GradientMean(3, lr=0.5), fed, n_rounds=200, random_state=0)
    np.testing.assert_allclose(result.server_state, [1.0, -2.0, 0.5], atol=0.02)
    assert [s["n_steps"] for s in result.client_states] == [200, 200, 200]


def test_client_sampling(federation):
    fed, _, _ = federation
    result = run_federation(
        GradientMean(3), fed, n_rounds=30, client_fraction=0.5, random_state=1
    )
    # ceil(0.5 * 3) = 2 clients asked per round
    assert result.participation.shape == (30, 3)
    assert np.all(result.participation.sum(axis=1) == 2)
    assert np.all(result.participation.any(axis=0))  # everybody is sampled sometime
    assert all(len([r for r in result.ledger.records if r.round == t and r.direction == "up"]) == 2
               for t in range(30))
    again = run_federation(
        GradientMean(3), fed, n_rounds=30, client_fraction=0.5, random_state=1
    )
    np.testing.assert_array_equal(result.participation, again.participation)


def test_skip_policy_aggregates_over_the_rest(federation):
    fed, _, _ = federation
    result = run_federation(
        GradientMean(3, fail={"b"}), fed, n_rounds=3, on_client_error="skip", random_state=0
    )
    assert result.participation[:, 1].sum() == 0
    assert result.participation[:, [0, 2]].all()
    assert [(f[0], f[1]) for f in result.ledger.failures] == [(0, "b"), (1, "b"), (2, "b")]
    assert "offline" in result.ledger.failures[0][2]
    assert result.client_states[1] == {"n_steps": 0}  # failed client keeps its state
    assert not [r for r in result.ledger.records if r.client == "b" and r.direction == "up"]


def test_raise_policy_names_client_and_round(federation):
    fed, _, _ = federation
    with pytest.raises(ClientDropout, match="offline") as info:
        run_federation(GradientMean(3, fail={"c"}), fed, n_rounds=3, random_state=0)
    assert "client 'c' in round 0" in " ".join(getattr(info.value, "__notes__", []))


def test_no_client_answering_is_an_error(federation):
    fed, _, _ = federation
    with pytest.raises(RuntimeError, match="no client answered in round 0"):
        run_federation(
            GradientMean(3, fail={"a", "b", "c"}), fed, n_rounds=2, on_client_error="skip"
        )


@pytest.mark.parametrize("n_jobs", [1, 2, 3])
def test_results_do_not_depend_on_n_jobs(federation, n_jobs):
    fed, _, _ = federation
    kwargs = dict(n_rounds=5, client_fraction=0.7, random_state=3)
    ref = run_federation(GradientMean(3, noise=0.1), fed, n_jobs=1, **kwargs)
    res = run_federation(GradientMean(3, noise=0.1), fed, n_jobs=n_jobs, **kwargs)
    np.testing.assert_array_equal(res.server_state, ref.server_state)
    np.testing.assert_array_equal(res.participation, ref.participation)


def test_random_state_controls_noise(federation):
    fed, _, _ = federation
    a = run_federation(GradientMean(3, noise=0.1), fed, n_rounds=3, random_state=0)
    b = run_federation(GradientMean(3, noise=0.1), fed, n_rounds=3, random_state=0)
    c = run_federation(GradientMean(3, noise=0.1), fed, n_rounds=3, random_state=1)
    np.testing.assert_array_equal(a.server_state, b.server_state)
    assert not np.array_equal(a.server_state, c.server_state)


def test_raw_rows_never_cross(federation):
    """The server step sees only messages, and no message holds a client's rows."""
    fed, X, y = federation
    seen_by_server = []

    class Spy(GradientMean):
        def server_step(self, state, messages, rng):
            seen_by_server.append(messages)
            return super().server_step(state, messages, rng)

    ledger = Ledger(keep_payloads=True)
    run_federation(Spy(3), fed, n_rounds=3, random_state=0, ledger=ledger)
    for messages in seen_by_server:
        for message in messages.values():
            assert set(message) == {"grad", "n"}
    assert len(ledger.payloads) == ledger.n_messages
    for payload in ledger.payloads:
        for arr in payload.values():
            assert not _holds_rows(arr, X, y)


def _holds_rows(arr, X, y):
    """True if ``arr`` contains any row of ``X`` or the values of ``y`` in a run."""
    flat = np.ravel(arr).astype(float)
    for row in X:
        if flat.size >= row.size and _contains_run(flat, row):
            return True
    return flat.size >= 3 and any(_contains_run(flat, y[i : i + 3]) for i in range(len(y) - 2))


def _contains_run(flat, run):
    windows = np.lib.stride_tricks.sliding_window_view(flat, run.size)
    return bool(np.any(np.all(windows == run, axis=1)))


def test_leaking_algorithm_would_be_caught(federation):
    """The audit above is not vacuous: an algorithm that uploads X is detected."""
    fed, X, y = federation

    class Leaky(GradientMean):
        def client_step(self, data, state, broadcast, rng):
            state, msg = super().client_step(data, state, broadcast, rng)
            return state, {**msg, "rows": data.X}

    ledger = Ledger(keep_payloads=True)
    run_federation(Leaky(3), fed, n_rounds=1, random_state=0, ledger=ledger)
    assert any(_holds_rows(a, X, y) for p in ledger.payloads for a in p.values())


def test_messages_must_be_numeric_arrays():
    with pytest.raises(TypeError, match="only numeric arrays"):
        check_message({"x": np.array(["a"])})
    with pytest.raises(TypeError, match="mapping"):
        check_message([np.zeros(2)])
    with pytest.raises(TypeError, match="keys must be str"):
        check_message({0: np.zeros(2)})
    msg = check_message({"x": [1.0, 2.0], "n": 3})
    assert msg["x"].dtype == float and not msg["x"].flags.writeable


def test_check_message_copies_only_what_a_step_could_still_write():
    frozen = np.arange(3.0)
    frozen.setflags(write=False)  # read-only and owning its memory: kept as is
    writable = np.arange(3.0)
    view = frozen[1:]  # read-only, but its base is someone's array
    msg = check_message({"frozen": frozen, "writable": writable, "view": view,
                         "n": np.int64(4), "x": 2.5})
    assert msg["frozen"] is frozen
    assert msg["writable"] is not writable and not np.shares_memory(msg["writable"], writable)
    assert msg["view"].base is None and not np.shares_memory(msg["view"], frozen)
    writable[0] = 99.0
    assert msg["writable"][0] == 0.0
    for name in msg:
        assert not msg[name].flags.writeable and msg[name].base is None
    assert int(msg["n"]) == 4 and msg["n"].dtype == np.int64 and float(msg["x"]) == 2.5
    again = check_message(msg)  # the engine's own output is not copied again
    assert all(again[name] is msg[name] for name in msg)


def test_check_message_gives_c_ordered_arrays():
    # as a distributed engine delivers them: a step's products then round the same
    # on every engine (an F-ordered operand takes another BLAS kernel)
    fortran = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    frozen = fortran.copy(order="F")
    frozen.setflags(write=False)
    msg = check_message({"f": fortran, "frozen": frozen})
    for name in msg:
        assert msg[name].flags.c_contiguous and not msg[name].flags.writeable
        np.testing.assert_array_equal(msg[name], fortran)


class BlasThreads(FederatedAlgorithm):
    """Records the BLAS threads each step sees."""

    client_step_draws = False

    def __init__(self, threads):
        self.blas_threads = threads
        self.seen = []

    def _record(self):
        from threadpoolctl import threadpool_info

        self.seen.append({i["num_threads"] for i in threadpool_info()
                          if i["user_api"] == "blas"})

    def client_init(self, data, rng):
        self._record()

    def server_init(self, rng):
        self._record()
        return None, {}

    def client_step(self, data, state, broadcast, rng):
        self._record()
        return state, {"n": data.n_samples}

    def server_step(self, state, messages, rng):
        self._record()
        return state, {}


def test_steps_run_with_the_algorithms_blas_threads(federation):
    import importlib

    importlib.import_module("scipy.linalg")  # its BLAS loaded before the limit's scan, as skfed's
    from threadpoolctl import threadpool_limits

    from skfed.federated import client_round, client_start

    federation = federation[0]
    with threadpool_limits(limits=2, user_api="blas"):  # as on a machine with 2 cores
        algorithm = BlasThreads(1)
        run_federation(algorithm, federation, n_rounds=2, n_jobs=2, random_state=0)
        assert algorithm.seen and all(seen == {1} for seen in algorithm.seen)
        # a distributed site calls the steps itself
        site = BlasThreads(1)
        data = federation.clients[0]
        state = client_start(site, data, 0)
        client_round(site, data, state, {}, 0, 0)
        assert site.seen == [{1}, {1}]
        free = BlasThreads(None)  # None leaves BLAS as it is
        run_federation(free, federation, n_rounds=1, random_state=0)
        assert all(seen == {2} for seen in free.seen)


def _blas_threads_now():
    from threadpoolctl import threadpool_info

    return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


def test_blas_limit_holds_until_the_last_concurrent_user_leaves():
    """Two threads inside ``blas_threads(1)``: the first to leave (not the one that set the
    limit) keeps it for the other; the last restores the limit from before."""
    import threading

    from threadpoolctl import threadpool_limits

    from skfed.federated._engine import blas_threads

    with threadpool_limits(limits=2, user_api="blas"):  # as on a machine with 2 cores
        a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
        seen = {}

        def first():
            with blas_threads(1):
                a_in.set()
                b_in.wait(10)
            a_out.set()

        def second():
            a_in.wait(10)
            with blas_threads(1):
                b_in.set()
                a_out.wait(10)
                seen["after the first left"] = _blas_threads_now()
            seen["after both left"] = _blas_threads_now()

        threads = [threading.Thread(target=f) for f in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert seen == {"after the first left": {1}, "after both left": {2}}
        # the thread that set the outer limit can still change it
        with threadpool_limits(limits=1, user_api="blas"):
            assert _blas_threads_now() == {1}
        assert _blas_threads_now() == {2}


def test_threaded_cross_validation_equals_serial_bit_for_bit():
    """Folds fitted at once on threads (joblib's threading backend, their client steps on
    threads too) give the serial fits: the BLAS limit is the process's while any runs."""
    import sklearn
    from joblib import parallel_backend
    from sklearn.model_selection import GroupKFold, cross_validate
    from threadpoolctl import threadpool_limits

    from skfed import PFedHGPRegressor
    from skfed.datasets import make_federated_regression

    X, y, g = make_federated_regression(n_clients=6, n_samples=40, n_features=3,
                                        random_state=0)

    def predictions(n_jobs):
        with parallel_backend("threading", n_jobs=n_jobs):
            fits = cross_validate(PFedHGPRegressor(random_state=0, n_restarts=0), X, y,
                                  cv=GroupKFold(4), params={"groups": g}, n_jobs=n_jobs,
                                  return_estimator=True)["estimator"]
        return np.concatenate([f.predict(X, groups=g) for f in fits])

    with sklearn.config_context(enable_metadata_routing=True), \
            threadpool_limits(limits=2, user_api="blas"):  # as on a machine with 2 cores
        serial = predictions(1)
        np.testing.assert_array_equal(predictions(4), serial)


def test_predictions_do_not_depend_on_the_blas_threads_around_them():
    """A prediction runs on one BLAS thread, as the fit: a fold predicted while other fits
    hold the process's limit (threaded cross-validation) equals a serial prediction."""
    from threadpoolctl import threadpool_limits

    from skfed import PFedHGPRegressor
    from skfed.datasets import make_federated_regression

    X, y, g = make_federated_regression(n_clients=6, n_samples=40, n_features=3,
                                        random_state=0)
    model = PFedHGPRegressor(random_state=0, n_restarts=0).fit(X, y, groups=g)
    # enough rows that threaded BLAS splits the products (they differed by up to 1e-9)
    Xt, gt = np.tile(X, (12, 1)), np.tile(g, 12)
    out = []
    for n in (2, 1):
        with threadpool_limits(limits=n, user_api="blas"):
            out.append(model.predict(Xt, groups=gt, return_std=True)
                       + model.predict(Xt, return_std=True)
                       + (model.sample_y(Xt[:400], groups=gt[:400], random_state=0),))
    for a, b in zip(*out):
        np.testing.assert_array_equal(a, b)


def test_round_rng_is_default_rng_of_the_seed_sequence():
    from skfed.federated import round_rng

    for key in [(), (1,), (1, 3, 7)]:
        ours = round_rng(12345, *key)
        ref = np.random.default_rng(np.random.SeedSequence(12345, spawn_key=key))
        assert ours.bit_generator.state == ref.bit_generator.state
        assert np.array_equal(ours.standard_normal(50), ref.standard_normal(50))
        a, b = ours.spawn(1)[0], ref.spawn(1)[0]
        assert np.array_equal(a.integers(0, 2**62, 8), b.integers(0, 2**62, 8))


def test_record_broadcast_equals_one_record_per_client():
    msg = check_message({"coef": np.zeros((2, 3)), "n": np.int64(1)})
    one, many = Ledger(keep_payloads=True), Ledger(keep_payloads=True)
    for client in ["a", "b", "c"]:
        one.record(4, client, "down", msg)
    many.record_broadcast(4, ["a", "b", "c"], msg)
    assert one.records == many.records and one.summary() == many.summary()
    # one kept copy of a broadcast, shared by its records
    assert all(p is many.payloads[0] for p in many.payloads) and len(many.payloads) == 3
    assert all(np.array_equal(many.payloads[0][k], msg[k]) for k in msg)


def test_bad_engine_arguments(federation):
    fed, _, _ = federation
    with pytest.raises(ValueError, match="client_fraction"):
        run_federation(GradientMean(3), fed, n_rounds=1, client_fraction=0)
    with pytest.raises(ValueError, match="on_client_error"):
        run_federation(GradientMean(3), fed, n_rounds=1, on_client_error="ignore")
    with pytest.raises(ValueError, match="n_rounds"):
        run_federation(GradientMean(3), fed, n_rounds=0)
    with pytest.raises(TypeError, match="FederatedAlgorithm"):
        run_federation(object(), fed, n_rounds=1)


def test_client_with_too_few_rows():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="client 'b' has 1 row"):
        Federation.from_arrays(X, np.zeros(5), ["a", "a", "a", "a", "b"], min_samples=2)

    class NeedsThree(GradientMean):
        min_samples_per_client = 3

    fed = Federation.from_arrays(X, np.zeros(5), ["a", "a", "a", "b", "b"])
    with pytest.raises(ValueError, match=r"clients \['b'\] have fewer than 3 rows"):
        run_federation(NeedsThree(2), fed, n_rounds=1)


def test_early_stop(federation):
    fed, _, _ = federation

    class Stops(GradientMean):
        def converged(self, server_state):
            return True

    result = run_federation(Stops(3), fed, n_rounds=10, random_state=0)
    assert result.n_rounds == 1 and result.ledger.n_rounds == 1


def test_client_finalize_receives_final_broadcast(federation):
    fed, _, _ = federation

    class Finalizing(GradientMean):
        finalize_clients = True

        def client_finalize(self, data, state, broadcast, rng):
            return {**state, "final_coef": broadcast["coef"]}

    result = run_federation(Finalizing(3), fed, n_rounds=4, client_fraction=0.5, random_state=0)
    for state in result.client_states:  # every client, sampled in the last round or not
        np.testing.assert_array_equal(state["final_coef"], result.server_state)
    ledger = result.ledger
    assert result.n_rounds == 4 and ledger.n_rounds == 5
    final = [r for r in ledger.records if r.round == 4]
    assert len(final) == 3 and all(r.direction == "down" for r in final)
    assert ledger.bytes_up_per_round[4] == 0


def test_client_finalize_failure_follows_policy(federation):
    fed, _, _ = federation

    class BadFinal(GradientMean):
        finalize_clients = True

        def client_finalize(self, data, state, broadcast, rng):
            if data.label == "a":
                raise ClientDropout("gone")
            return state

    result = run_federation(BadFinal(3), fed, n_rounds=2, on_client_error="skip")
    assert result.ledger.failures == [(2, "a", "ClientDropout: gone")]
    with pytest.raises(ClientDropout):
        run_federation(BadFinal(3), fed, n_rounds=2)


def test_grouped_rows_are_views_not_copies():
    X = np.arange(12.0).reshape(6, 2)
    fed = Federation.from_arrays(X, np.zeros(6), [0, 0, 0, 1, 1, 1])
    assert all(np.shares_memory(c.X, X) and not c.X.flags.writeable for c in fed.clients)
    shuffled = Federation.from_arrays(X, np.zeros(6), [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(shuffled.clients[1].X, X[[1, 3, 5]])


class NoDrawMean(GradientMean):
    """A client step that never draws (noise 0), and says so."""

    client_step_draws = False

    def client_step(self, data, state, broadcast, rng):
        assert rng is None  # the engine built no stream for it
        return super().client_step(data, state, broadcast, np.random.default_rng(0))


def test_a_client_step_that_never_draws_gets_no_stream(federation):
    fed, X, y = federation
    kw = dict(n_rounds=5, random_state=3)
    ref = run_federation(GradientMean(3), fed, **kw)
    out = run_federation(NoDrawMean(3), fed, **kw)
    np.testing.assert_array_equal(out.server_state, ref.server_state)
    assert out.ledger.records == ref.ledger.records
    assert GradientMean(3).client_step_draws  # the default: the engine builds every stream


def test_check_message_float_entries_are_read_only_float64_arrays():
    msg = check_message({"x": 2.5, "y": float("nan"), "n": 3, "f": np.float32(1.5)})
    assert msg["x"].dtype == np.float64 and msg["x"].shape == () and float(msg["x"]) == 2.5
    assert np.isnan(msg["y"]) and msg["n"].dtype.kind == "i" and msg["f"].dtype == np.float32
    assert all(not a.flags.writeable and a.base is None for a in msg.values())


def test_pfedhgp_scalar_steps_never_draw_but_a_subclass_may():
    from skfed.gaussian_process._ilmm_steps import _IlmmSteps
    from skfed.gaussian_process._steps import _PFedHGPSteps

    assert _PFedHGPSteps.__new__(_PFedHGPSteps).client_step_draws is False
    assert _IlmmSteps.__new__(_IlmmSteps).client_step_draws is True


def test_each_phase_runs_with_its_own_blas_threads(federation):
    from threadpoolctl import threadpool_limits

    from skfed.federated import PhasedAlgorithm

    phases = [BlasThreads(1), BlasThreads(None)]

    class TwoPhases(PhasedAlgorithm):
        def phase_spec(self, phase, previous):
            return {}

        def build_phase(self, phase, spec, previous=None):
            return phases[phase]

    with threadpool_limits(limits=2, user_api="blas"):
        run_federation(TwoPhases([1, 1]), federation[0], n_rounds=2, random_state=0)
    assert phases[0].seen and all(seen == {1} for seen in phases[0].seen)
    assert phases[1].seen and all(seen == {2} for seen in phases[1].seen)
