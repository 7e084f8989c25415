"""Cross-validation that holds out rows of every client (seen clients)."""

import warnings

import numpy as np
from sklearn.model_selection._split import BaseCrossValidator, GroupsConsumerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import _num_samples

from ..utils._validation import check_groups, check_positive_int, user_stacklevel

__all__ = ["WithinClientKFold"]


class WithinClientKFold(GroupsConsumerMixin, BaseCrossValidator):
    """K-fold split *within* each client: every client is in every train and test fold.

    The complement of ``GroupKFold`` (which holds out whole clients and so
    measures new-client generalization): this splitter measures personalized
    accuracy on held-out rows of seen clients. Each client's rows are divided
    into ``n_splits`` folds of near-equal size; test fold ``i`` is the union of
    every client's fold ``i``. A client with fewer rows than ``n_splits``
    stays in every training fold and is never tested, with a warning by
    default (``small_clients``).

    It consumes ``groups`` (requested by default), so with metadata routing
    one ``groups=`` argument reaches this splitter, the estimator's ``fit``
    and its ``score``.

    Parameters
    ----------
    n_splits : int, default=5
        Number of folds, at least 2.
    small_clients : {"warn", "train", "error"}, default="warn"
        What to do with a client that has fewer than ``n_splits`` rows (it
        cannot have a row in every test fold; real data often has such
        sites): ``"train"`` keeps all its rows in every training fold (it is
        never tested, but the model still learns from it); ``"warn"`` does
        the same and warns, naming those clients; ``"error"`` raises. If no
        client has ``n_splits`` rows, ``split`` raises whatever the option.
    shuffle : bool, default=False
        Shuffle each client's rows before splitting.
    random_state : int, RandomState instance or None, default=None
        Seed of the shuffle. As for scikit-learn's ``KFold``, it must stay
        None unless ``shuffle=True`` (a seed would have no effect).

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

    def __init__(self, n_splits=5, *, small_clients="warn", shuffle=False, random_state=None):
        self.n_splits = n_splits
        self.small_clients = small_clients
        self.shuffle = shuffle
        self.random_state = random_state
        self._check_params()  # at construction, as scikit-learn's KFold

    def _check_params(self):
        """Validate the parameters (again in ``get_n_splits`` and ``split``: they may be set).

        Returns
        -------
        n_splits : int
        """
        n_splits = check_positive_int(self.n_splits, "n_splits", minimum=2)
        if self.small_clients not in ("warn", "train", "error"):
            raise ValueError(
                f"small_clients must be 'warn', 'train' or 'error', got {self.small_clients!r}."
            )
        if not isinstance(self.shuffle, (bool, np.bool_)):  # "no" is truthy: it would shuffle
            raise TypeError(f"shuffle must be True or False; got {self.shuffle!r}.")
        if not self.shuffle and self.random_state is not None:
            # scikit-learn's KFold message
            raise ValueError(
                "Setting a random_state has no effect since shuffle is False. You should "
                "leave random_state to its default (None), or set shuffle=True."
            )
        return n_splits

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
        return self._check_params()

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
        n_splits = self._check_params()
        n_samples = _num_samples(X)
        clients, index = check_groups(groups, n_samples)
        sizes = np.bincount(index, minlength=clients.size)
        small = clients[sizes < n_splits].tolist()
        if small and (self.small_clients == "error" or len(small) == clients.size):
            k = int(np.argmin(sizes))
            raise ValueError(
                f"client {clients.tolist()[k]!r} has {sizes[k]} row(s), fewer than "
                f"n_splits={n_splits}; every client needs one row per fold (groups)"
                + (", or pass small_clients='train' to keep such clients in training only."
                   if len(small) < clients.size else "; no client has that many.")
            )
        if small and self.small_clients == "warn":
            warnings.warn(
                f"{len(small)} of {clients.size} clients have fewer rows than "
                f"n_splits={n_splits} and stay in every training fold, never tested: "
                f"{small[:10]}{' ...' if len(small) > 10 else ''}. Pass "
                "small_clients='train' to silence this or 'error' to refuse such data.",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        rng = check_random_state(self.random_state) if self.shuffle else None
        folds = [[] for _ in range(n_splits)]
        for k in np.flatnonzero(sizes >= n_splits):
            rows = np.flatnonzero(index == k)
            if rng is not None:
                rows = rng.permutation(rows)
            for i, part in enumerate(np.array_split(rows, n_splits)):
                folds[i].append(part)
        for parts in folds:
            yield np.sort(np.concatenate(parts))
