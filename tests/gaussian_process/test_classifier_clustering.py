"""Maximum-evidence classification and projection-operator clustering."""

import numpy as np
import pytest
from scipy.linalg import block_diag

from skfed import PFedHGPRegressor
from skfed.datasets import make_press_tonnage
from skfed.gaussian_process import PFedHGPClassifier, client_dissimilarity, cluster_clients
from skfed.gaussian_process._elbo import softplus
from skfed.gaussian_process._covariance import kernel_matrix


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


def _brute_rho(ops):
    T = len(ops)
    return np.array([[np.sum((ops[i] - ops[j]) ** 2) for j in range(T)] for i in range(T)])


@pytest.fixture(scope="module")
def scalar_fit():
    rng = np.random.default_rng(0)
    X = np.tile(np.linspace(0, 1, 20), 3)[:, None]
    groups = np.repeat([0, 1, 2], 20)
    y = (np.sin(6 * X[:, 0]) + np.where(groups == 2, np.sin(30 * X[:, 0]), 0)
         + 0.05 * rng.normal(size=60))
    m = PFedHGPRegressor(inference="variational",
                         optimizer="cavi", n_inducing_global=8, n_inducing_local=6, n_rounds=4,
                         init_lengthscale_global=0.3, init_lengthscale_local=0.1, random_state=0,
                         normalize_y=False, normalize_X=False)
    return m.fit(X, y, groups=groups), X, groups


@pytest.mark.parametrize("deviation_kernel", ["global", "deviation"])
@pytest.mark.parametrize("component", ["both", "deviation", "local"])
def test_dissimilarity_matches_brute_force(scalar_fit, component, deviation_kernel):
    m, X, groups = scalar_fit
    rho = client_dissimilarity(m, X, groups, component=component, deviation_kernel=deviation_kernel)
    assert rho.shape == (3, 3) and np.allclose(rho, rho.T) and np.all(np.diag(rho) == 0)
    if component == "both" and deviation_kernel == "global":  # the paper's operator is the default
        np.testing.assert_array_equal(rho, m.client_dissimilarity(X, groups))
    # brute force with explicit inverses; the paper's deviation block uses K_g itself
    g = m._global
    noise = float(softplus(g["noise"]))
    dev_scale = m.phi_ if deviation_kernel == "deviation" else 1.0
    ops = []
    for k in range(3):
        Xi = X[groups == k]
        terms = {"deviation": (g["Zg"], softplus(g["ls_g"]),
                               dev_scale * float(softplus(g["var_g"]))),
                 "local": (m._locals[k]["Zl"], softplus(m._locals[k]["ls_l"]),
                           float(softplus(m._locals[k]["var_l"])))}
        blocks = []
        for name in (("deviation", "local") if component == "both" else (component,)):
            Z, ls, var = terms[name]
            Kxx = kernel_matrix(Xi, Xi, ls, var, 0) + noise * np.eye(20)
            Kzx = kernel_matrix(Z, Xi, ls, var, 0)
            blocks.append(Kzx @ np.linalg.inv(Kxx) @ Kzx.T)
        A = block_diag(*blocks)
        ops.append(A / np.trace(A))
    np.testing.assert_allclose(rho, _brute_rho(ops), rtol=1e-6, atol=1e-14)


def test_dissimilarity_bad_options(scalar_fit):
    m, X, groups = scalar_fit
    for kw in ({"component": "global"}, {"deviation_kernel": "phi"}, {"multioutput": "Q"}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            client_dissimilarity(m, X, groups, **kw)
    # multioutput only concerns multi-output fits
    np.testing.assert_array_equal(client_dissimilarity(m, X, groups, multioutput="latent"),
                                  client_dissimilarity(m, X, groups))
    with pytest.raises(ValueError, match="no rows"):
        client_dissimilarity(m, X[:40], groups[:40])
    no_dev = PFedHGPRegressor(("global", "local"), inference="variational", optimizer="cavi",
                              n_inducing_global=8,
                              n_inducing_local=6, n_rounds=1, random_state=0)
    no_dev.fit(X, np.sin(6 * X[:, 0]), groups=groups)
    with pytest.raises(ValueError, match="deviation"):
        client_dissimilarity(no_dev, X, groups, component="deviation")
    assert client_dissimilarity(no_dev, X, groups).shape == (3, 3)


def _with_nan(X):
    X = X.copy()
    X[0, 0] = np.nan
    return X


@pytest.mark.parametrize("bad_X, match", [
    (lambda X: np.c_[X, X], "X has 2 features, but PFedHGPRegressor is expecting 1"),
    (lambda X: X[:, 0], "X: Expected 2D array"),
    (_with_nan, "Input X contains NaN"),
    (lambda X: X * 1e200, "X is out of range"),  # NaN dissimilarities otherwise
    (lambda X: X * 1e100 + 1e100, "X of client 0 gives a zero projection operator"),
])
def test_dissimilarity_function_validates_X_as_the_method(scalar_fit, bad_X, match):
    m, X, groups = scalar_fit
    with pytest.raises(ValueError, match=match):
        client_dissimilarity(m, bad_X(X), groups)
    with pytest.raises(ValueError, match=match):
        m.client_dissimilarity(bad_X(X), groups)


def test_dissimilarity_names_missing_groups(scalar_fit):
    m, X, _ = scalar_fit
    with pytest.raises(ValueError, match="groups is None"):
        client_dissimilarity(m, X, None)


@pytest.mark.parametrize("bandwidth", [np.inf, np.nan, 0.0, -1.0, "a", True])
def test_cluster_clients_refuses_bad_bandwidth(bandwidth):
    rho = np.array([[0, .1, 5, 5], [.1, 0, 5, 5], [5, 5, 0, .1], [5, 5, .1, 0]])
    with pytest.raises(ValueError, match="bandwidth"):
        cluster_clients(rho, 2, bandwidth=bandwidth)


def test_cluster_clients_refuses_a_non_symmetric_rho():
    rho = np.array([[0, .1, 5, 5], [.1, 0, 5, 5], [5, 5, 0, .1], [5, 5, .1, 0]])
    with pytest.raises(ValueError, match=r"rho must be symmetric.*rho\[0, 2\] = 5"):
        cluster_clients(np.triu(rho), 2)
    # rounding differences are not asymmetry
    nearly = rho + np.triu(np.full((4, 4), 1e-12), 1)
    np.testing.assert_array_equal(cluster_clients(nearly, 2, random_state=0),
                                  cluster_clients(rho, 2, random_state=0))


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


@pytest.fixture(scope="module")
def ilmm_fit():
    # 6 clients, Q = 2: a shared signal on both outputs plus a fast local signal on
    # output 0 (even clients) or output 1 (odd clients)
    rng = np.random.default_rng(0)
    n, T = 30, 6
    t = np.linspace(0, 1, n)
    block = np.arange(T) % 2
    Y = []
    for i in range(T):
        out = np.outer(np.sin(2 * np.pi * t), [1.0, 0.5])
        out[:, block[i]] += np.sin(25 * t + rng.uniform(0, 6))
        Y.append(out + 0.05 * rng.normal(size=(n, 2)))
    X, groups = np.tile(t, T)[:, None], np.repeat(np.arange(T), n)
    m = PFedHGPRegressor(inference="variational",
                         optimizer="cavi", n_latents=2, n_inducing_global=8, n_inducing_local=6,
                         n_rounds=5, init_lengthscale_global=0.3, init_lengthscale_local=0.1,
                         random_state=0, normalize_y=False, normalize_X=False)
    return m.fit(X, np.vstack(Y), groups=groups), X, groups, block


def _rbf(A, B, ls, var):
    return var * np.exp(-0.5 * (A[:, None, 0] - B[None, :, 0]) ** 2 / ls**2)


@pytest.mark.parametrize("multioutput", ["outputs", "latent"])
def test_ilmm_dissimilarity_matches_brute_force(ilmm_fit, multioutput):
    m, X, groups, _ = ilmm_fit
    rho = client_dissimilarity(m, X, groups, multioutput=multioutput)
    assert rho.shape == (6, 6) and np.allclose(rho, rho.T) and np.all(np.diag(rho) == 0)
    g, cfg = m._global, m._cfg
    s2 = float(softplus(g["noise"]))
    ops = []
    for k in range(6):
        Xi, loc = X[groups == k], m._locals[k]
        n = Xi.shape[0]
        comps = [(g["Zg"], softplus(g["ls_g"][:, 0]), cfg.variance_global, loc["Bd"]),
                 (loc["Zl"], softplus(loc["ls_l"][:, 0]), cfg.variance_local, loc["Bl"])]
        blocks = []
        for Z, ls, var, B in comps:
            if multioutput == "latent":  # one scalar operator per latent, loadings ignored
                for r in range(B.shape[1]):
                    Kzx = _rbf(Z, Xi, ls[r], var)
                    blocks.append(
                        Kzx @ np.linalg.inv(_rbf(Xi, Xi, ls[r], var) + s2 * np.eye(n)) @ Kzx.T)
                continue
            # row-major (input, output) ordering, entry by entry
            Q, M = B.shape[0], Z.shape[0]
            Kyy, Kvy = s2 * np.eye(n * Q), np.zeros((M * Q, n * Q))
            for r in range(B.shape[1]):
                Kxx, Kzx = _rbf(Xi, Xi, ls[r], var), _rbf(Z, Xi, ls[r], var)
                for q in range(Q):
                    for p in range(Q):
                        Kyy[q::Q, p::Q] += B[q, r] * B[p, r] * Kxx
                        Kvy[q::Q, p::Q] += B[q, r] * B[p, r] * Kzx
            blocks.append(Kvy @ np.linalg.inv(Kyy) @ Kvy.T)
        A = block_diag(*blocks)
        ops.append(A / np.trace(A))
    np.testing.assert_allclose(rho, _brute_rho(ops), rtol=1e-6, atol=1e-14)


def test_ilmm_clients_with_block_structure_cluster(ilmm_fit):
    from sklearn.metrics import adjusted_rand_score

    m, X, groups, block = ilmm_fit
    labels = cluster_clients(client_dissimilarity(m, X, groups), 2, random_state=0)
    assert adjusted_rand_score(block, labels) == 1.0


def test_classifier_names_X_for_overflowing_curves():
    # found by tests/test_properties.py: before, the inner regressor's message blamed "y"
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (6, 3))
    X[:, 0] *= 1e300
    with pytest.raises(ValueError, match="X is out of range"):
        PFedHGPClassifier().fit(X, np.arange(6) % 2)


@pytest.mark.parametrize("method", ["predict", "predict_proba", "predict_log_likelihood"])
def test_classifier_refuses_overflowing_curves_at_predict(method):
    # fit refuses such X; predict gave NaN probabilities and class 0
    X, y, t = make_press_tonnage(n_cycles=(4, 4), n_points=8, random_state=0)
    clf = PFedHGPClassifier(input_grid=t).fit(X, y)
    with pytest.raises(ValueError, match="X is out of range"):
        getattr(clf, method)(X[:2] * 1e200)


@pytest.mark.parametrize("make_grid, match", [
    (lambda t: t * 1e200, "input_grid is out of range"),  # was blamed on X
    (lambda t: ["a"] * t.size, "input_grid must be an array of real numbers"),
    (lambda t: t + 1j, "input_grid must be an array of real numbers"),
])
def test_classifier_names_a_bad_input_grid(make_grid, match):
    X, y, t = make_press_tonnage(n_cycles=(4, 4), n_points=8, random_state=0)
    with pytest.raises(ValueError, match=match):
        PFedHGPClassifier(input_grid=make_grid(t)).fit(X, y)
