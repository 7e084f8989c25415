"""Cross-validation that holds out rows of every client (seen clients)."""

import numpy as np
from sklearn.model_selection._split import BaseCrossValidator, GroupsConsumerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import _num_samples

from ..utils._validation import check_groups, check_positive_int

__all__ = ["WithinClientKFold"]


class WithinClientKFold(GroupsConsumerMixin, BaseCrossValidator):
    """K-fold split *within* each client: every client is in every train and test fold.

    The complement of ``GroupKFold`` (which holds out whole clients and so
    measures new-client generalization): this splitter measures personalized
    accuracy on held-out rows of seen clients. Each client's rows are divided
    into ``n_splits`` folds of near-equal size; test fold ``i`` is the union of
    every client's fold ``i``.

    It consumes ``groups`` (requested by default), so with metadata routing
    one ``groups=`` argument reaches this splitter, the estimator's ``fit``
    and its ``score``.

    Parameters
    ----------
    n_splits : int, default=5
        Number of folds, at least 2.
    small_clients : {"error", "train"}, default="error"
        What to do with a client that has fewer than ``n_splits`` rows:
        ``"error"`` raises; ``"train"`` keeps all its rows in every training
        fold (it is never tested, but the model still learns from it; real
        data often has such sites).
    shuffle : bool, default=False
        Shuffle each client's rows before splitting.
    random_state : int, RandomState instance or None, default=None
        Seed of the shuffle (only with ``shuffle=True``).

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.model_selection import WithinClientKFold
    >>> groups = np.array([0, 0, 0, 1, 1, 1])
    >>> for train, test in WithinClientKFold(n_splits=3).split(np.zeros((6, 1)), groups=groups):
    ...     print(test.tolist())
    [0, 3]
    [1, 4]
    [2, 5]
    """

    def __init__(self, n_splits=5, *, small_clients="error", shuffle=False, random_state=None):
        self.n_splits = n_splits
        self.small_clients = small_clients
        self.shuffle = shuffle
        self.random_state = random_state

    def get_n_splits(self, X=None, y=None, groups=None):
        """Return the number of splits.

        Parameters
        ----------
        X, y, groups : object
            Ignored; present for API compatibility.

        Returns
        -------
        n_splits : int
        """
        return self.n_splits

    def split(self, X, y=None, groups=None):
        """Generate train/test indices; each test fold holds rows of every client.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Data (only its length is used).
        y : array-like, default=None
            Ignored.
        groups : array-like of shape (n_samples,), default=None
            Client label of each row; ``None`` means one client (plain KFold).

        Yields
        ------
        train : ndarray
            Training indices of the split.
        test : ndarray
            Test indices of the split.
        """
        return super().split(X, y, groups)

    def _iter_test_indices(self, X, y=None, groups=None):
        n_splits = check_positive_int(self.n_splits, "n_splits", minimum=2)
        if self.small_clients not in ("error", "train"):
            raise ValueError(
                f"small_clients must be 'error' or 'train', got {self.small_clients!r}."
            )
        n_samples = _num_samples(X)
        clients, index = check_groups(groups, n_samples)
        rng = check_random_state(self.random_state) if self.shuffle else None
        folds = [[] for _ in range(n_splits)]
        for k, label in enumerate(clients.tolist()):
            rows = np.flatnonzero(index == k)
            if rows.size < n_splits:
                if self.small_clients == "train":
                    continue
                raise ValueError(
                    f"client {label!r} has {rows.size} row(s), fewer than "
                    f"n_splits={n_splits}; every client needs one row per fold (groups), "
                    "or pass small_clients='train' to keep such clients in training only."
                )
            if rng is not None:
                rows = rng.permutation(rows)
            for i, part in enumerate(np.array_split(rows, n_splits)):
                folds[i].append(part)
        for parts in folds:
            yield np.sort(np.concatenate(parts))
