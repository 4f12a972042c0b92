"""What the benchmarks and the tests share: a loopback provider, a tool that costs nothing,
the ``toolprep serve`` command line and a throwaway loopback Ray cluster.

Installed with the package (``toolprep.testing``) so a benchmark can drive another
revision's installed runtime with the same provider and tool; nothing in the runtime
imports it, and neither the tests nor the benchmarks import each other.
"""
