"""Soak ``toolprep serve``: days of editors compressed into minutes, watched for growth.

``python -m benchmarks.soak_daemon [--duration 720] [--short] [--plot soak.png]`` starts the
loopback provider (``benchmarks.support.load_server``, ``read_file`` calls, input tokens
counted from each request's size) and ``toolprep serve --workers 2`` with a data directory
(a real SQLite store), then drives it with churning editors and long sessions
(``churn``), kills a worker now and then, samples the front's and workers' RSS, threads
and descriptors, the store's file and WAL, and the daemon's gauges (``meter``), and prints
their growth after warm-up as ratios (``growth``), with a PNG if asked (``plot``). It
exits 1 when a target is missed. The successor of ``benchmarks.soak``, which soaks the
embedded runtime in one process.
"""
