"""``python -m bench NAME [NAME ...] [--quick] [--scale S] [--json PATH]``; ``python -m bench --list``.

NAME is a benchmark name (``core.throughput``), a group (``core``: every ``core.*``) or ``all``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench._harness import IMPORT_ERRORS, discover, run_benchmarks, select


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Run timely's benchmarks: print a table per benchmark and write its records as JSON.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmark name, group prefix (e.g. core), or 'all'")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--quick", action="store_true", help="smaller runs: each benchmark finishes within a minute")
    parser.add_argument(
        "--scale",
        choices=("small", "medium", "large"),
        help="the size for benchmarks that run at several (linq.ddir; default: theirs, small with --quick)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="write all records of this run to PATH (default: bench-results/NAME.json per benchmark)",
    )
    args = parser.parse_args(argv)
    registry = discover()
    for module, exc in IMPORT_ERRORS.items():
        print(
            f"warning: {module} did not import ({type(exc).__name__}: {exc}); its benchmarks are missing",
            file=sys.stderr,
        )
    if args.list:
        width = max((len(n) for n in registry), default=0)
        for name, bench in registry.items():
            print(f"{name.ljust(width)}  {bench.description}")
        return 0
    if not args.names:
        parser.error("name a benchmark (or 'all'); --list shows them")
    try:
        chosen = select(args.names, registry)
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    code = run_benchmarks(chosen, quick=args.quick, scale=args.scale, json_path=args.json)
    return 1 if IMPORT_ERRORS and "all" in args.names else code


if __name__ == "__main__":
    sys.exit(main())
