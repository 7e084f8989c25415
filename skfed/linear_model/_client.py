"""The site's side of the linear algorithms, apart from the estimators.

A Flower site's process unpickles its algorithm for every message; this module and
the algorithms' (:mod:`._admm`) import numpy and skfed's engine only, not
scikit-learn, whose import would be most of what a message costs the site.
"""

import numpy as np

from ..federated import ClientData
from ._checks import _label_array


class LinearClientMixin:
    """``prepare_client`` of the linear algorithms: encode labels, add the intercept.

    ``classes`` and ``intercept_scaling`` are set by the estimator from the
    set-up summary; the rewrite happens on the site.
    """

    classes = None
    intercept_scaling = None
    #: set from the set-up summary when the estimator standardizes (non-private only)
    feature_mean = None
    feature_scale = None

    def prepare_client(self, data):
        if self.classes is None:  # built by hand on encoded rows (no set-up exchange)
            return data
        y = _label_array(data.y, "y")
        codes = np.searchsorted(self.classes, y)
        codes = np.minimum(codes, self.classes.size - 1)
        if not np.array_equal(self.classes[codes], y):
            raise ValueError(f"client {data.label!r} holds class labels outside classes_.")
        X = data.X
        if self.feature_mean is not None:
            X = (X - self.feature_mean) / self.feature_scale
        if self.intercept_scaling is not None:
            X = np.hstack([X, np.full((X.shape[0], 1), self.intercept_scaling)])
        return ClientData(X=X, y=codes.astype(np.int64), sample_weight=data.sample_weight,
                          label=data.label, index=data.index)
