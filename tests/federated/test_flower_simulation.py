"""The same app on Flower's Ray-based simulation engine (``run_simulation``).

Needs the ``simulation`` extra (Ray, 220 MB), not part of the ``test`` extra:
skipped where Ray is not installed. Run on the project machine with
``pip install -e ".[test,simulation]"``.
"""

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("ray")

from flwr.simulation import run_simulation  # noqa: E402

from skfed.baselines import FedAvgRegressor  # noqa: E402
from skfed.datasets import make_federated_regression  # noqa: E402
from skfed.federated.flower import FlowerFederation  # noqa: E402


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_simulation_engine_equals_in_process_fit():
    X, y, groups = make_federated_regression(n_clients=3, n_samples=[20, 25, 30],
                                             random_state=0)

    def load_data(node_config):  # the simulation numbers its SuperNodes by partition-id
        rows = groups == node_config["partition-id"]
        return X[rows], y[rows]

    def make(run_config):
        return FedAvgRegressor(n_rounds=2, fine_tune_epochs=1, random_state=0)

    federation = FlowerFederation(make, load_data, round_timeout=300)
    run_simulation(server_app=federation.server_app, client_app=federation.client_app,
                   num_supernodes=3,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    remote, local = federation.fitted_, make({}).fit(X, y, groups=groups)
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=0, atol=1e-8)
    assert remote.communication_.total_bytes == local.communication_.total_bytes
