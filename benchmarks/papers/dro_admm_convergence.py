"""Does non-private Fed DRO (Algorithm 1, exact local solves) converge from M = 0?

Protocol: the DP-Fed DRO paper's UCI split (``skfed.benchmark._dp_fed_dro._uci_split``:
80/20, min-max + l2, Dirichlet(0.5) over 4 clients, 10% flipped labels), seeds given on
the command line, kappa and r given (default: the paper grid's kappa=0.5, r=1e-3).
For each rho, Algorithm 1 is run for ``--rounds`` rounds by the estimator's own local
solver and consensus rule (replicated here so every round can be inspected; the script
checks that its round-T model equals ``DPFedDROClassifier(epsilon=None, ...)``'s), and
each round reports

* the relative objective gap ``(F(M^t) - F*) / F*`` of the consensus model, where
  ``F(M) = sum_g alpha_g min_{lambda_g >= phi(M)} [lambda_g r + mean_n L_n(M, lambda_g)]``
  is the federated DRO objective (paper eq. of Proposition 1 summed over clients) and
  ``F*`` its optimum, solved as one LP with a shared ``M``;
* the primal residual ``sum_g alpha_g ||M_g^t - M^t||_F`` and the dual residual
  ``rho ||M^t - M^{t-1}||_F`` (Boyd et al.'s stopping quantities);
* test macro-F1 of ``M^t``.

Criterion for "converged": relative objective gap <= 1e-2 and test macro-F1 equal to
that of the LP optimum ``M*`` (the centralized-equivalent federated solution).

Run: ``python benchmarks/papers/dro_admm_convergence.py --datasets iris wine --seeds 0 1``
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.metrics import f1_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from skfed.benchmark._dp_fed_dro import _uci_split  # noqa: E402
from skfed.linear_model import DPFedDROClassifier  # noqa: E402
from skfed.linear_model._admm import (  # noqa: E402
    cs_dro_local_lp,
    phi,
    solve_cs_dro_local,
    solve_prox_qp,
)

DUAL = "linf"  # feature_norm="l1", the benchmark's


def client_objective(X, y, coef, radius, kappa):
    """``min_{lambda >= phi(M)} lambda r + mean_n L_n(M, lambda)`` (exact: the function is
    convex piecewise linear in lambda, so its minimum is at phi(M) or at a breakpoint)."""
    scores = X @ coef.T  # (n, K)
    n, k = scores.shape
    # l_CS(M; x, y') = max_c [1{c != y'} + s_c] - s_{y'}
    margins = scores[:, None, :] + 1.0 - np.eye(k)[None]  # (n, y', c)
    l_cs = margins.max(axis=2) - scores  # (n, y')
    own = l_cs[np.arange(n), y]
    other = l_cs.copy()
    other[np.arange(n), y] = -np.inf
    other = other.max(axis=1)
    lo = phi(coef, DUAL)
    cand = np.concatenate([[lo], (other - own) / kappa])
    cand = cand[cand >= lo]
    vals = [lam * radius + np.maximum(own, other - kappa * lam).mean() for lam in cand]
    return float(min(vals))


def federated_objective(parts, coef, alpha, radius, kappa):
    return sum(a * client_objective(X, y, coef, radius, kappa) for a, (X, y) in zip(alpha, parts))


def federated_optimum(parts, alpha, n_classes, radius, kappa):
    """``min_M F(M)``: one LP, shared M, per-client lambda_g, s and auxiliaries."""
    kp = n_classes * parts[0][0].shape[1]
    cs, blocks, bs, bounds = [], [], [], []
    offset = kp
    for a, (X, y) in zip(alpha, parts):
        c, A, b, bnd, _, _ = cs_dro_local_lp(X, y, n_classes, radius=radius, kappa=kappa,
                                             dual=DUAL)
        n_own = c.size - kp
        A = sparse.csr_matrix(A)
        shared, own = A[:, :kp], A[:, kp:]
        blocks.append((shared, own, offset))
        cs.append(a * c[kp:])
        bs.append(b)
        bounds.append(bnd[kp:])
        offset += n_own
    rows = []
    for shared, own, off in blocks:
        pad_left = sparse.csr_matrix((own.shape[0], off - kp))
        pad_right = sparse.csr_matrix((own.shape[0], offset - off - own.shape[1]))
        rows.append(sparse.hstack([shared, pad_left, own, pad_right]))
    A = sparse.vstack(rows).tocsr()
    c = np.concatenate([np.zeros(kp)] + cs)
    bnd = [(None, None)] * kp + [x for b in bounds for x in b]
    z = solve_prox_qp(c, A, np.concatenate(bs), bnd, np.arange(kp), np.zeros(kp), 0.0)
    return z[:kp].reshape(n_classes, -1)


def run_admm(parts, alpha, n_classes, radius, kappa, rho, n_rounds):
    """Algorithm 1 as in ``DPFedDROAlgorithm`` (exact local QPs, scaled duals)."""
    shape = (n_classes, parts[0][0].shape[1])
    M = np.zeros(shape)
    coefs = [np.zeros(shape) for _ in parts]
    mus = [np.zeros(shape) for _ in parts]
    for t in range(n_rounds):
        if t > 0:
            mus = [mu + c - M for mu, c in zip(mus, coefs)]
        coefs = [solve_cs_dro_local(X, y, n_classes, M - mu, radius=radius, kappa=kappa,
                                    rho=rho, dual=DUAL)[0] for (X, y), mu in zip(parts, mus)]
        M_new = sum(a * (c + mu) for a, c, mu in zip(alpha, coefs, mus))
        primal = sum(a * np.linalg.norm(c - M_new) for a, c in zip(alpha, coefs))
        dual = rho * np.linalg.norm(M_new - M)
        M = M_new
        yield t + 1, M, primal, dual


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="*", default=["iris", "wine"])
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    parser.add_argument("--rhos", nargs="*", type=float, default=[0.001, 0.01, 0.1, 0.5])
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--kappa", type=float, default=0.5)
    parser.add_argument("--radius", type=float, default=1e-3)
    parser.add_argument("--report", nargs="*", type=int, default=[10, 25, 50, 100, 150])
    args = parser.parse_args()
    print(f"kappa={args.kappa} r={args.radius}; per round t: rel. objective gap, primal "
          "residual, dual residual, test macro-F1")
    for name in args.datasets:
        for seed in args.seeds:
            X, y, groups, X_te, y_te = _uci_split(name, seed)
            labels = np.unique(groups)
            parts = [(X[groups == g], y[groups == g]) for g in labels]
            alpha = np.full(len(parts), 1.0 / len(parts))
            k = np.unique(y).size
            star = federated_optimum(parts, alpha, k, args.radius, args.kappa)
            f_star = federated_objective(parts, star, alpha, args.radius, args.kappa)
            f1_star = f1_score(y_te, np.argmax(X_te @ star.T, axis=1), average="macro")
            print(f"{name} seed {seed}: F* = {f_star:.4f}, ||M*||_F = "
                  f"{np.linalg.norm(star):.1f}, test macro-F1 of M* = {f1_star:.3f}")
            for rho in args.rhos:
                t0 = time.perf_counter()
                cells = []
                for t, M, primal, dual in run_admm(parts, alpha, k, args.radius, args.kappa,
                                                   rho, args.rounds):
                    if t == 50:  # the replica is the estimator's Algorithm 1
                        est = DPFedDROClassifier(
                            epsilon=None, standardize=False, n_rounds=50, rho=rho,
                            feature_norm="l1", fit_intercept=False, kappa=args.kappa,
                            radius=args.radius).fit(X, y, groups=groups)
                        assert np.allclose(est.coef_, M, atol=1e-5), "replica differs"
                    if t in args.report:
                        gap = (federated_objective(parts, M, alpha, args.radius, args.kappa)
                               - f_star) / f_star
                        f1 = f1_score(y_te, np.argmax(X_te @ M.T, axis=1), average="macro")
                        cells.append(f"T={t}: {gap:.3f} {primal:.2g} {dual:.2g} {f1:.3f}")
                print(f"  rho={rho:g} ({time.perf_counter() - t0:.0f} s): " + " | ".join(cells),
                      flush=True)


if __name__ == "__main__":
    main()
