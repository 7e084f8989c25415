"""skfed's Flower app against a minimal Flower app with the same messages (not a test).

On Flower every message starts a ``flwr-clientapp`` process, which imports the
app (and with it skfed) again. This measures what skfed adds to that: on one
local federation (a SuperLink and three SuperNodes on 127.0.0.1, TLS and
SuperNode authentication, :class:`skfed.federated.flower.LocalFederation`), for
each estimator

* skfed's app (the app of ``bench_flower.py``: the estimator's own client and
  server steps), then
* a minimal Flower app that does no work: its ``ServerApp`` sends the same
  number of exchanges (set-up, rounds, final broadcast) to the same nodes,
  each message carrying one float64 array of the size of skfed's payload for
  that node and round, and its ``ClientApp`` replies with an array of the
  size of skfed's reply; it imports only flwr and numpy.

Both time a round the same way (from sending the messages to the last reply,
pulling every 0.25 s as skfed's ``exchange`` does; skfed adds its server step)
and report the median over the rounds, beside the whole ``flwr run``. With
``--repeat N`` the two apps take turns N times (skfed, minimal, skfed, ...), so
that a change in the machine's load hits both; the table then gives the median
over all rounds of each app's runs and the median ``flwr run``. The load
average (1 min) is printed before and after each estimator.

Needs the ``flower`` extra. Run:
``python benchmarks/speed/flower_overhead.py [--rounds 5] [--repeat 1] [--estimators ...]``.
The in-process fit runs first, so the numba kernels are compiled and cached
before any Flower process needs them.
"""

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_flower import app_source, datasets, in_process, write_sites

from skfed.federated.flower import LocalFederation, load_fitted, write_app

MINIMAL_APP = """
import json
import time

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

server_app = ServerApp()
client_app = ClientApp()


def _reply(msg, n):
    return Message(RecordDict({"arrays": ArrayRecord({"x": Array(np.zeros(int(n)))})}),
                   reply_to=msg)


@client_app.query("setup")
def setup(msg, context):
    return _reply(msg, msg.content["config"]["up"])


@client_app.train()
def train(msg, context):
    msg.content["arrays"]["x"].numpy()  # read the payload, as a site reads the broadcast
    return _reply(msg, msg.content["config"]["up"])


@client_app.train("finalize")
def finalize(msg, context):
    msg.content["arrays"]["x"].numpy()
    return _reply(msg, 0)


def _exchange(grid, nodes, message_type, down, up):
    messages = [Message(RecordDict({"arrays": ArrayRecord({"x": Array(np.zeros(int(down)))}),
                                    "config": ConfigRecord({"up": int(up)})}),
                        dst_node_id=node, message_type=message_type) for node in nodes]
    pending = set(grid.push_messages(messages))
    while pending:
        for reply in grid.pull_messages(list(pending)):
            if reply.has_error():
                raise RuntimeError(reply.error.reason)
            pending.discard(reply.metadata.reply_to_message_id)
        if pending:
            time.sleep(0.25)


def _ints(text):
    return [int(v) for v in str(text).split(",") if v]


@server_app.main()
def main(grid, context):
    plan = {key: _ints(context.run_config[key]) for key in ("setup-up", "down", "up", "final")}
    while len(grid.get_node_ids()) < int(context.run_config["min-nodes"]):
        time.sleep(0.5)
    nodes = sorted(grid.get_node_ids())
    _exchange(grid, nodes, "query.setup", 0, plan["setup-up"][0])
    seconds = []
    for down, up in zip(plan["down"], plan["up"]):
        tic = time.perf_counter()
        _exchange(grid, nodes, "train", down, up)
        seconds.append(time.perf_counter() - tic)
    for down in plan["final"]:  # none, or the final broadcast's size
        _exchange(grid, nodes, "train.finalize", down, 0)
    with open(context.run_config["output"], "w") as fh:
        json.dump(seconds, fh)
"""


def plan_of(ledger, n_sites):
    """The minimal app's run config: float64 array lengths per node of skfed's messages."""
    def per_node(direction, rnd):
        nbytes = sum(r.nbytes for r in ledger.records
                     if r.direction == direction and r.round == rnd)
        return int(np.ceil(nbytes / 8 / n_sites))

    n_rounds = len(ledger.round_seconds)
    final = [per_node("down", n_rounds)] if any(r.round == n_rounds for r in ledger.records) else []

    def join(values):  # a run config holds numbers and strings only
        return ",".join(map(str, values))

    return {"setup-up": join([per_node("up", -1)]),
            "down": join(per_node("down", rnd) for rnd in range(n_rounds)),
            "up": join(per_node("up", rnd) for rnd in range(n_rounds)), "final": join(final)}


def _flwr_run(fed, app, run_config, timeout):
    tic = time.perf_counter()
    done = fed.run(app, run_config, timeout=timeout)
    seconds = time.perf_counter() - tic
    if done.returncode != 0 or not Path(run_config["output"]).exists():
        raise RuntimeError(done.stdout + done.stderr + fed.logs())
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=200, help="rows per site")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each app, taking turns")
    parser.add_argument("--estimators", nargs="*",
                        default=["DPFedDROClassifier", "PFedHGPRegressor"],
                        help="of bench_flower.ESTIMATORS (e.g. PFedHGPRegressor-default)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds a `flwr run` may take")
    args = parser.parse_args()
    data = {name: d for name, d in datasets(args.rows).items() if name in args.estimators}
    work = Path(tempfile.mkdtemp(prefix="skfed-flower-overhead-"))
    configs = write_sites(work, data)
    minimal = write_app(work / "minimal", MINIMAL_APP,
                        {"setup-up": "0", "down": "", "up": "", "final": ""}, name="minimalapp")
    print(f"3 sites x {args.rows} rows, {args.rounds} rounds, TLS on 127.0.0.1\n")
    rows = []
    with LocalFederation(work / "federation", configs) as fed:
        for name, (X, y, groups) in data.items():
            local = in_process(name, X, y, groups, args.rounds)  # compiles, fills the cache
            app = write_app(work / f"app-{name}", app_source(name),
                            {"estimator": name, "n-rounds": args.rounds})
            load_before = os.getloadavg()[0]
            skfed_rounds, minimal_rounds, totals, totals_min = [], [], [], []
            for run in range(args.repeat):
                output = work / f"{name}-{run}.skops"
                totals.append(_flwr_run(fed, app, {"estimator": name, "n-rounds": args.rounds,
                                                   "min-nodes": 3, "output": str(output)},
                                     args.timeout))
                ledger = load_fitted(output).communication_
                if ledger.n_messages != local.communication_.n_messages:
                    # a fit that stops when it converges runs as many rounds as in process
                    # (the steps' arithmetic is the same on both engines); if not, say so:
                    # the minimal app copies this run
                    print(f"{name} run {run}: {ledger.n_messages} messages on Flower, "
                          f"{local.communication_.n_messages} in process", flush=True)
                skfed_rounds += ledger.round_seconds
                plan = plan_of(ledger, len(configs))
                seconds_out = work / f"{name}-minimal-{run}.json"
                totals_min.append(_flwr_run(fed, minimal, {**plan, "min-nodes": 3,
                                                           "output": str(seconds_out)},
                                         args.timeout))
                this_run = json.loads(seconds_out.read_text())
                minimal_rounds += this_run
                print(f"{name} run {run}: skfed {statistics.median(ledger.round_seconds):.2f} "
                      f"s/round, minimal {statistics.median(this_run):.2f} s/round, load "
                      f"{os.getloadavg()[0]:.1f}", flush=True)
            n_exchanges = 1 + len(ledger.round_seconds) + bool(plan["final"])
            rows.append((name, n_exchanges, statistics.median(skfed_rounds),
                         statistics.median(minimal_rounds), statistics.median(totals),
                         statistics.median(totals_min)))
            print(rows[-1], f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}",
                  flush=True)
    print("| estimator | exchanges | skfed s/round | minimal s/round | ratio "
          "| skfed `flwr run` (s) | minimal `flwr run` (s) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n, skfed_round, min_round, total, total_min in rows:
        print(f"| {name} | {n} | {skfed_round:.2f} | {min_round:.2f} "
              f"| {skfed_round / min_round:.2f}x | {total:.1f} | {total_min:.1f} "
              f"| {total / total_min:.2f}x |")


if __name__ == "__main__":
    main()
