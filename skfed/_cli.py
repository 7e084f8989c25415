"""Command line: ``skfed benchmark ...``, ``skfed warmup`` (also ``python -m skfed``)."""

import argparse
import sys
import time

__all__ = ["main"]


def _parser():
    parser = argparse.ArgumentParser(
        prog="skfed", description="skfed: personalized federated learning estimators."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "benchmark",
        help="run the registered experiments and write a report",
        description=(
            "Run registered experiments on generated and real data; print a table "
            "(method x metric, mean and spread over seeds) and write "
            "report.md, results.csv, summary.csv and figures to --out."
        ),
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="small problems, a few minutes in all (default)")
    size.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="the papers' problem sizes and seed counts (hours)")
    bench.set_defaults(mode="quick")
    bench.add_argument("--out", default="skfed-report",
                       help="folder for the report (default: ./skfed-report)")
    bench.add_argument("--experiments", nargs="+", metavar="NAME",
                       help="run only these experiments or groups, e.g. 'real' "
                            "(default: all experiments of the mode)")
    bench.add_argument("--seeds", type=int, default=None, metavar="N",
                       help="repetitions per experiment (default: each experiment's own)")
    bench.add_argument("--list", action="store_true", help="list the experiments and exit")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    warm = sub.add_parser(
        "warmup",
        help="compile the numerical kernels of the default fits ahead of use",
        description=(
            "Fit each headline estimator at its defaults on small generated data, so "
            "that numba compiles and caches the kernels once (for installers and CI; "
            "a first fit does the same without it)."
        ),
    )
    warm.add_argument("--estimators", nargs="+", metavar="NAME",
                      help="only these warm-up problems (default: all)")
    return parser


def _warmup(args):
    from ._warmup import CASES, warmup

    unknown = sorted(set(args.estimators or ()) - set(CASES))
    if unknown:
        print(f"skfed warmup: unknown {', '.join(unknown)}; known: {', '.join(CASES)}",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    warmup(args.estimators)
    print(f"compiled and cached in {time.perf_counter() - start:.1f} s")
    return 0


def main(argv=None):
    """Entry point of the ``skfed`` console script."""
    started = time.perf_counter()
    args = _parser().parse_args(argv)
    if args.command == "warmup":
        return _warmup(args)
    from .benchmark import get_experiments
    from .benchmark._runner import UsageError, main_benchmark

    if args.list:
        for exp in get_experiments():
            tags = [f"group {exp.group}"] if exp.group else []
            if "quick" not in exp.modes:
                tags.append("--full only")
            print(f"{exp.name:28s} {exp.title}" + (f"  [{', '.join(tags)}]" if tags else ""))
        return 0
    if args.seeds is not None and args.seeds < 1:
        print("skfed benchmark: --seeds must be >= 1", file=sys.stderr)
        return 2
    try:
        main_benchmark(
            names=args.experiments, mode=args.mode, out=args.out, n_seeds=args.seeds,
            progress=not args.no_progress, started=started,
        )
    except UsageError as exc:  # a failure inside an experiment keeps its traceback
        print(f"skfed benchmark: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
