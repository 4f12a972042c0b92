"""Serve ACP over a pair of byte streams from one's own process: what ``toolprep acp`` does
with stdin and stdout, for an embedder with a session host of its own.

An editor launches an agent and speaks JSON-RPC to it, one message a line, on the agent's
stdin and stdout. An embedder that builds its own ``Runtime`` (its own tools, providers or
configuration) makes its program such an agent with one call, instead of copying the CLI.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import IO

from toolprep.runtime.acp.jsonrpc_transport import DEFAULT_MAX_LINE_BYTES
from toolprep.runtime.kernel.session_host import SessionArchive, SessionHost

__all__ = ["serve_stdio"]


def serve_stdio(
    session_host: SessionHost,
    /,
    archive: SessionArchive | None = None,
    *,
    input_stream: IO[bytes] | None = None,
    output_stream: IO[bytes] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    stop_requested: Callable[[], bool] | None = None,
    meta: Mapping[str, object] | None = None,
    log_level: str | None = None,
) -> None:
    """Serve ACP to the client at the other end of this process's stdin and stdout (or of
    ``input_stream`` and ``output_stream``) with the sessions of ``session_host``; return
    when the client leaves (its input ends) or ``stop_requested()`` turns true.

    Either way out, running turns are cancelled (their cards discarded, their prompts
    answered ``cancelled``) and ``session_host`` is shut down: its sessions belong to this
    one connection. A ``Runtime`` serves, as does any ``SessionHost``; ``archive`` (a
    ``Runtime`` built with a store is one) adds ``session/load``, ``session/list`` and
    ``session/delete``.

    On stdout only protocol messages may appear, so while it serves stdout, ``sys.stdout``
    points at stderr: a stray ``print`` cannot corrupt the stream. ``max_line_bytes`` caps
    a message either way: a bigger one received is answered with an error and skipped, a
    bigger card sent is cut to fit. ``meta`` is what ``initialize`` says under
    ``_meta.toolprep``. ``log_level`` (``"INFO"``, say) sends the runtime's log to stderr
    at that level; by default logging is left as the process configured it.
    ``stop_requested`` is polled a few times a second (a signal handler may set a flag it
    reads). The streams are blocking binary streams (pipes, files, sockets' files).
    """
    from toolprep.runtime.acp.agent import AcpAgent
    from toolprep.runtime.acp.jsonrpc_connection import JsonRpcConnection

    if log_level is not None:
        from toolprep.runtime.hosting.assembly import configure_logging

        configure_logging(log_level)
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
    saved_stdout = sys.stdout
    if output_stream is None:
        output_stream = sys.stdout.buffer
        sys.stdout = sys.stderr
    if input_stream is None:
        # Unbuffered: the reader thread may still be blocked reading when the process exits,
        # and a buffered stream's lock held by it would abort interpreter shutdown.
        input_stream = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    try:
        connection = JsonRpcConnection(input_stream, output_stream, max_line_bytes=max_line_bytes)
        agent = AcpAgent(session_host, connection, archive, meta=meta)
        agent.serve(stop_requested or _never)
    finally:
        sys.stdout = saved_stdout


def _never() -> bool:
    return False
