"""Maximum-evidence classification and projection-operator clustering."""

import numpy as np
import pytest
from scipy.linalg import block_diag

from skfed import PFedHGPRegressor
from skfed.datasets import make_press_tonnage
from skfed.gaussian_process import PFedHGPClassifier, cluster_clients
from skfed.gaussian_process._elbo import softplus
from skfed.gaussian_process._kernels import kernel_matrix


def test_press_classification_with_few_training_cycles():
    X, y, t = make_press_tonnage(n_cycles=(30, 12, 12, 12, 12), n_points=60, random_state=0)
    train = np.zeros(len(y), dtype=bool)
    for c in range(5):
        train[np.flatnonzero(y == c)[: 6 if c == 0 else 3]] = True
    clf = PFedHGPClassifier(input_grid=t).fit(X[train], y[train])
    assert (clf.predict(X[~train]) == y[~train]).mean() > 0.9
    proba = clf.predict_proba(X[~train][:4])
    np.testing.assert_allclose(proba.sum(1), 1.0)
    assert clf.estimator_.clients_.tolist() == [0, 1, 2, 3, 4]


def test_log_likelihood_is_the_full_covariance_gaussian_density():
    from scipy.stats import multivariate_normal

    X, y, t = make_press_tonnage(n_cycles=(6, 6), n_points=20, random_state=1)
    clf = PFedHGPClassifier(input_grid=t).fit(X, y)
    ll = clf.predict_log_likelihood(X[:2])
    for c in range(2):
        mean, cov = clf.estimator_.predict(t[:, None], groups=np.full(20, c), return_cov=True)
        jitter = clf.estimator_.jitter * clf.estimator_.y_std_**2  # the factorization's jitter
        ref = multivariate_normal(mean, cov + jitter * np.eye(20)).logpdf(X[:2])
        np.testing.assert_allclose(ll[:, c], ref, rtol=1e-6)


def test_classifier_bad_grid():
    X, y, _ = make_press_tonnage(n_cycles=(4, 4), n_points=10, random_state=0)
    with pytest.raises(ValueError, match="input_grid"):
        PFedHGPClassifier(input_grid=np.arange(3)).fit(X, y)
    with pytest.raises(ValueError, match="estimator"):
        PFedHGPClassifier(estimator="gp").fit(X, y)


def test_dissimilarity_matches_brute_force():
    rng = np.random.default_rng(0)
    X = np.tile(np.linspace(0, 1, 20), 3)[:, None]
    groups = np.repeat([0, 1, 2], 20)
    y = np.sin(6 * X[:, 0]) + np.where(groups == 2, np.sin(30 * X[:, 0]), 0) + 0.05 * rng.normal(size=60)
    m = PFedHGPRegressor(optimizer="cavi", n_inducing_global=8, n_inducing_local=6, n_rounds=4,
                         init_lengthscale_global=0.3, init_lengthscale_local=0.1, random_state=0)
    m.fit(X, y, groups=groups)
    rho = m.client_dissimilarity(X, groups)
    assert rho.shape == (3, 3) and np.allclose(rho, rho.T) and np.all(np.diag(rho) == 0)
    # brute force with explicit inverses
    g = m._global
    noise = float(softplus(g["noise"]))
    ops = []
    for k in range(3):
        Xi = X[groups == k]
        blocks = []
        for Z, ls, var in ((g["Zg"], softplus(g["ls_g"]), m.phi_ * float(softplus(g["var_g"]))),
                           (m._locals[k]["Zl"], softplus(m._locals[k]["ls_l"]), float(softplus(m._locals[k]["var_l"])))):
            Kxx = kernel_matrix(Xi, Xi, ls, var, 0) + noise * np.eye(20)
            Kzx = kernel_matrix(Z, Xi, ls, var, 0)
            blocks.append(Kzx @ np.linalg.inv(Kxx) @ Kzx.T)
        A = block_diag(*blocks)
        ops.append(A / np.trace(A))
    for i in range(3):
        for j in range(3):
            assert rho[i, j] == pytest.approx(np.sum((ops[i] - ops[j]) ** 2), rel=1e-6, abs=1e-12)


def test_cluster_clients_recovers_blocks_and_validates():
    rng = np.random.default_rng(0)
    zones = np.repeat([0, 1, 2], 4)
    centers = rng.normal(size=(3, 5)) * 5
    pts = centers[zones] + 0.1 * rng.normal(size=(12, 5))
    rho = ((pts[:, None] - pts[None]) ** 2).sum(-1)
    labels = cluster_clients(rho, 3, random_state=0)
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(zones, labels) == 1.0
    with pytest.raises(ValueError, match="rho"):
        cluster_clients(-rho, 3)
    with pytest.raises(ValueError, match="n_clusters"):
        cluster_clients(rho, 20)
