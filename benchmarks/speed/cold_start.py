"""Cold start: the first default fit of each headline estimator in a new process.

Every run starts a new Python process with an empty numba cache (``NUMBA_CACHE_DIR`` set to
a new temporary directory), fits the estimator at its defaults on small generated data, then
fits it again in the same process. It prints both fit times (wall-clock and the process's CPU
seconds, less sensitive to other jobs on the machine) and, from numba's compile events
(``numba.core.event``, kind ``"numba:compile"``), how many compilations the process made and
their seconds per kernel. A compilation that compiles a callee counts the callee's time in
its own "inclusive" seconds; "self" seconds leave the callees out (they sum to the total).
With ``--warm-process`` a third fit runs in another new process on the cache the first one
filled (what every later process of a user pays).

    python benchmarks/speed/cold_start.py                        # every estimator, one run each
    python benchmarks/speed/cold_start.py --estimators pfedhgp --runs 3 --top 15
    python benchmarks/speed/cold_start.py --estimators tensor dro --warm-process

Estimators and data: the problems of ``skfed warmup`` (``skfed._warmup.CASES``):
``pfedhgp`` (``PFedHGPRegressor()`` on ``make_hierarchical_gp()``: 6 sites x 50 rows, 4
outputs), ``pfedhgp-scalar`` (the same with ``n_outputs=None``), ``tensor``
(``PersonalizedTensorRegressor()`` on ``make_tensor_regression()``: 5 sites x 250 rows)
and ``dro`` (``DPFedDROClassifier(epsilon=None)`` on ``make_correlated_faults(n_train=(100,
30, 30, 30))``: 4 sites, 190 rows), all with ``random_state=0`` for the data.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ESTIMATORS = ("pfedhgp", "pfedhgp-scalar", "tensor", "dro")  # skfed._warmup.CASES
DEFAULT = ESTIMATORS


class _CompileLog:
    """Listener of numba's ``numba:compile`` events: count and seconds per kernel."""

    def __init__(self):
        from numba.core import event

        self._event = event
        self.stack = []  # [name, start, seconds of nested compilations]
        self.kernels = {}  # name -> {"count", "self", "inclusive", "signatures"}

    def __enter__(self):
        self._listener = _Listener(self)
        self._event.register("numba:compile", self._listener)
        return self

    def __exit__(self, *exc):
        self._event.unregister("numba:compile", self._listener)

    def start(self, event):
        disp = event.data["dispatcher"]
        name = f"{disp.py_func.__module__}.{disp.py_func.__qualname__}"
        sig = "(" + ", ".join(str(a) for a in event.data["args"]) + ")"
        self.stack.append([name, sig, time.perf_counter(), 0.0])

    def end(self, event):
        name, sig, start, nested = self.stack.pop()
        seconds = time.perf_counter() - start
        if self.stack:
            self.stack[-1][3] += seconds
        row = self.kernels.setdefault(
            name, {"count": 0, "self": 0.0, "inclusive": 0.0, "signatures": [], "callers": []})
        row["count"] += 1
        row["self"] += seconds - nested
        row["inclusive"] += seconds
        row["signatures"].append(sig)
        row["callers"].append(next(
            (frame[0] for frame in reversed(self.stack) if frame[0].startswith("skfed.")), None))


def _Listener(log):
    from numba.core.event import Listener

    class L(Listener):
        def on_start(self, event):
            log.start(event)

        def on_end(self, event):
            log.end(event)

    return L()


def child(name, n_fits):
    """Runs in the new process: time the fits, print one JSON line."""
    started = time.perf_counter()
    warnings.simplefilter("ignore")
    from skfed._warmup import problem

    make, X, y, groups = problem(name)
    out = {"estimator": name, "import_and_data_s": time.perf_counter() - started, "fits": []}
    out["cpu"] = []
    with _CompileLog() as log:
        for _ in range(n_fits):
            t, c = time.perf_counter(), time.process_time()
            make().fit(X, y, groups=groups)
            out["fits"].append(time.perf_counter() - t)
            out["cpu"].append(time.process_time() - c)
    out["kernels"] = log.kernels
    print("COLD_START " + json.dumps(out), flush=True)


def _run(name, cache, n_fits):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", name, "--fits", str(n_fits)],
        env=env, capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("COLD_START "):
            return json.loads(line[len("COLD_START "):])
    raise RuntimeError(f"{name}: child failed\n{proc.stdout}\n{proc.stderr}")


def _report(name, runs, warm, top):
    first = [r["fits"][0] for r in runs]
    second = [r["fits"][1] for r in runs]
    first_cpu = [r["cpu"][0] for r in runs]
    second_cpu = [r["cpu"][1] for r in runs]
    counts = [sum(k["count"] for k in r["kernels"].values()) for r in runs]
    secs = [sum(k["self"] for k in r["kernels"].values()) for r in runs]
    med = statistics.median
    print(f"\n## {name}: {len(runs)} cold process(es), median (min-max)")
    for label, v, fmt in (("first fit s", first, ".1f"), ("  CPU s", first_cpu, ".1f"),
                          ("second fit s", second, ".2f"), ("  CPU s", second_cpu, ".2f"),
                          ("compilations", counts, ".0f"), ("compile s", secs, ".1f")):
        print(f"  {label:14s} {med(v):{fmt}} ({min(v):{fmt}}-{max(v):{fmt}})")
    if warm:
        wf = [r["fits"][0] for r in warm]
        print(f"  {'new process, warm cache, first fit s':14s} {med(wf):.2f} "
              f"({min(wf):.2f}-{max(wf):.2f}); compilations "
              f"{sum(k['count'] for k in warm[0]['kernels'].values())}")
    kernels = runs[0]["kernels"]  # the top list of the first run
    rows = sorted(kernels.items(), key=lambda kv: -kv[1]["self"])[:top]
    print(f"  top {len(rows)} kernels by self compile seconds (first run):")
    print(f"  {'kernel':58s} {'n':>3s} {'self s':>7s} {'incl s':>7s}")
    for kname, row in rows:
        short = kname.replace("skfed.", "")
        print(f"  {short:58s} {row['count']:3d} {row['self']:7.2f} {row['inclusive']:7.2f}")
        if row["count"] > 1:
            for sig in row["signatures"]:
                print(f"      {sig[:150]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimators", nargs="+", choices=ESTIMATORS, default=list(DEFAULT))
    parser.add_argument("--runs", type=int, default=1, help="cold processes per estimator")
    parser.add_argument("--top", type=int, default=10, help="kernels listed per estimator")
    parser.add_argument("--warm-process", action="store_true",
                        help="also time a first fit in a new process on the filled cache")
    parser.add_argument("--json", metavar="FILE", help="write every run's figures to FILE")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--fits", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.fits)
        return
    print(f"python {sys.version.split()[0]}, load average at start "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} cores")
    everything = {}
    for name in args.estimators:
        runs, warm = [], []
        for _ in range(args.runs):
            cache = tempfile.mkdtemp(prefix="skfed-cold-")
            try:
                runs.append(_run(name, cache, 2))
                if args.warm_process:
                    warm.append(_run(name, cache, 1))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
        _report(name, runs, warm, args.top)
        everything[name] = {"cold": runs, "warm_process": warm}
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(everything, fh, indent=1)


if __name__ == "__main__":
    main()
