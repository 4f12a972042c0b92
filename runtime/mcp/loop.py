"""The one asyncio loop every MCP client of a runtime runs on.

Why a loop of its own rather than the provider streams' loop
(``toolprep-streams``): the SDK validates every message with pydantic on
the loop that reads it, so a server answering with megabytes would stall
every model stream of the process for as long as that takes; the stream
loop's latency is what the preparing cards are about. Why one loop for all
sessions rather than one per session: the thread count of a process must
not grow with its sessions. So a runtime gets exactly one more thread,
``toolprep-mcp``, started with the first session that names an MCP server
(a runtime whose sessions never use MCP neither starts it nor imports the
SDK), and kept until shutdown.

Server processes are started with ``subprocess`` and watched through a
pidfd on this loop (``runtime.mcp.stdio``), not through asyncio's
subprocess support, whose default child watcher on Python 3.11 parks one
thread per child for its whole life. Name resolution for HTTP servers runs
on the loop's default executor, capped at one thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

THREAD_NAME = "toolprep-mcp"


class McpLoop:
    """Runs coroutines on the MCP loop, starting its thread on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def started(self) -> bool:
        with self._lock:
            return self._loop is not None

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coroutine`` on the loop; its result arrives in the returned future.

        Raises ``RuntimeError`` once the loop was stopped (the coroutine is closed).
        """
        loop = self._ensure()
        if loop is None:
            coroutine.close()
            raise RuntimeError("the MCP loop is stopped")
        return asyncio.run_coroutine_threadsafe(coroutine, loop)

    def _ensure(self) -> asyncio.AbstractEventLoop | None:
        with self._lock:
            if self._stopped:
                return None
            if self._loop is None:
                loop = asyncio.new_event_loop()
                loop.set_default_executor(
                    ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{THREAD_NAME}-resolve")
                )
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=THREAD_NAME, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (its clients must be closed first) and join its thread."""
        with self._lock:
            self._stopped = True
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            logger.warning("the MCP loop did not stop within %.0f s", timeout)
            return
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
