"""What one Flower message costs a site's process, replayed in new processes (not a test).

On Flower every message starts a ``flwr-clientapp`` process that imports the app and
handles one message. This records the messages one site receives in a run of the app of
``bench_flower.py`` (an :class:`~skfed.federated.flower.InMemoryGrid` run: real Flower
messages, each site a ``ClientApp`` call) and handles each again in a new Python process,
which first imports Flower's client runtime (every app's process pays it), then imports
the app and handles the message. It reports the CPU seconds of the runtime's import, of
the app's import and of the handler (the process's CPU time, steadier than wall time on a
loaded machine) and which heavy modules the process loaded, beside the minimal app of
``flower_overhead.py`` (flwr and numpy only). Medians over ``--repeat`` processes.

    python benchmarks/speed/flower_site_process.py [--repeat 3] \
        [--estimators DPFedDROClassifier ...]

The in-process run compiles the numba kernels and fills their cache first, so the replays
load kernels from the cache as a site does.
"""

import argparse
import ast
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_flower import app_source, datasets, write_sites
from flower_overhead import MINIMAL_APP

from skfed.federated.flower import InMemoryGrid

CHILD = """
import sys, time
c = time.process_time()
import flwr.supernode.runtime.run_clientapp  # Flower's runtime: every app's process pays it
runtime = time.process_time() - c
from flwr.common.serde import context_from_proto, message_from_proto
from flwr.proto.message_pb2 import Context, Message
sys.path.insert(0, {work!r})
c0 = time.process_time()
import {module} as app
c1 = time.process_time()
handled = None
if {message!r}:
    with open({message!r}, "rb") as fh:
        blobs = fh.read().split(b"--skfed-replay--")
    message = message_from_proto(Message.FromString(blobs[0]))
    context = context_from_proto(Context.FromString(blobs[1]))
    c2 = time.process_time()
    reply = app.client_app(message=message, context=context)
    handled = time.process_time() - c2
    assert not reply.has_error(), reply.error.reason
kind = message.metadata.message_type if handled is not None else ""
print(repr(dict(runtime_cpu=runtime, import_cpu=c1 - c0, handler_cpu=handled, kind=kind,
                modules=[m for m in ("numba", "scipy.stats", "pandas", "sklearn",
                                     "dp_accounting") if m in sys.modules])))
"""


def app_module(name):
    """The app's module name for an estimator name of ``bench_flower.ESTIMATORS``."""
    return "app_" + name.replace("-", "_")


def record(work, name, rounds, rows):
    """Write the messages site 0 receives in a run (message and context, serialized)."""
    from flwr.common.serde import context_to_proto, message_to_proto

    configs = write_sites(work, {name: datasets(rows)[name]})
    (work / f"{app_module(name)}.py").write_text(app_source(name))
    sys.path.insert(0, str(work))
    module = __import__(app_module(name))
    federation = module.federation
    client_app = federation.client_app
    recorded = []

    class Recorder:  # site 0's ClientApp, recording each message before handling it
        client_app = None
        _server_main = federation._server_main

        @staticmethod
        def client(message, context):
            if context.node_id == 100:
                recorded.append(message_to_proto(message).SerializeToString()
                                + b"--skfed-replay--"
                                + context_to_proto(context).SerializeToString())
            return client_app(message=message, context=context)

    Recorder.client_app = Recorder.client
    grid = InMemoryGrid(federation, configs, {"estimator": name, "n-rounds": rounds,
                                              "min-nodes": 3})
    grid.federation = Recorder
    grid.run()
    paths = []
    for i, blob in enumerate(recorded):
        paths.append(work / f"{name}-{i}.msg")
        paths[-1].write_bytes(blob)
    return paths


def replay(work, module, message=None):
    code = CHILD.format(work=str(work), module=module, message=str(message or ""))
    tic = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    out = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    out["wall"] = time.perf_counter() - tic
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=200, help="rows per site")
    parser.add_argument("--repeat", type=int, default=3, help="processes per message")
    parser.add_argument("--estimators", nargs="*",
                        default=["DPFedDROClassifier", "PFedHGPRegressor"])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="skfed-site-process-"))
    (work / "minimal_app.py").write_text(MINIMAL_APP)
    rows = []
    minimal = [replay(work, "minimal_app") for _ in range(args.repeat)]
    rows.append(("minimal app", "(import only)",
                 statistics.median(r["runtime_cpu"] for r in minimal),
                 statistics.median(r["import_cpu"] for r in minimal), None, ""))
    for name in args.estimators:
        where = work / name
        where.mkdir()
        for i, path in enumerate(record(where, name, args.rounds, args.rows)):
            runs = [replay(where, app_module(name), path) for _ in range(args.repeat)]
            kind = f"{i}: {runs[0]['kind']}"
            rows.append((name, kind, statistics.median(r["runtime_cpu"] for r in runs),
                         statistics.median(r["import_cpu"] for r in runs),
                         statistics.median(r["handler_cpu"] for r in runs),
                         ", ".join(runs[0]["modules"])))
            print(rows[-1], flush=True)
    print("\n| app | message | Flower runtime import CPU s | app import CPU s "
          "| handler CPU s | loaded |")
    print("|---|---|---|---|---|---|")
    for app, kind, runtime, imported, handled, modules in rows:
        handled = "" if handled is None else f"{handled:.2f}"
        print(f"| {app} | {kind} | {runtime:.2f} | {imported:.2f} | {handled} | {modules} |")


if __name__ == "__main__":
    main()
