"""``toolprep`` command line: ``toolprep acp`` (the agent on stdio), ``toolprep serve`` (the
daemon), ``toolprep connect`` (stdio bridged to a daemon) and ``toolprep demo``; one module
per command, ``options`` for what ``acp`` and ``serve`` share, ``main`` for the parser.

Only what parsing and checking the options needs is imported at the top of each: a bad
option is refused at once, and everything heavy (the actors, the provider SDKs, the
WebSocket server) loads after the checks. ``--help`` shows the commands' plain texts, not
these docstrings. ``python -m toolprep.runtime.cli`` runs ``main`` (``__main__``); this
package itself imports nothing, so that loading it costs nothing.
"""

__all__: list[str] = []
