"""Import times of skfed against scikit-learn: median of fresh processes (not a test).

Each statement runs in a new interpreter (``python -c``, started in an empty
directory so that the current one cannot shadow the skfed under test), timed
inside it around the statement only (the interpreter's start-up is the same
for all): wall time (``time.perf_counter``) and the process's CPU time
(``time.process_time``, less sensitive to other jobs on a shared machine). The
statements take turns, and so do the skfed trees compared, so a change of
machine load hits all of them alike. Run:
``python benchmarks/speed/import_time.py [--repeat 3] [--pythonpath TREE ...]``
(each ``TREE`` a directory holding a ``skfed`` package; default: this
repository's).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

STATEMENTS = [
    "import sklearn.base",
    "import skfed",
    "from skfed import LocalEstimator",
    "from skfed import DPFedDROClassifier",
    "from skfed import PFedHGPRegressor",
    "from skfed import PersonalizedTensorRegressor",
    "import skfed.federated.flower",
]

_TIMER = ("import time; t, c = time.perf_counter(), time.process_time(); {}; "
          "print(time.perf_counter() - t, time.process_time() - c)")


def _time(statement, tree, cwd):
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run([sys.executable, "-c", _TIMER.format(statement)], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True)
    return tuple(float(v) for v in done.stdout.split()[-2:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="processes per statement")
    repository = str(Path(__file__).resolve().parents[2])
    parser.add_argument("--pythonpath", nargs="+", default=[repository],
                        help="skfed trees to compare (default: this repository)")
    args = parser.parse_args()
    times = {(tree, s): [] for tree in args.pythonpath for s in STATEMENTS}
    with tempfile.TemporaryDirectory() as cwd:
        for _ in range(args.repeat):
            for statement in STATEMENTS:
                for tree in args.pythonpath:
                    times[tree, statement].append(_time(statement, tree, cwd))
    for tree in args.pythonpath:
        wall = {s: statistics.median(v[0] for v in times[tree, s]) for s in STATEMENTS}
        cpu = {s: statistics.median(v[1] for v in times[tree, s]) for s in STATEMENTS}
        print(f"\nskfed from {tree}, median of {args.repeat} processes:\n")
        print("| statement | wall (s) | / `import sklearn.base` | CPU (s) "
              "| / `import sklearn.base` | all runs, wall (s) |")
        print("|---|---|---|---|---|---|")
        for s in STATEMENTS:
            runs = ", ".join(f"{w:.2f}" for w, _ in times[tree, s])
            print(f"| `{s}` | {wall[s]:.2f} | {wall[s] / wall[STATEMENTS[0]]:.2f} "
                  f"| {cpu[s]:.2f} | {cpu[s] / cpu[STATEMENTS[0]]:.2f} | {runs} |")


if __name__ == "__main__":
    main()
