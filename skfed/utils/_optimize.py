"""A bounded L-BFGS driven from outside: the caller evaluates, the optimizer proposes.

A federated server cannot hand scipy a callback: each evaluation of the
objective is a round of messages. :class:`AskTellLBFGS` inverts the control
(reverse communication): :meth:`ask` gives the point to evaluate next,
:meth:`tell` takes its value and gradient. Steps are projected on the box
bounds; the step length is found by backtracking on the Armijo condition
along the projected path (Nocedal & Wright, *Numerical Optimization*,
Algorithms 7.4 and 3.1; Bertsekas' projected variant for the bounds).
"""

import numpy as np

__all__ = ["AskTellLBFGS"]


class AskTellLBFGS:
    """Minimize a smooth function by projected L-BFGS, one evaluation at a time.

    Parameters
    ----------
    x0 : ndarray of shape (n,)
        Start (projected on the bounds).
    bounds : ndarray of shape (n, 2) or None
        Lower and upper bound of every coordinate.
    memory : int, default=10
        Pairs of steps and gradient changes kept.
    max_iter : int, default=500
        Accepted steps at most.
    ftol, gtol : float
        Stop when the decrease of an accepted step is at most ``ftol * max(|f|, 1)``
        or the projected gradient's largest entry is at most ``gtol``.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.utils._optimize import AskTellLBFGS
    >>> opt = AskTellLBFGS(np.array([3.0, -2.0]))
    >>> while not opt.done:
    ...     x = opt.ask()
    ...     opt.tell(float(x @ x), 2 * x)
    >>> np.round(opt.x, 6).tolist()
    [0.0, 0.0]
    """

    #: Armijo constant and backtracking factor
    C1 = 1e-4
    SHRINK = 0.5
    MAX_BACKTRACKS = 30

    def __init__(self, x0, bounds=None, memory=10, max_iter=500, ftol=1e-10, gtol=1e-6):
        self.bounds = None if bounds is None else np.asarray(bounds, dtype=float)
        self.memory = int(memory)
        self.max_iter = int(max_iter)
        self.ftol = float(ftol)
        self.gtol = float(gtol)
        self.x = self._project(np.asarray(x0, dtype=float))
        self.f = None  # value and gradient at the accepted point
        self.g = None
        self.s, self.y = [], []
        self.n_iter = 0
        self.n_eval = 0
        self.done = False
        self.message = ""
        self._trial = self.x
        self._step = 1.0
        self._direction = None
        self._backtracks = 0

    def _project(self, x):
        return x if self.bounds is None else np.clip(x, self.bounds[:, 0], self.bounds[:, 1])

    def ask(self):
        """The point whose value and gradient the optimizer needs next."""
        return self._trial.copy()

    def _projected_gradient(self):
        return self._project(self.x - self.g) - self.x

    def _new_direction(self):
        """Two-loop recursion on the free coordinates (those not held at a bound)."""
        free = np.abs(self._projected_gradient()) > 0
        q = np.where(free, self.g, 0.0)
        alphas = []
        for s, y in zip(reversed(self.s), reversed(self.y)):
            a = (s @ q) / (y @ s)
            alphas.append(a)
            q = q - a * y
        if self.s:
            q *= (self.s[-1] @ self.y[-1]) / (self.y[-1] @ self.y[-1])
        for (s, y), a in zip(zip(self.s, self.y), reversed(alphas)):
            q = q + (a - (y @ q) / (y @ s)) * s
        d = -np.where(free, q, 0.0)
        if d @ self.g >= 0:  # not a descent direction: drop the memory
            self.s, self.y = [], []
            d = -np.where(free, self.g, 0.0)
        return d

    def _start_line_search(self):
        self._direction = self._new_direction()
        # the first step is scaled: no curvature is known yet
        self._step = 1.0 if self.s else min(1.0, 1.0 / max(np.abs(self.g).max(), 1e-12))
        self._backtracks = 0
        self._trial = self._project(self.x + self._step * self._direction)

    def tell(self, f, g):
        """The value and gradient at the last :meth:`ask` point; proposes the next."""
        if self.done:
            raise RuntimeError("the optimization has finished")
        f = float(f)
        g = np.asarray(g, dtype=float)
        self.n_eval += 1
        if self.f is None:  # the start
            if not np.isfinite(f):
                self.done, self.message = True, "the objective is not finite at the start"
                return
            self.f, self.g = f, g
            if np.abs(self._projected_gradient()).max() <= self.gtol:
                self.done, self.message = True, "projected gradient below gtol"
                return
            self._start_line_search()
            return
        step = self._trial - self.x
        if np.isfinite(f) and f <= self.f + self.C1 * (self.g @ step):
            self._accept(f, g, step)
            return
        self._backtracks += 1
        if self._backtracks > self.MAX_BACKTRACKS or not np.any(step):
            if self.s:  # retry along the gradient before giving up
                self.s, self.y = [], []
                self._start_line_search()
            else:
                self.done, self.message = True, "no decrease along the gradient"
            return
        self._step *= self.SHRINK
        self._trial = self._project(self.x + self._step * self._direction)

    def _accept(self, f, g, step):
        decrease = self.f - f
        dy = g - self.g
        if step @ dy > 1e-10 * np.sqrt((step @ step) * (dy @ dy)):  # keep curvature positive
            self.s.append(step)
            self.y.append(dy)
            if len(self.s) > self.memory:
                self.s.pop(0)
                self.y.pop(0)
        self.x, self.f, self.g = self._trial, f, g
        self.n_iter += 1
        if decrease <= self.ftol * max(abs(f), 1.0):
            self.done, self.message = True, "relative decrease below ftol"
        elif np.abs(self._projected_gradient()).max() <= self.gtol:
            self.done, self.message = True, "projected gradient below gtol"
        elif self.n_iter >= self.max_iter:
            self.done, self.message = True, "max_iter reached"
        else:
            self._start_line_search()
