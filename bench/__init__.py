"""Benchmarks for timely: ``python -m bench NAME [--quick] [--json PATH]`` (``--list`` names them).

Every module of this package whose name does not start with ``_`` is imported by the CLI, and
registers its benchmarks with the `benchmark` decorator of `bench._harness`. To add one, drop in
a module (named after the benchmark, e.g. ``net_throughput.py`` for ``net.throughput``)::

    from bench._harness import Context, benchmark

    @benchmark("net.throughput", "records/s between two processes")
    def run(ctx: Context) -> None:
        n = 100_000 if ctx.quick else 1_000_000       # --quick: finish within a minute
        ...
        ctx.progress(f"run {i} of 3 done")            # rate-limited progress line
        ctx.record("net.throughput", rate, "records/s", baseline="plain_socket", baseline_value=base)

The harness prints the machine context, the table of what ``ctx.record`` got, and writes the
records as JSON (``bench-results/NAME.json`` unless ``--json PATH`` is given). Benchmarks use
only the public ``timely`` API.
"""
