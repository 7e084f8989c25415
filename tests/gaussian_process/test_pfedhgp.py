"""PFedHGPRegressor: training, prediction, recovery, federation contract, errors."""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C

from skfed import PFedHGPRegressor
from skfed.datasets import make_hierarchical_gp

# the old defaults (raw inputs and targets): the pinned behaviour of these tests
SMALL = dict(inference="variational",
             n_inducing_global=8, n_inducing_local=5, random_state=0, normalize_y=False,
             normalize_X=False)


def variational(**params):
    """``PFedHGPRegressor(inference="variational", **params)``: the fit these tests pin."""
    return PFedHGPRegressor(inference="variational", **params)


@pytest.fixture(scope="module")
def data():
    d = make_hierarchical_gp(n_clients=3, n_outputs=None, n_train=25, n_test=20,
                             local_lengthscales=(1.0,), local_scales=(0.5,), noise=0.1,
                             random_state=0)
    return d


@pytest.fixture(scope="module")
def fitted(data):
    return PFedHGPRegressor(optimizer="cavi", n_rounds=8, **SMALL).fit(
        data.X_train, data.y_train, groups=data.groups_train)


def test_cavi_reaches_a_higher_elbo_in_fewer_rounds(data):
    paper = PFedHGPRegressor(optimizer="paper", n_rounds=20, **SMALL).fit(
        data.X_train, data.y_train, groups=data.groups_train)
    cavi = PFedHGPRegressor(optimizer="cavi", n_rounds=5, **SMALL).fit(
        data.X_train, data.y_train, groups=data.groups_train)
    assert paper.elbo_.shape == (20,) and cavi.elbo_.shape == (5,)
    assert np.all(np.isfinite(paper.elbo_))
    assert cavi.elbo_.max() >= paper.elbo_.max()
    # the ELBO rises over the paper protocol's rounds
    assert paper.elbo_[-1] > paper.elbo_[0]


def test_single_client_global_only_matches_exact_gp():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, (25, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=25)
    gpr = GaussianProcessRegressor(C(1.0) * RBF(2.0) + WhiteKernel(0.01), random_state=0).fit(X, y)
    model = PFedHGPRegressor(inference="variational",
                             components=("global",), optimizer="cavi", init_inducing_global=X,
                             learn_inducing=False, n_rounds=50, jitter=1e-8, normalize_y=False,
                             normalize_X=False).fit(X, y)
    Xt = np.linspace(0, 10, 50)[:, None]
    mu0, sd0 = gpr.predict(Xt, return_std=True)
    mu, sd = model.predict(Xt, return_std=True)
    np.testing.assert_allclose(mu, mu0, atol=0.05)
    np.testing.assert_allclose(sd, sd0, rtol=0.05)
    assert model.noise_variance_ == pytest.approx(gpr.kernel_.k2.noise_level, rel=0.1)
    # the bound stays below the exact evidence the exact GP maximized
    assert model.elbo_.max() <= gpr.log_marginal_likelihood_value_ + 1e-6


def known_hierarchy():
    return make_hierarchical_gp(n_clients=8, n_outputs=None, n_train=60, n_test=10,
                                global_lengthscales=(2.0,), local_lengthscales=(0.8,),
                                local_scales=(0.5,), noise=0.1, random_state=1)


# the paper's model: raw units and a zero prior mean (the hierarchy has no linear trend)
HIERARCHY_FIT = dict(inference="variational",
                     optimizer="cavi", n_inducing_global=20, n_inducing_local=15, n_rounds=30,
                     random_state=0, normalize_y=False, normalize_X=False,
                     mean_function="constant")


def test_known_hierarchy_is_recovered():
    d = known_hierarchy()
    # the blockwise update pins the numbers below: the joint one reaches a higher ELBO
    # by switching the deviation off (phi -> 0), a split the data do not identify
    model = PFedHGPRegressor(mean_update="blockwise", **HIERARCHY_FIT).fit(
        d.X_train, d.y_train, groups=d.groups_train)
    assert 0.3 < model.phi_ < 5.0
    assert 1.0 < model.lengthscale_global_[0] < 6.0
    assert 0.4 < np.median(model.lengthscales_local_) < 1.6
    assert 0.005 < model.noise_variance_ < 0.02
    pred = model.predict(d.X_test, groups=d.groups_test)
    assert np.sqrt(np.mean((pred - d.y_test_clean) ** 2)) < 0.15


def test_joint_mean_update_reaches_a_higher_elbo_and_predicts_as_well():
    d = known_hierarchy()
    fits = {mu: PFedHGPRegressor(mean_update=mu, **HIERARCHY_FIT).fit(
        d.X_train, d.y_train, groups=d.groups_train) for mu in ("blockwise", "joint")}
    assert fits["joint"].elbo_[-1] > fits["blockwise"].elbo_[-1] + 10
    for m in fits.values():
        pred = m.predict(d.X_test, groups=d.groups_test)
        assert np.sqrt(np.mean((pred - d.y_test_clean) ** 2)) < 0.15


def test_predictive_distribution(fitted, data):
    Xt, gt = data.X_test, data.groups_test
    mean, std = fitted.predict(Xt, groups=gt, return_std=True)
    mean2, cov = fitted.predict(Xt, groups=gt, return_cov=True)
    np.testing.assert_allclose(mean, mean2)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-8)
    assert np.all(np.linalg.eigvalsh(cov) > 0)
    # population prediction adds the deviation prior phi * k_g: wider than a client's
    pop_mean, pop_std = fitted.predict(Xt, return_std=True)
    assert pop_std.mean() > std.mean()
    assert fitted.phi_ > 0
    # unknown clients follow unknown_client
    np.testing.assert_allclose(fitted.predict(Xt[:3], groups=[99] * 3), pop_mean[:3])
    with pytest.raises(ValueError, match="not seen in fit"):
        fitted.set_params(unknown_client="error").predict(Xt[:3], groups=[99] * 3)
    fitted.set_params(unknown_client="global")
    with pytest.raises(RuntimeError, match="At most one"):
        fitted.predict(Xt, return_std=True, return_cov=True)


def test_sample_y_matches_predictive(fitted, data):
    Xt, gt = data.X_test[:5], data.groups_test[:5]
    draws = fitted.sample_y(Xt, n_samples=4000, random_state=0, groups=gt)
    assert draws.shape == (5, 4000)
    mean, std = fitted.predict(Xt, groups=gt, return_std=True)
    np.testing.assert_allclose(draws.mean(1), mean, atol=4 * std.max() / np.sqrt(4000) + 1e-3)
    np.testing.assert_allclose(draws.std(1), std, rtol=0.1)


def test_fitted_attributes_and_ledger(fitted, data):
    assert fitted.clients_.tolist() == [0, 1, 2]
    assert fitted.lengthscales_local_.shape == (3, 1)
    assert len(fitted.inducing_local_) == 3 and fitted.inducing_global_.shape == (8, 1)
    assert fitted.jitter_ >= 1e-6
    ledger = fitted.communication_
    n_rows = {int(g): int(np.sum(data.groups_train == g)) for g in range(3)}
    up = [r for r in ledger.records if r.direction == "up"]
    assert len(up) == 3 * (1 + 1 + 8)  # set-up exchange, set-up round, training rounds
    for r in up:
        # nothing row-shaped crosses: every array is sized by M, d or a scalar
        for shape in r.shapes:
            assert not shape or shape[0] != n_rows[r.client], (r.names, shape)
        assert "md" not in r.names and "mu" not in r.names


def test_components_ablations(data):
    X, y, g = data.X_train, data.y_train, data.groups_train
    for comps in [("global", "local"), ("global", "deviation"), ("global",), ("local",)]:
        for opt in ("cavi", "paper"):
            m = PFedHGPRegressor(components=comps, optimizer=opt, n_rounds=2, local_steps=3,
                                 **SMALL)
            m.fit(X, y, groups=g)
            mean, std = m.predict(data.X_test, groups=data.groups_test, return_std=True)
            assert np.all(np.isfinite(mean)) and np.all(std > 0)
            assert (m.phi_ > 0) == ("deviation" in comps)
            assert (m.lengthscales_local_ is None) == ("local" not in comps)


@pytest.mark.parametrize("kernel", ["matern32", "matern52"])
def test_other_kernels_and_ard(kernel):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (60, 2))
    y = np.sin(4 * X[:, 0]) + 0.05 * rng.normal(size=60)
    m = PFedHGPRegressor(kernel=kernel, ard=True, optimizer="cavi", n_rounds=5,
                         **{**SMALL, "normalize_y": True}).fit(X, y, groups=np.repeat([0, 1], 30))
    assert m.lengthscale_global_.shape == (2,)
    assert m.score(X, y, groups=np.repeat([0, 1], 30)) > 0.8


def test_same_result_for_any_n_jobs(data):
    X, y, g = data.X_train, data.y_train, data.groups_train
    a = PFedHGPRegressor(optimizer="cavi", n_rounds=3, n_jobs=1, **SMALL).fit(X, y, groups=g)
    b = PFedHGPRegressor(optimizer="cavi", n_rounds=3, n_jobs=2, **SMALL).fit(X, y, groups=g)
    np.testing.assert_array_equal(a.predict(X, groups=g), b.predict(X, groups=g))
    np.testing.assert_array_equal(a.elbo_, b.elbo_)


@pytest.mark.parametrize("optimizer", ["cavi", "paper"])
@pytest.mark.parametrize("n_outputs", [None, 2])
def test_repeated_fits_in_one_process_are_bit_identical(optimizer, n_outputs):
    # Regression: numba kernels compiled with fastmath "reassoc" summed in an
    # order that depended on where the arrays lay in memory (LLVM's runtime
    # overlap check picks the vector or the scalar loop), so identical fits in
    # one process differed in the last bits. Allocations between the fits move
    # the heap.
    d = make_hierarchical_gp(n_clients=3, n_outputs=n_outputs, n_train=25, n_test=15,
                             local_lengthscales=(1.0,) if n_outputs is None else (1.0, 1.5),
                             local_scales=(0.5,) if n_outputs is None else (0.5, 0.4),
                             noise=0.1, random_state=0)
    rng = np.random.default_rng(0)
    junk, fits = [], []
    for n_jobs in (1, 2, 1, 2, 1):
        junk.append([np.ones(int(s)) for s in rng.integers(1, 100, 30)])
        del junk[0][::2]
        m = PFedHGPRegressor(optimizer=optimizer, n_rounds=3, n_jobs=n_jobs, **SMALL).fit(
            d.X_train, d.y_train, groups=d.groups_train)
        fits.append((m.elbo_, m.predict(d.X_test, groups=d.groups_test),
                     m.noise_variance_, m.lengthscale_global_))
    for other in fits[1:]:
        for a, b in zip(fits[0], other):
            np.testing.assert_array_equal(a, b)


def test_duplicate_inputs_and_tiny_noise_do_not_crash():
    rng = np.random.default_rng(0)
    X = np.repeat(rng.uniform(0, 5, (10, 1)), 4, axis=0)  # every input four times
    y = np.sin(X[:, 0]) + 1e-8 * rng.normal(size=40)
    groups = np.tile([0, 1], 20)
    for opt in ("cavi", "paper"):
        m = PFedHGPRegressor(inference="variational",
                             optimizer=opt, n_inducing_global=10, n_inducing_local=4,
                             init_noise=1e-10, n_rounds=3, local_steps=5, random_state=0)
        m.fit(X, y, groups=groups)
        assert np.all(np.isfinite(m.predict(X, groups=groups)))
        # the global grid of 10 points is fine; duplicates in X itself never enter a Cholesky
        assert np.isfinite(m.elbo_).all()


def test_bad_input_errors():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (30, 1))
    y = rng.normal(size=30)
    groups = np.repeat([0, 1, 2], 10)
    # small clients are fitted with fewer local inducing inputs, with one warning
    with pytest.warns(UserWarning,
                      match=r"n_inducing_local=12 .* 3 client.*\{0: 10, 1: 10, 2: 10\}"):
        variational(n_inducing_local=12, n_rounds=1).fit(X, y, groups=groups)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        PFedHGPRegressor(inference="variational", n_inducing_local=3).fit(Xn, y, groups=groups)
    for name in ("init_lengthscale_global", "init_noise", "init_phi", "init_variance_local"):
        with pytest.raises(ValueError, match=name):
            variational(n_inducing_local=3, **{name: 0.0}).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="components"):
        variational(components=("global", "bogus")).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="components"):
        variational(components=("deviation",)).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="optimizer"):
        variational(optimizer="sgd", n_inducing_local=3).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="mean_update"):
        variational(mean_update="exact", n_inducing_local=3).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="kernel"):
        variational(kernel="linear", n_inducing_local=3).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="init_inducing_global"):
        PFedHGPRegressor(inference="variational", init_inducing_global=np.zeros((3, 2)),
                         n_inducing_local=3).fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="y must be"):
        variational(n_inducing_local=3).fit(X, np.ones((30, 3, 2)), groups=groups)
    with pytest.raises(ValueError, match="y must have"):
        variational(n_inducing_local=3).fit(X, np.ones((30, 0)), groups=groups)
    model = PFedHGPRegressor(inference="variational",
                             n_inducing_local=3, n_inducing_global=5, n_rounds=1, local_steps=1)
    model.fit(X, y, groups=groups)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((2, 3)))


def test_site_checks_of_the_federated_contract():
    """What a site checks on its own rows, and the set-up summary (see also the Flower tests)."""
    X = np.repeat(np.arange(4.0)[:, None], 3, axis=0)  # 4 distinct rows
    model = PFedHGPRegressor(inference="variational", n_inducing_local=5)
    model._check_params()  # fit runs it first (FederatedEstimator)
    with pytest.warns(UserWarning, match="n_inducing_local=5 is more than the 4 distinct rows"):
        model._validate_site_data(X, np.zeros(12), reset=True)
    model = PFedHGPRegressor(inference="variational", n_inducing_local=4)
    model._check_params()
    X_ok, y_ok = model._validate_site_data(X, np.zeros((12, 1)), reset=True)
    assert y_ok.shape == (12,)  # a single column is the scalar model
    summaries = [{"n_outputs": np.int64(1)}, {"n_outputs": np.int64(3)}]
    with pytest.raises(ValueError, match="disagree on the number of outputs"):
        model._combine_site_summaries(["a", "b"], summaries)
    with pytest.raises(ValueError, match="population_local"):
        variational(population_local="mean", n_inducing_local=4).fit(X, np.zeros(12))


def test_single_client_population_is_that_client(data):
    k = data.groups_train == 0
    m = PFedHGPRegressor(optimizer="cavi", n_rounds=3, **SMALL).fit(
        data.X_train[k], data.y_train[k])
    np.testing.assert_array_equal(m.predict(data.X_test[:5]),
                                  m.predict(data.X_test[:5], groups=[0] * 5))


def test_pfedgp_baseline_averages_kernels(data):
    from skfed.gaussian_process import PFedGPRegressor

    m = PFedGPRegressor(n_inducing=5, optimizer="cavi", n_rounds=3, random_state=0)
    m.fit(data.X_train, data.y_train, groups=data.groups_train)
    assert m.phi_ == 0.0 and m.inducing_global_ is None
    # the shared kernel crossed; the clients' q(u) did not
    up = [r for r in m.communication_.records if r.direction == "up" and r.round > 0]
    assert all("ls_l" in r.names and "mu" not in r.names for r in up)
    assert np.all(np.isfinite(m.predict(data.X_test, groups=data.groups_test)))
    with pytest.warns(UserWarning, match="n_inducing=40 is more than the distinct rows of 3"):
        PFedGPRegressor(n_inducing=40, optimizer="cavi", n_rounds=1).fit(
            data.X_train, data.y_train, groups=data.groups_train)


def test_paper_messages_are_gradients_of_the_global_block(data):
    m = PFedHGPRegressor(optimizer="paper", n_rounds=2, local_steps=3, **SMALL)
    m.fit(data.X_train, data.y_train, groups=data.groups_train)
    up = [r for r in m.communication_.records if r.direction == "up" and r.round > 0]
    names = set(up[0].names)
    assert names == {"value", "jitter", "g_noise", "g_ls_g", "g_var_g", "g_Zg", "g_phi", "g_mg",
                     "g_Lg"}
    shapes = dict(zip(up[0].names, up[0].shapes))
    assert shapes["g_Lg"] == (8 * 9 // 2,) and shapes["g_Zg"] == (8, 1)


def test_basis_cache_reuses_only_for_equal_parameters_and_is_not_pickled():
    import pickle

    from skfed.gaussian_process._steps import BasisCache

    cache, built = BasisCache(), []

    def build():
        built.append(1)
        return object()

    p = [np.array([0.5, 1.0]), np.array(2.0)]
    a = cache.get("local", p, build)
    p[0][0] = 0.7  # the caller mutating its array must not alias the stored key
    assert cache.get("local", [np.array([0.5, 1.0]), np.array(2.0)], build) is a
    assert cache.get("local", [np.array([0.5, 1.0 + 1e-15]), np.array(2.0)], build) is not a
    assert len(built) == 2
    assert pickle.loads(pickle.dumps(cache))._store == {}


def test_broadcast_globals_are_unpacked_once_per_broadcast_and_read_only():
    import pickle

    model = PFedHGPRegressor(inference="variational",
                             n_inducing_global=4, n_inducing_local=3, normalize_X=False)
    model._check_params()
    steps = model._steps_algorithm(1)
    _, broadcast = steps.server_step(
        {"phase": 0}, {0: {"n": np.int64(5), "sum_y": 1.0, "sum_y2": 2.0,
                           "sum_x": np.full(1, 2.5), "sum_x2": np.full(1, 2.0)}},
        np.random.default_rng(0))
    g = steps.broadcast_globals(broadcast)
    assert steps.broadcast_globals(broadcast) is g  # the same object: unpacked once
    assert all(not v.flags.writeable for v in g.values())  # shared by every client
    np.testing.assert_array_equal(g["Lg"], np.eye(4))
    assert steps.broadcast_globals(dict(broadcast)) is not g  # a new broadcast
    assert "_last_broadcast" not in pickle.loads(pickle.dumps(steps)).__dict__


@pytest.mark.parametrize("multioutput", [False, True])
def test_cavi_clients_send_the_kernel_gradient_only_when_the_server_uses_it(monkeypatch,
                                                                            multioutput):
    # the broadcast says whether the next server step moves the global kernel;
    # clients skip the adjoint otherwise: same fit, fewer bytes up
    import skfed.gaussian_process._optimizers as optimizers

    rng = np.random.default_rng(3)
    X = rng.uniform(0, 5, (90, 1))
    y = np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 0])]) + 0.1 * rng.normal(size=(90, 2))
    y = y if multioutput else y[:, 0]
    groups = np.repeat([0, 1, 2], 30)
    kw = dict(optimizer="cavi", n_rounds=6, n_inducing_global=6, n_inducing_local=4, random_state=0)
    sent = []
    original = optimizers.wants_kernel_grad

    def spy(broadcast):
        sent.append(original(broadcast))
        return original(broadcast)

    monkeypatch.setattr(optimizers, "wants_kernel_grad", spy)
    skipping = PFedHGPRegressor(inference="variational", **kw).fit(X, y, groups=groups)
    # rounds 1..6 (3 clients each): the kernel moves after rounds 2 and 4 only
    assert sent == [False] * 3 + [True] * 3 + [False] * 3 + [True] * 3 + [False] * 6
    monkeypatch.setattr(optimizers, "wants_kernel_grad", lambda broadcast: True)
    always = PFedHGPRegressor(inference="variational", **kw).fit(X, y, groups=groups)
    np.testing.assert_array_equal(skipping.elbo_, always.elbo_)
    np.testing.assert_array_equal(skipping.predict(X, groups=groups),
                                  always.predict(X, groups=groups))
    assert skipping.communication_.bytes_up < always.communication_.bytes_up


def test_defaults_fit_small_clients_with_one_warning():
    rng = np.random.default_rng(0)
    X = np.r_[rng.uniform(0, 10, (60, 1)), [[3.0]], [[4.0], [5.0]]]
    y = 100 + np.sin(X[:, 0]) + 0.05 * rng.normal(size=63)
    groups = np.r_[np.repeat([0, 1], 30), 10, 11, 11]
    with pytest.warns(UserWarning, match=r"2 client.*\{10: 1, 11: 2\}") as record:
        m = PFedHGPRegressor(inference="variational", random_state=0).fit(X, y, groups=groups)
    assert len([w for w in record if "n_inducing_local" in str(w.message)]) == 1
    assert [Z.shape[0] for Z in m.inducing_local_] == [25, 25, 1, 2]
    mean, std = m.predict(X[-3:], groups=groups[-3:], return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
    # normalize_y (default): the population prediction is on the scale of y
    assert abs(np.mean(m.predict(X)) - 100) < 1.0


def test_normalize_X_is_affine_equivariant_and_sends_no_range():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 10, (60, 2))
    y = np.sin(X[:, 0]) + 0.1 * X[:, 1] + 0.05 * rng.normal(size=60)
    g = np.repeat([0, 1, 2], 20)
    a = PFedHGPRegressor(inference="variational", n_rounds=4, random_state=0).fit(X, y, groups=g)
    shift, scale = np.array([1e3, -5.0]), np.array([100.0, 0.01])
    b = variational(n_rounds=4, random_state=0).fit(X * scale + shift, y, groups=g)
    np.testing.assert_allclose(b.predict(X * scale + shift, groups=g), a.predict(X, groups=g),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.inducing_global_, a.inducing_global_ * scale + shift,
                               rtol=1e-6)
    setup = [r for r in a.communication_.records if r.direction == "up" and r.round == 0]
    assert setup and all("sum_x" in r.names and "x_min" not in r.names for r in setup)


def test_input_scaling_ignores_one_clients_outlier():
    d = make_hierarchical_gp(n_clients=4, n_outputs=None, n_train=40, n_test=20,
                             random_state=0)
    X = d.X_train.copy()
    X[0, 0] = 1e6  # one row of client 0
    clean = variational(n_rounds=5, random_state=0).fit(d.X_train, d.y_train,
                                                               groups=d.groups_train)
    dirty = PFedHGPRegressor(inference="variational", n_rounds=5, random_state=0).fit(X, d.y_train,
                                                               groups=d.groups_train)
    assert dirty.x_std_[0] < 2 * clean.x_std_[0]

    def rmse(m):
        return np.sqrt(np.mean((m.predict(d.X_test, groups=d.groups_test) - d.y_test) ** 2))

    assert rmse(dirty) < 1.5 * rmse(clean) < d.y_test.std()


def test_weighted_median_is_per_column_with_several_features():
    from skfed.gaussian_process._setup import weighted_median

    rng = np.random.default_rng(0)
    values = rng.normal(size=(9, 4)) * [1.0, 10.0, 100.0, 0.1]
    weights = np.ones(9)
    np.testing.assert_allclose(weighted_median(values, weights), np.median(values, axis=0))
    # integer row counts as weights, a heavy client pulls its column's median
    w = np.array([1, 1, 1, 1, 100, 1, 1, 1, 1])
    np.testing.assert_array_equal(weighted_median(values, w), values[4])
