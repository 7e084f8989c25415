"""Run a :class:`~skfed.federated.flower.FlowerFederation` in one process.

:class:`InMemoryGrid` plays the SuperLink and the SuperNodes: the
``ServerApp`` and ``ClientApp`` exchange real Flower ``Message`` objects
(every array serialized into an ``ArrayRecord``), but each SuperNode is a
direct ``ClientApp`` call with its own ``Context``. It checks an app in
seconds, before it is deployed, and lets tests make a site leave
mid-training deterministically.
"""

from flwr.app import Context, Error, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["InMemoryGrid"]


class InMemoryGrid:
    """A Flower ``Grid`` whose SuperNodes are ``ClientApp`` calls in this process.

    Parameters
    ----------
    federation : FlowerFederation
        The app to run.
    node_configs : list of dict
        One node config per SuperNode (what ``load_data`` receives).
    run_config : dict
        The run config (what ``make_estimator`` receives).
    offline_after : dict or None, default=None
        Maps a node id (``100 + position in node_configs``) to the number of
        ``train`` messages it answers before it leaves without answering,
        like a SuperNode stopped by SIGTERM.

    Attributes
    ----------
    contexts : dict
        Each SuperNode's ``Context``; ``contexts[node].state`` is the
        site-local state that never leaves the site.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.baselines import FedAvgRegressor
    >>> from skfed.datasets import make_federated_regression
    >>> from skfed.federated.flower import FlowerFederation, InMemoryGrid
    >>> X, y, groups = make_federated_regression(n_clients=2, n_samples=20, random_state=0)
    >>> def load_data(node_config):
    ...     mask = groups == node_config["client-id"]
    ...     return X[mask], y[mask]
    >>> app = FlowerFederation(lambda run_config: FedAvgRegressor(n_rounds=2, random_state=0),
    ...                        load_data)
    >>> grid = InMemoryGrid(app, [{"client-id": 0}, {"client-id": 1}], {"min-nodes": 2})
    >>> fitted = grid.run()
    >>> fitted.clients_.tolist()
    [0, 1]
    """

    def __init__(self, federation, node_configs, run_config, offline_after=None):
        self.federation = federation
        self.run_config = dict(run_config)
        self.contexts = {
            100 + i: Context(run_id=1, node_id=100 + i, node_config=dict(cfg),
                             state=RecordDict(), run_config=self.run_config)
            for i, cfg in enumerate(node_configs)
        }
        self.offline_after = dict(offline_after or {})
        self.offline = set()
        self.replies = {}
        self.trained = {n: 0 for n in self.contexts}

    def get_node_ids(self):
        """Ids of the SuperNodes still connected."""
        return [n for n in self.contexts if n not in self.offline]

    def push_messages(self, messages):
        """Deliver the messages; the replies wait for :meth:`pull_messages`."""
        ids = []
        for msg in messages:
            # a SuperLink assigns the message id when it stores the message
            msg.metadata.__dict__["_message_id"] = msg.object_id
            node = msg.metadata.dst_node_id
            ids.append(msg.metadata.message_id)
            if node in self.offline:
                continue
            if msg.metadata.message_type == "train":
                if self.trained[node] == self.offline_after.get(node, -1):
                    self.offline.add(node)  # leaves without answering
                    continue
                self.trained[node] += 1
            TaskIdentity.node_id = node
            try:
                reply = self.federation.client_app(message=msg, context=self.contexts[node])
            except Exception as exc:  # the Flower runtime turns it into an error reply
                reply = Message(Error(code=1, reason=f"{type(exc).__name__}: {exc}"),
                                reply_to=msg)
            self.replies[msg.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids):
        """The replies that have arrived for ``message_ids``."""
        return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def run(self):
        """Run the ``ServerApp`` on this grid; return the fitted estimator."""
        TaskIdentity.run_id = 1
        TaskIdentity.task_id = 1
        TaskIdentity.node_id = 0
        context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                          run_config=self.run_config)
        return self.federation._server_main(self, context)
