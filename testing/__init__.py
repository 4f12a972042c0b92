"""What the benchmarks and the tests share: a loopback provider and a tool that costs nothing.

Installed with the package (``toolprep.testing``) so a benchmark can drive another
revision's installed runtime with the same provider and tool; nothing in the runtime
imports it.
"""
