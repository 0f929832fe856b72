"""The project's jobs: whole pipelines that users run from the command line.

``python -m timely_jobs.graph_analytics`` is the main one: Spark reads the edges, timely computes
components, strongly connected components and PageRank, then follows a stream of edge
changes epoch by epoch; Spark writes the results. ``python -m timely_jobs.streaming_analytics``
is the second: Naiad §6.4's streaming, iterative, interactive application on Spark Structured
Streaming (see docs/streaming.md).
"""
