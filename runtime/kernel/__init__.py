"""The kernel's own services: what runs a session whoever hosts it.

Timers, retry timing, compaction, thread pools, the provider event loop and the
session-host boundary; with ``actors/``, ``runtime/providers``, ``runtime/tools`` and
``runtime/mcp`` they make the kernel, which imports no hosting module.
"""
