"""Process-wide settings, made where a long-running agent process starts serving.

The allocator, the garbage collector, stop signals and the secrets kept from children.
"""
