"""A site's later rounds on Flower run in a process that imports no scikit-learn (nor numba
or scipy.linalg, for the collapsed PFedHGP fit).

Flower starts a new ``flwr-clientapp`` process for every message; importing
scikit-learn (with scipy.stats and pandas) is about a second of it. A site keeps
its algorithm and validated rows in its own Flower state, so from its second
training message on it needs neither the estimator nor scikit-learn. Checked by
handling a recorded message again in a new Python process.
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("flwr")

from skfed.federated.flower import InMemoryGrid  # noqa: E402

# the estimator of each app: imported inside make_estimator, which later rounds never call
ESTIMATORS = {
    "dpfeddro": """
    from skfed.linear_model import DPFedDROClassifier

    return DPFedDROClassifier(epsilon=0.5, classes=[0, 1, 2], n_rounds=4, random_state=0)
""",
    # the default (collapsed) fit, whose site step needs no compiled kernel
    "pfedhgp": """
    from skfed import PFedHGPRegressor

    return PFedHGPRegressor(random_state=0)
""",
}

APP = """
import numpy as np
from skfed.federated.flower import FlowerFederation


def make_estimator(run_config):%s


def load_data(node_config):
    data = np.load(node_config["data-path"])
    return data["X"], data["y"]


federation = FlowerFederation(make_estimator, load_data, round_timeout=30, offline_grace=0.0)
"""

CHILD = """
import sys
from flwr.common.serde import context_from_proto, message_from_proto
from flwr.proto.message_pb2 import Context, Message
sys.path.insert(0, {work!r})
import {module} as app
message = message_from_proto(Message.FromString(open({message!r}, "rb").read()))
context = context_from_proto(Context.FromString(open({context!r}, "rb").read()))
reply = app.federation.client_app(message=message, context=context)
assert not reply.has_error(), reply.error.reason
print(sorted(m for m in ("sklearn", "scipy.linalg", "scipy.stats", "pandas", "numba",
                        "dp_accounting") if m in sys.modules))
"""


class _Recording:
    """The app, recording what site 0 (node 100) receives before handling it."""

    def __init__(self, federation):
        self.federation = federation
        self.received = []

    def _server_main(self, grid, context):
        return self.federation._server_main(grid, context)

    def client_app(self, message, context):
        from flwr.common.serde import context_to_proto, message_to_proto

        if context.node_id == 100:
            self.received.append((message_to_proto(message).SerializeToString(),
                                  context_to_proto(context).SerializeToString()))
        return self.federation.client_app(message=message, context=context)


@pytest.mark.parametrize("estimator", list(ESTIMATORS))
def test_later_rounds_import_no_scikit_learn(estimator, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    configs = []
    for k in range(3):
        X = rng.standard_normal((30, 4))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        y = rng.integers(0, 3, 30) if estimator == "dpfeddro" else X[:, 0] + 0.3 * k
        np.savez(tmp_path / f"site{k}.npz", X=X, y=y)
        configs.append({"client-id": k, "data-path": str(tmp_path / f"site{k}.npz")})
    module = f"skfed_test_site_app_{estimator}"
    (tmp_path / f"{module}.py").write_text(APP % ESTIMATORS[estimator])
    monkeypatch.syspath_prepend(str(tmp_path))
    app = __import__(module)
    recording = _Recording(app.federation)
    InMemoryGrid(recording, configs, {"min-nodes": 3}).run()
    # the set-up query, the first round (with the set-up), then rounds from the site's state
    # (the collapsed fit's later rounds alternate: statistics, then the gradient)
    assert len(recording.received) >= 4
    for message, context in recording.received[2:4]:
        (tmp_path / "message").write_bytes(message)
        (tmp_path / "context").write_bytes(context)
        code = CHILD.format(work=str(tmp_path), module=module,
                            message=str(tmp_path / "message"),
                            context=str(tmp_path / "context"))
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
