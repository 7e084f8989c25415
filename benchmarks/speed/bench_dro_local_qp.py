"""Which QP solver for the exact local solve of DP-Fed DRO (Proposition 1)?

The non-private client problem is an LP plus the diagonal proximal term
``(rho/2)||M - center||^2``. This script builds seeded random local problems
(varied N, P, K, rho, centers, radius, kappa, "l1"/"linf" feature norms and
feature scales) and the local problems of real grouped data (iris, wine,
penguins if ``palmerpenguins`` is installed, carData WVS and Chile; features
standardized, and also in raw units), solves each with every candidate and
reports per solver: failures (an exception, a non-optimal status, or a
constraint violation above 1e-6 x (1 + |b|)), the largest objective gap to the
best feasible objective over the solvers, relative to max(1, |best|), and the
median / max time.

Candidates: HiGHS's QP solver (``highspy``), Clarabel, OSQP (polished, tight
tolerances), PIQP, and the previous solver (tangent cuts of the quadratic,
re-solved as LPs by HiGHS with warm starts; tol 1e-7, at most 500 LPs).

Run: ``python benchmarks/speed/bench_dro_local_qp.py [--n-random 1000] [--seed 0]``
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.preprocessing import StandardScaler

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]  # this checkout's skfed, then _dro_real_data

from _dro_real_data import available, load_grouped  # noqa: E402

from skfed.linear_model._admm import cs_dro_local_lp, solve_prox_qp  # noqa: E402

TIME_LIMIT = 2.0  # seconds per solve; slower counts as a failure


def _lower_upper(bounds):
    lo = np.array([-np.inf if b[0] is None else b[0] for b in bounds], float)
    up = np.array([np.inf if b[1] is None else b[1] for b in bounds], float)
    return lo, up


def _qp_data(prob):
    """``P`` (diagonal), ``q`` of ``0.5 z'Pz + q'z`` equal to the objective up to a constant."""
    c, quad, center, rho = prob["c"], prob["quad"], prob["center"], prob["rho"]
    n = c.size
    d = np.zeros(n)
    d[quad] = rho
    q = c.astype(float).copy()
    q[quad] -= rho * center
    return sparse.diags(d).tocsc(), q


def _highs_lp(c, lo, up, A, b):
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", TIME_LIMIT)
    inf = highspy.kHighsInf
    A = sparse.csc_matrix(A)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = c.size, A.shape[0]
    lp.col_cost_ = c
    lp.col_lower_ = np.where(np.isinf(lo), -inf, lo)
    lp.col_upper_ = np.where(np.isinf(up), inf, up)
    lp.row_lower_ = np.full(A.shape[0], -inf)
    lp.row_upper_ = np.asarray(b, float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = c.size, A.shape[0]
    return h, highspy, lp


def solve_highs(prob):
    P, q = _qp_data(prob)
    lo, up = _lower_upper(prob["bounds"])
    h, highspy, lp = _highs_lp(q, lo, up, prob["A"], prob["b"])
    model = highspy.HighsModel()
    model.lp_ = lp
    d = P.diagonal()
    nz = np.flatnonzero(d)
    hess = highspy.HighsHessian()
    hess.dim_ = q.size
    hess.format_ = highspy.HessianFormat.kTriangular
    hess.start_ = np.searchsorted(nz, np.arange(q.size + 1)).astype(np.int32)
    hess.index_ = nz.astype(np.int32)
    hess.value_ = d[nz]
    model.hessian_ = hess
    h.passModel(model)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(h.modelStatusToString(h.getModelStatus()))
    return np.array(h.getSolution().col_value)


def solve_clarabel(prob):
    import clarabel

    P, q = _qp_data(prob)
    lo, up = _lower_upper(prob["bounds"])
    n = q.size
    rows = [prob["A"].tocsc()]
    rhs = [prob["b"]]
    fin = np.flatnonzero(np.isfinite(lo))
    if fin.size:
        rows.append(sparse.csc_matrix((-np.ones(fin.size), (np.arange(fin.size), fin)),
                                      shape=(fin.size, n)))
        rhs.append(-lo[fin])
    fin = np.flatnonzero(np.isfinite(up))
    if fin.size:
        rows.append(sparse.csc_matrix((np.ones(fin.size), (np.arange(fin.size), fin)),
                                      shape=(fin.size, n)))
        rhs.append(up[fin])
    A = sparse.vstack(rows).tocsc()
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.time_limit = TIME_LIMIT
    solver = clarabel.DefaultSolver(sparse.triu(P).tocsc(), q, A, np.concatenate(rhs),
                                    [clarabel.NonnegativeConeT(A.shape[0])], settings)
    sol = solver.solve()
    if str(sol.status) not in ("Solved", "AlmostSolved"):
        raise RuntimeError(f"clarabel status {sol.status}")
    return np.array(sol.x)


def solve_osqp(prob):
    import osqp

    P, q = _qp_data(prob)
    lo, up = _lower_upper(prob["bounds"])
    n = q.size
    A = sparse.vstack([prob["A"], sparse.eye(n)]).tocsc()
    l = np.concatenate([np.full(prob["b"].size, -np.inf), lo])
    u = np.concatenate([prob["b"], up])
    solver = osqp.OSQP()
    solver.setup(sparse.triu(P).tocsc(), q, A, l, u, verbose=False, eps_abs=1e-8,
                 eps_rel=1e-8, max_iter=200000, polishing=True, time_limit=TIME_LIMIT)
    res = solver.solve()
    if res.info.status_val not in (1, 2):  # solved, solved inaccurate
        raise RuntimeError(f"osqp status {res.info.status}")
    return np.array(res.x)


def solve_piqp(prob):
    """PIQP as skfed uses it (:func:`skfed.linear_model._admm.solve_prox_qp`)."""
    return solve_prox_qp(prob["c"], prob["A"], prob["b"], prob["bounds"], prob["quad"],
                         prob["center"], prob["rho"])


def solve_lp_cuts(prob, tol=1e-7, max_iter=500):
    """The previous solver: tangent cuts of the quadratic, LPs warm-started in HiGHS."""
    c, A_ub, b_ub, bounds = prob["c"], prob["A"], prob["b"], prob["bounds"]
    quad, center, rho = np.asarray(prob["quad"]), prob["center"], prob["rho"]
    n_base, q = c.size, quad.size
    lo, up = _lower_upper(bounds)
    A = sparse.hstack([A_ub, sparse.csr_matrix((A_ub.shape[0], q))])
    h, highspy, lp = _highs_lp(np.concatenate([c, np.ones(q)]), np.concatenate([lo, np.zeros(q)]),
                               np.concatenate([up, np.full(q, np.inf)]), A, b_ub)
    inf = highspy.kHighsInf
    h.passModel(lp)
    t_end = time.perf_counter() + TIME_LIMIT
    tcol = n_base + np.arange(q)

    def add_cuts(a, which):
        k = which.size
        cols = np.column_stack([quad[which], tcol[which]]).ravel()
        vals = np.column_stack([rho * (a[which] - center[which]), -np.ones(k)]).ravel()
        h.addRows(k, np.full(k, -inf), 0.5 * rho * (a[which] ** 2 - center[which] ** 2),
                  2 * k, np.arange(0, 2 * k, 2, dtype=np.int32), cols.astype(np.int32), vals)

    scale = max(1.0, float(np.abs(center).max()))
    for a in (center + scale / rho, center - scale / rho):
        add_cuts(a, np.arange(q))
    for _ in range(max_iter):
        if time.perf_counter() > t_end:
            raise RuntimeError("time limit")
        h.run()
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"LP status {h.modelStatusToString(h.getModelStatus())}")
        z = np.array(h.getSolution().col_value)
        m = z[quad]
        bad = np.flatnonzero(0.5 * rho * (m - center) ** 2 - z[tcol] > tol)
        if bad.size == 0:
            return z[:n_base]
        add_cuts(m, bad)
    raise RuntimeError(f"local QP did not reach tol={tol} in {max_iter} LPs")


SOLVERS = {"highs-qp": solve_highs, "clarabel": solve_clarabel, "osqp": solve_osqp,
           "piqp (skfed)": solve_piqp, "lp-cuts (old)": solve_lp_cuts}


def _problem(X, y, k, *, radius, kappa, dual, center, rho, name):
    c, A, b, bounds, quad, _ = cs_dro_local_lp(X, y, k, radius=radius, kappa=kappa, dual=dual)
    return dict(c=c, A=A.tocsr(), b=b, bounds=bounds, quad=quad, center=center, rho=rho,
                name=name)


def random_problems(n_problems, seed):
    rng = np.random.default_rng(seed)
    for i in range(n_problems):
        n, p, k = int(rng.integers(4, 200)), int(rng.integers(1, 12)), int(rng.integers(2, 7))
        X = rng.standard_normal((n, p)) * 10.0 ** rng.uniform(-2, 3, p)  # feature scales
        y = rng.integers(0, k, n)
        center = rng.standard_normal(k * p) * 10.0 ** rng.uniform(-3, 1) * (rng.random() < 0.8)
        yield _problem(X, y, k, radius=float(rng.choice([0.0, 1e-3, 1e-2, 0.1, 0.5])),
                       kappa=float(10.0 ** rng.uniform(-1, 0.5)),
                       dual=str(rng.choice(["l1", "linf"])), center=center,
                       rho=float(10.0 ** rng.uniform(-3, 1)), name=f"random-{i}")


def real_problems(seed):
    rng = np.random.default_rng(seed)
    for name in available():
        X_raw, y, groups = load_grouped(name)
        _, y = np.unique(y, return_inverse=True)
        k = int(y.max()) + 1
        for units, X in (("std", StandardScaler().fit_transform(X_raw)), ("raw", X_raw)):
            for g in np.unique(groups):
                rows = groups == g
                for rho in (0.01, 0.1, 1.0):
                    for spread in (0.0, 0.5):
                        center = spread * rng.standard_normal(k * X.shape[1])
                        yield _problem(X[rows], y[rows], k, radius=0.01, kappa=0.5,
                                       dual="linf" if spread else "l1", center=center,
                                       rho=rho, name=f"{name}-{units}-{g}")


def objective(prob, z):
    return float(prob["c"] @ z + 0.5 * prob["rho"] * np.sum((z[prob["quad"]] - prob["center"])
                                                            ** 2))


def violation(prob, z):
    lo, up = _lower_upper(prob["bounds"])
    row = np.max((prob["A"] @ z - prob["b"]) / (1.0 + np.abs(prob["b"])), initial=0.0)
    col = max(np.max(lo - z, initial=0.0), np.max(z - up, initial=0.0))
    return max(row, col)


def run(problems, solvers):
    stats = {s: {"fail": 0, "gap": [], "time": []} for s in solvers}
    n = 0
    for prob in problems:
        n += 1
        vals = {}
        for s in solvers:
            t0 = time.perf_counter()
            try:
                z = SOLVERS[s](prob)
                ok = violation(prob, z) <= 1e-6
            except Exception:  # noqa: BLE001 - a failure is what we count
                ok, z = False, None
            stats[s]["time"].append(time.perf_counter() - t0)
            if ok:
                vals[s] = objective(prob, z)
            else:
                stats[s]["fail"] += 1
        if vals:
            best = min(vals.values())
            for s, v in vals.items():
                stats[s]["gap"].append((v - best) / max(1.0, abs(best)))
    return n, stats


def table(title, n, stats):
    lines = [f"{title}: {n} problems", "",
             "| solver | failures | max rel. objective gap | time median (ms) | time max (ms) |",
             "|---|---|---|---|---|"]
    for s, st in stats.items():
        t = np.array(st["time"]) * 1e3
        gap = max(st["gap"]) if st["gap"] else float("nan")
        lines.append(f"| {s} | {st['fail']} | {gap:.1e} | {np.median(t):.1f} | {t.max():.0f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-random", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solvers", nargs="*", default=list(SOLVERS))
    args = parser.parse_args()
    n, stats = run(random_problems(args.n_random, args.seed), args.solvers)
    print(table("Random local problems", n, stats), flush=True)
    n, stats = run(real_problems(args.seed), args.solvers)
    print()
    print(table("Real-data local problems", n, stats), flush=True)


if __name__ == "__main__":
    main()
