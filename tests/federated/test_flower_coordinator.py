"""What the coordinator of a Flower run can and cannot do to a site (issue: privacy that holds
against the coordinator).

Real Flower messages on the in-memory grid, with spies that record or alter them in transit:
the coordinator's view of the run.
"""

import ast
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("skops")

from skfed.baselines import FedAvgRegressor  # noqa: E402
from skfed.datasets import make_federated_regression  # noqa: E402
from skfed.federated import ClientDropout  # noqa: E402
from skfed.federated.flower import (  # noqa: E402
    FlowerFederation,
    InMemoryGrid,
    _from_record,
    _to_record,
    load_fitted,
    save_fitted,
)
from skfed.linear_model import DPFedDROClassifier  # noqa: E402


def _classification_sites():
    rng = np.random.default_rng(0)
    groups = np.repeat([0, 1, 2], [20, 25, 30])
    codes = rng.integers(0, 3, groups.size)
    X = np.eye(3)[codes] + 0.3 * rng.standard_normal((groups.size, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return {k: (X[groups == k], codes[groups == k]) for k in range(3)}


def _dro(run_config):
    # the paper's protocol (rows as given, releases in the rounds only): the counts of
    # the tests below are the rounds'; the default's one-off releases run on Flower in
    # tests/federated/test_flower.py
    return DPFedDROClassifier(epsilon=float(run_config.get("epsilon", 0.5)), n_rounds=3,
                              classes=[0, 1, 2], standardize=False, temperature_share=0,
                              random_state=0)


def _fedavg(run_config):
    return FedAvgRegressor(n_rounds=3, fine_tune_epochs=1, random_state=0)


def _regression_sites():
    X, y, groups = make_federated_regression(n_clients=3, n_samples=[20, 25, 30],
                                             random_state=0)
    return {k: (X[groups == k], y[groups == k]) for k in range(3)}


class Spy:
    """The coordinator's wire: records every reply, and may alter what is sent."""

    def __init__(self, grid, alter=None):
        self.sent, self.replies = [], []
        push, pull = grid.push_messages, grid.pull_messages

        def push_messages(messages):
            messages = list(messages)
            for m in messages:
                if alter is not None:
                    alter(m)
                self.sent.append(m)
            return push(messages)

        def pull_messages(ids):
            got = pull(ids)
            for reply in got:
                if not reply.has_error() and "arrays" in reply.content.array_records:
                    self.replies.append((reply.metadata.src_node_id, reply.metadata.message_type,
                                         _from_record(reply.content["arrays"])))
            return got

        grid.push_messages, grid.pull_messages = push_messages, pull_messages


def _run(make, data, run_config=None, node_config=None, alter=None, **kwargs):
    federation = FlowerFederation(make, lambda cfg: data[cfg["client-id"]], round_timeout=5,
                                  offline_grace=0.0, **kwargs)
    configs = [{"client-id": k, **(node_config or {})} for k in sorted(data)]
    grid = InMemoryGrid(federation, configs, {"min-nodes": len(data), **(run_config or {})})
    spy = Spy(grid, alter)
    return grid, spy


def _train_replies(spy):
    return [(node, msg) for node, kind, msg in spy.replies if kind == "train"]


# -- 1. the noise is the site's secret ------------------------------------------------------

def test_two_runs_with_the_same_coordinator_config_differ_only_in_their_noise():
    data = _classification_sites()
    runs = []
    for _ in range(2):
        grid, spy = _run(_dro, data)
        model = grid.run()
        runs.append((model, spy))
    (a, spy_a), (b, spy_b) = runs
    # the set-up replies (not noisy) are equal; every noisy model message differs
    setup_a = [m for _, kind, m in spy_a.replies if kind == "query.setup"]
    setup_b = [m for _, kind, m in spy_b.replies if kind == "query.setup"]
    for x, y in zip(setup_a, setup_b):
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        assert "classes" not in x  # classes= is public: the sites keep their label sets
    noisy_a, noisy_b = _train_replies(spy_a), _train_replies(spy_b)
    assert len(noisy_a) == len(noisy_b) == 9
    for (na, ma), (nb, mb) in zip(noisy_a, noisy_b):
        assert na == nb and ma.keys() == mb.keys()
        assert not np.allclose(ma["coef"], mb["coef"])
    assert not np.allclose(a.coef_, b.coef_)
    assert a.privacy_spent_["against_coordinator"] is True


def test_the_coordinator_cannot_regenerate_the_noise_from_its_seed():
    """The attack: regenerate a site's noise from the run's seed and subtract it.

    It recovers the exact noise-free model where the sites draw from the run's seed (the
    test option), and misses by the full noise where they draw from their own entropy.
    """
    from skfed.federated import round_rng
    from skfed.federated._engine import Stream

    data = _classification_sites()
    first = {}
    for mode in ("shared", "secret"):
        grid, spy = _run(_dro, data, site_noise=mode)
        with pytest.warns(UserWarning) if mode == "shared" else _no_warning():
            model = grid.run()
        node, message = _train_replies(spy)[0]
        k = node - 100
        # the coordinator's knowledge: its seed (random_state=0), the index, the noise scale
        regenerated = model.noise_sigma_M_[k] * round_rng(0, Stream.CLIENT_STEP, k, 0) \
            .standard_normal(message["coef"].shape)
        first[mode] = (message["coef"] - regenerated, model.noise_sigma_M_[k])
    clean, sigma = first["shared"]
    guess, _ = first["secret"]
    # round 0's noise-free model is the same in both runs (same public start, same rows):
    # the shared run gives it back exactly, the secret run leaves the site's own noise on it
    assert sigma > 0.1 and np.abs(clean).max() < 0.5 * sigma
    assert np.sqrt(np.mean((guess - clean) ** 2)) > 0.5 * sigma


def _no_warning():
    import contextlib
    import warnings

    @contextlib.contextmanager
    def block():
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            yield

    return block()


def test_non_private_runs_are_reproducible_message_by_message():
    data = _regression_sites()
    seen = []
    for _ in range(2):
        grid, spy = _run(_fedavg, data)
        grid.run()
        seen.append(_train_replies(spy))
    for (na, ma), (nb, mb) in zip(*seen):
        assert na == nb and all(np.array_equal(ma[k], mb[k]) for k in ma)


def test_a_site_too_large_to_keep_its_rows_loads_them_at_every_message(monkeypatch):
    """Above ``KEEP_ROWS_BYTES`` a site's later rounds load and validate its rows again
    (from its loader) instead of its Flower state: the same replies either way."""
    import skfed.federated.flower as flower

    data = _regression_sites()
    seen, loads = [], []
    for keep in (flower.KEEP_ROWS_BYTES, 0):
        monkeypatch.setattr(flower, "KEEP_ROWS_BYTES", keep)
        calls = []
        federation = FlowerFederation(_fedavg, lambda cfg: calls.append(1) or data[
            cfg["client-id"]], round_timeout=5, offline_grace=0.0)
        grid = InMemoryGrid(federation, [{"client-id": k} for k in sorted(data)],
                            {"min-nodes": 3})
        spy = Spy(grid)
        grid.run()
        seen.append(_train_replies(spy))
        loads.append(len(calls))
    for (na, ma), (nb, mb) in zip(*seen):
        assert na == nb and all(np.array_equal(ma[k], mb[k]) for k in ma)
    n_train = len(seen[0])
    assert loads[1] >= loads[0] + n_train - 3  # every training message but the first loads


# -- 2. the site verifies the set-up ---------------------------------------------------------

def _forge_count(message, node=101, count=30_000):
    if message.metadata.dst_node_id == node and "setup" in message.content.array_records:
        setup = dict(_from_record(message.content["setup"]))
        counts = setup["n_samples"].copy()
        counts[node - 100] = count
        setup["n_samples"] = counts
        message.content["setup"] = _to_record(setup)


def test_a_forged_row_count_is_refused():
    grid, spy = _run(_dro, _classification_sites(), alter=_forge_count)
    with pytest.raises(Exception, match="site 1: refused the run: the set-up's row count") as err:
        grid.run()
    assert "30000" not in str(err.value) and "25" not in str(err.value)
    # the site sent nothing noisy under the forged count
    assert not [m for node, m in _train_replies(spy) if node == 101]


def test_a_forged_feature_count_is_refused():
    def alter(message):
        if "setup" in message.content.array_records:
            setup = dict(_from_record(message.content["setup"]))
            setup["n_features"] = np.int64(7)
            message.content["setup"] = _to_record(setup)

    grid, _ = _run(_fedavg, _regression_sites(), alter=alter)
    with pytest.raises(Exception, match="refused the run: the set-up's feature count"):
        grid.run()


@pytest.mark.parametrize("limits, refused", [
    ({"max-epsilon": 0.6}, True),  # 3 rounds at 0.5 per round cost 0.87 in total
    ({"max-epsilon": 100.0}, False),
    ({"min-noise-multiplier": 100.0}, True),
    ({"max-delta": 1e-9}, True),
])
def test_a_site_caps_the_budget_in_its_node_config(limits, refused):
    grid, spy = _run(_dro, _classification_sites(), node_config=limits)
    if not refused:
        assert grid.run().privacy_spent_["epsilon"] <= limits["max-epsilon"]
        return
    with pytest.raises(RuntimeError, match="refused the run: the run's privacy is outside"):
        grid.run()
    assert spy.replies == []  # refused at set-up: not even its row count was sent


def test_a_site_with_limits_refuses_a_non_private_run():
    grid, spy = _run(lambda cfg: DPFedDROClassifier(epsilon=None, n_rounds=2),
                     _classification_sites(), node_config={"max-epsilon": 5.0})
    with pytest.raises(RuntimeError, match="the run is not private"):
        grid.run()


def test_the_coordinator_raising_epsilon_in_the_run_config_is_refused():
    grid, _ = _run(_dro, _classification_sites(), run_config={"epsilon": 50.0},
                   node_config={"max-epsilon": 10.0})
    with pytest.raises(RuntimeError, match="max-epsilon"):
        grid.run()


# -- 3. nothing received is unpickled ---------------------------------------------------------

_LOADERS = {("pickle", "loads"), ("pickle", "load"), ("joblib", "load"), ("cloudpickle", "loads"),
            ("dill", "loads"), ("marshal", "loads")}
# the only pickle loads in skfed: the site's own state (Flower's context.state, local to the
# SuperNode) and the site's own model file, both written by the site's own steps
_SITE_OWN = {("skfed/federated/flower.py", "site_model"),
             ("skfed/federated/flower.py", "_resume"),
             ("skfed/federated/flower.py", "_client_evaluate")}


def test_no_received_bytes_are_unpickled():
    root = Path(__file__).resolve().parents[2]
    found = set()
    for path in (root / "skfed").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name)
                        and (node.func.value.id, node.func.attr) in _LOADERS):
                    found.add((path.relative_to(root).as_posix(), func.name,
                               ast.unparse(node.args[0]) if node.args else ""))
    assert {(p, f) for p, f, _ in found} <= _SITE_OWN, found
    for path, func, arg in found:  # and they read the site's own state or file
        assert "context.state" in arg or "record[" in arg or arg == "fh", (func, arg)


def test_fitted_estimator_travels_in_skops_format_with_trusted_types_only(tmp_path):
    import pickle

    import skops.io as sio

    data = _regression_sites()
    grid, _ = _run(_fedavg, data, run_config={"output": str(tmp_path / "fitted.skops")})
    model = grid.run()
    back = load_fitted(tmp_path / "fitted.skops")
    np.testing.assert_array_equal(back.coef_, model.coef_)
    with pytest.raises(Exception):  # not a pickle: a pickle reader cannot take it
        pickle.loads((tmp_path / "fitted.skops").read_bytes())

    class Payload:  # any type outside the trusted list is refused before anything is built
        pass

    evil = sio.dumps({"model": Payload()})
    with pytest.raises(ValueError, match="outside skfed's trusted list"):
        load_fitted(evil)
    assert load_fitted(save_fitted(model, None)).coef_.tolist() == model.coef_.tolist()


def test_the_trusted_types_cover_every_federated_estimator():
    """Every estimator that runs on Flower, and what a fit holds, is on the trusted list."""
    import skops.io as sio

    from skfed.federated.flower import TRUSTED_TYPES, supports_federation
    from skfed.utils.discovery import all_estimators, construct_instances

    federated = {f"{cls.__module__}.{cls.__qualname__}" for _, cls in all_estimators()
                 if any(supports_federation(e) for e in construct_instances(cls))}
    assert len(federated) >= 10 and federated <= TRUSTED_TYPES, federated - TRUSTED_TYPES
    data = _classification_sites()
    model = DPFedDROClassifier(n_rounds=2, random_state=0).fit(
        np.vstack([data[k][0] for k in data]), np.concatenate([data[k][1] for k in data]),
        groups=np.repeat([0, 1, 2], [20, 25, 30]))
    types = set(sio.get_untrusted_types(data=sio.dumps(model)))
    assert "skfed.federated._ledger.Ledger" in types and types <= TRUSTED_TYPES


@pytest.mark.parametrize("kind", ["pfedhgp-collapsed", "pfedhgp-per-client",
                                  "pfedhgp-variational", "pfedhgp-multioutput", "tensor",
                                  "fed-mixedlm"])
def test_every_fitted_state_loads_from_its_skops_file(kind):
    """What each kind of fit holds is on the trusted list: the file loads and predicts the
    same (a collapsed PFedHGP fit's ``Layout`` was once refused)."""
    from skfed import PersonalizedTensorRegressor, PFedHGPRegressor
    from skfed.linear_model import FedMixedLMRegressor

    rng = np.random.default_rng(0)
    groups = np.repeat([0, 1, 2], 20)
    X = rng.standard_normal((60, 2))
    y = X[:, 0] + 0.3 * groups + 0.1 * rng.standard_normal(60)
    if kind == "pfedhgp-collapsed":
        model = PFedHGPRegressor(random_state=0)
    elif kind == "pfedhgp-per-client":
        model = PFedHGPRegressor(noise="per_client", random_state=0)
    elif kind == "pfedhgp-variational":
        model = PFedHGPRegressor(inference="variational", n_rounds=3, n_inducing_local=5,
                                 random_state=0)
    elif kind == "pfedhgp-multioutput":
        model = PFedHGPRegressor(inference="variational", n_rounds=3, n_inducing_local=5,
                                 random_state=0)
        y = np.column_stack([y, -y + 0.1 * rng.standard_normal(60)])
    elif kind == "tensor":
        model = PersonalizedTensorRegressor(tensor_shape=(2, 1), rank=(1, 1), n_rounds=3,
                                            random_state=0)
    else:
        model = FedMixedLMRegressor()
    model.fit(X, y, groups=groups)
    back = load_fitted(save_fitted(model, None))
    np.testing.assert_allclose(back.predict(X, groups=groups), model.predict(X, groups=groups))


# -- 4. errors carry no data values -----------------------------------------------------------

def test_a_sites_error_reaches_the_coordinator_without_data_values(caplog):
    data = _classification_sites()
    X1, y1 = data[1]
    X1 = X1.copy()
    X1[5] *= 1.23357  # a row above norm_bound=1: the site refuses it
    data[1] = (X1, y1)
    grid, _ = _run(_dro, data)
    with caplog.at_level("ERROR", logger="skfed.federated.flower"):
        with pytest.raises(RuntimeError) as err:
            grid.run()
    text = str(err.value)
    assert "site 1: validating its rows failed (ValueError" in text
    assert not re.search(r"\d\.\d", text) and "row 5" not in text
    # the details stay in the site's own log
    assert "1.23357" in caplog.text


def test_a_site_step_error_sends_only_its_type_and_stage(monkeypatch):
    from skfed.tensor import _stages

    def overflow(X, Y, label):
        raise ValueError(f"X of client {label!r} is out of range: its largest absolute value "
                         "is 3.14e+200")

    monkeypatch.setattr(_stages, "check_client_range", overflow)
    from skfed import PersonalizedTensorRegressor
    from skfed.datasets import make_tensor_regression

    X, y, g = make_tensor_regression(n_clients=2, n_samples=[30, 30], tensor_shape=(3, 3),
                                     output_shape=None, rank=(2, 2), n_nonzero=2,
                                     random_state=0)
    data = {k: (X[g == k], y[g == k]) for k in range(2)}
    grid, _ = _run(lambda cfg: PersonalizedTensorRegressor(tensor_shape=(3, 3), rank=(2, 2),
                                                           n_rounds=2, step_size=0.1), data)
    with pytest.raises(Exception) as err:
        grid.run()
    assert "3.14" not in str(err.value) and "largest" not in str(err.value)
    assert "failed (ValueError" in str(err.value)


# -- 5. the allow-list ----------------------------------------------------------------------

def test_a_node_not_on_the_allow_list_is_left_out():
    data = _regression_sites()
    grid, _ = _run(_fedavg, data, sites=[0, 2])
    with pytest.warns(UserWarning, match=r"not on the allow-list.*\(1, 101\)"):
        model = grid.run()
    assert model.clients_.tolist() == [0, 2]


def test_a_label_is_bound_to_its_node():
    """Node 101 declares label 1 but the allow-list gives label 1 to node 102: refused."""
    data = _regression_sites()
    grid, _ = _run(_fedavg, data, sites={0: 100, 1: 102, 2: 101})
    with pytest.warns(UserWarning, match="not on the allow-list"):
        with pytest.raises(RuntimeError, match=r"did not join the run: \['1', '2'\]"):
            grid.run()
    grid, _ = _run(_fedavg, data, run_config={"sites": "0=100,1=101,2=102"})
    assert grid.run().clients_.tolist() == [0, 1, 2]


def test_an_expected_site_that_is_missing_stops_the_run():
    grid, _ = _run(_fedavg, _regression_sites(), sites=[0, 1, 2, "late"])
    with pytest.raises(RuntimeError, match=r"did not join the run: \['late'\]"):
        grid.run()


def test_bad_allow_lists_are_refused():
    with pytest.raises(TypeError, match="sites must be"):
        FlowerFederation(_fedavg, lambda cfg: None, sites=3)
    with pytest.raises(ValueError, match="site_noise must be"):
        FlowerFederation(_fedavg, lambda cfg: None, site_noise="public")


# -- 6. no more releases than the budget covers ----------------------------------------------

@pytest.mark.parametrize("attack", ["replay", "extra_round"])
def test_a_site_answers_each_round_once_and_no_more_rounds_than_the_run_has(attack):
    """A round asked twice (another broadcast, the same noise) or past n_rounds is refused."""
    from skfed.federated.flower import FlowerTransport

    data = _classification_sites()
    grid, spy = _run(_dro, data)
    original = FlowerTransport.round

    def round_(self, rnd, asked, broadcast, final=False):
        out = original(self, rnd, asked, broadcast, final)
        if rnd == 1 and not final:  # the coordinator asks again
            again = rnd if attack == "replay" else 3  # 3 rounds in this run: 0, 1, 2
            return original(self, again, asked, {**broadcast}, final)
        return out

    FlowerTransport.round = round_
    try:
        with pytest.raises(ClientDropout, match="refused the run: a round the site already "
                                                "answered or beyond the run's rounds"):
            grid.run()
    finally:
        FlowerTransport.round = original
    assert len(_train_replies(spy)) == 6  # rounds 0 and 1 of each site, nothing more
