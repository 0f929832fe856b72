"""What the jobs' ``main()`` functions share: ``--console`` checked before Spark starts, and
errors as one line with an exit code instead of a traceback.

Exit codes: 0 done; 2 the job cannot run as asked (bad options or input, ``--console``
without its extra); 1 Spark or the timely processes inside it failed (`SparkBridgeError`).
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

__all__ = ["CONSOLE_NEEDS", "run_main"]

CONSOLE_NEEDS = ("aiohttp", "prometheus_client")
"""What ``--console`` needs installed (the ``console`` extra)."""


def run_main(run: Callable[[], object], console: str | None, usage_errors: tuple[type[Exception], ...]) -> int:
    """Run a job (``run()``) and give its exit code. ``console``: the ``--console`` address, if
    any, which the timely processes in the Spark tasks read (as under ``timely run``): checked
    here, before Spark starts, rather than in the tasks. ``usage_errors``: the exceptions that
    mean the job cannot run as asked."""
    if console is not None:
        try:
            for name in CONSOLE_NEEDS:
                importlib.import_module(name)
        except ImportError as e:
            print(
                f"error: --console needs the console extra ({e}): pip install 'timely-dataflow[console]'",
                file=sys.stderr,
            )
            return 2
        os.environ["TIMELY_CONSOLE"] = console
    try:
        run()
    except usage_errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        from timely_libs.spark import SparkBridgeError

        if not isinstance(e, SparkBridgeError):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
