"""What several benchmarks share and the installed package does not hold.

``load_server`` is the load generator (the test kit's loopback provider answering every
request with a realistic turn), ``loopback`` starts it in a process of its own and reads
its counters, and ``bench_tool`` is a tool that costs nothing, so only the runtime is
measured. The tests never import this package (``tests/test_layering.py``).
"""
