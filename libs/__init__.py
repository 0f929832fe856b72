"""Libraries built on timely's public API only: `timely_libs.linq` (differential dataflow),
and later Pregel, Bloom and the Spark bridge. Nothing here imports timely's internals."""
