"""StreamReader: owns every open provider stream.

All streams share one asyncio loop running on a thread this role owns, with
the async SDK clients, so thousands of concurrent streams cost one thread.
The actor's handlers only schedule work on that loop and return at once. A
close cancels the stream's task, which closes its HTTP response immediately;
anything the task had not yet delivered is simply never sent, and late
messages are dropped downstream by attempt number.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolprep.actors.base import READER, SUPERVISOR, TRACKER, Handlers, RoleActor
from toolprep.actors.directory import RoleDirectory
from toolprep.actors.read_credit import chunk_weight
from toolprep.messages.content import GenerateContentResponse, TextPart
from toolprep.messages.turns import (
    AttemptChunks,
    ChunksReceived,
    CloseStream,
    HistorySummarised,
    OpenStream,
    StreamCompleted,
    StreamFailed,
    SummariseHistory,
    SummaryFailed,
)
from toolprep.runtime.kernel.event_loops import EventLoopChoice, new_stream_loop
from toolprep.runtime.kernel.loop_lag import watch_loop_lag
from toolprep.runtime.kernel.observer import NO_OBSERVER
from toolprep.runtime.kernel.threads import prestarted_pool
from toolprep.runtime.providers.base import ModelRequest, Provider, StreamError
from toolprep.runtime.providers.routes import ModelRoute

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    received_at: float
    chunks: list[GenerateContentResponse]
    weight: int


class ChunkOutbox:
    """Chunks read in one loop iteration, by attempt, handed to the tracker in one message.

    Under load one iteration reads from many streams; sending each session's
    chunks as a message of its own woke the tracker once per session, and the
    hand-off was the reader's largest cost after aiohttp's. Used only on the
    loop's thread, so it needs no lock.
    """

    def __init__(self, directory: RoleDirectory, loop: asyncio.AbstractEventLoop) -> None:
        self._directory = directory
        self._loop = loop
        self._pending: dict[tuple[str, int], _Pending] = {}

    def add(
        self, session_id: str, attempt: int, chunk: GenerateContentResponse, weight: int = 1
    ) -> None:
        """Keep ``chunk`` for the next hand-over; ``weight`` is the read credit it took."""
        if not self._pending:
            self._loop.call_soon(self.flush)  # after every stream this iteration woke
        batch = self._pending.get((session_id, attempt))
        if batch is None:
            self._pending[(session_id, attempt)] = _Pending(time.monotonic(), [chunk], weight)
        else:
            batch.chunks.append(chunk)
            batch.weight += weight

    def drop(self, session_id: str, attempt: int) -> None:
        """Forget what an abandoned attempt read but did not yet hand over."""
        dropped = self._pending.pop((session_id, attempt), None)
        if dropped is not None:
            self._directory.read_credit.give_back(session_id, dropped.weight)

    def flush(self) -> None:
        """Hand over everything pending; a stream's end goes out only after this."""
        if not self._pending:
            return
        batches = tuple(
            AttemptChunks(session_id, attempt, tuple(p.chunks), p.received_at, p.weight)
            for (session_id, attempt), p in self._pending.items()
        )
        self._pending = {}
        self._directory.tell(TRACKER, ChunksReceived(batches))


@dataclass(slots=True)
class ReaderState:
    event_loop: EventLoopChoice = "auto"
    loop: asyncio.AbstractEventLoop | None = None
    thread: threading.Thread | None = None
    tasks: dict[str, tuple[int, asyncio.Task[None]]] = field(default_factory=dict)
    outbox: ChunkOutbox | None = None

    def ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self.loop is None:
            loop = new_stream_loop(self.event_loop)
            ready = threading.Event()

            # Name resolution runs on the loop's default executor: a small fixed pool,
            # started now, instead of one that grows with concurrent connections.
            loop.set_default_executor(prestarted_pool(2, "toolprep-resolve"))

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            self.thread = threading.Thread(target=run, name="toolprep-streams", daemon=True)
            self.thread.start()
            ready.wait()
            self.loop = loop
        return self.loop

    def ensure_outbox(self, directory: RoleDirectory) -> ChunkOutbox:
        if self.outbox is None:
            loop = self.ensure_loop()
            self.outbox = ChunkOutbox(directory, loop)
            observer = directory.observer
            if observer is not NO_OBSERVER:
                watch_loop_lag(loop, lambda late: observer.event_loop_lag("streams", late))
        return self.outbox

    def stop_loop(self, providers: Sequence[Provider] = ()) -> None:
        """Cancel every stream, close ``providers``' clients on the loop, then stop it."""
        loop = self.loop
        if loop is None:
            return

        async def cancel_all() -> None:
            tasks = [t for _, t in self.tasks.values()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            distinct = {id(p): p for p in providers}.values()
            closed = await asyncio.gather(*(p.aclose() for p in distinct), return_exceptions=True)
            for failure in closed:
                if failure is not None:
                    logger.warning("closing a provider client: %r", failure)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=5)
        except Exception as exc:
            logger.warning("closing streams at shutdown: %r", exc)
        loop.call_soon_threadsafe(loop.stop)
        if self.thread is not None:
            self.thread.join(timeout=5)
        if not loop.is_running():
            try:
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()
            except Exception as exc:
                logger.warning("closing the stream loop: %r", exc)
        self.loop = None
        self.outbox = None


class StreamReader(RoleActor):
    role = READER

    def __init__(
        self, directory: RoleDirectory, state: ReaderState, routes: Sequence[ModelRoute]
    ) -> None:
        super().__init__(directory)
        self.state = state
        self.routes = tuple(routes)
        # Built here, in the thread that starts the role, so that a runtime owns all
        # of its threads once its constructor returns, not some time after.
        state.ensure_loop()

    def handlers(self) -> Handlers:
        return {
            OpenStream: self.on_open,
            SummariseHistory: self.on_summarise,
            CloseStream: self.on_close,
        }

    def on_open(self, msg: OpenStream) -> None:
        provider = self.routes[msg.route].provider
        directory = self.directory
        outbox = self.state.ensure_outbox(directory)
        self._run(
            msg.session_id,
            msg.attempt,
            lambda: _pump(directory, outbox, msg.session_id, msg.attempt, provider, msg.request),
        )

    def on_summarise(self, msg: SummariseHistory) -> None:
        provider = self.routes[msg.route].provider
        directory = self.directory
        self._run(
            msg.session_id,
            msg.attempt,
            lambda: _summarise(directory, msg.session_id, msg.attempt, provider, msg.request),
        )

    def _run(
        self,
        session_id: str,
        attempt: int,
        work: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Run ``work`` on the loop as the session's one task (a newer attempt replaces it)."""
        loop = self.state.ensure_loop()
        state = self.state

        def start() -> None:
            previous = state.tasks.pop(session_id, None)
            if previous is not None:
                previous[1].cancel()
            task = loop.create_task(work())
            state.tasks[session_id] = (attempt, task)

            def forget(done: asyncio.Task[None]) -> None:
                current = state.tasks.get(session_id)
                if current is not None and current[1] is done:
                    del state.tasks[session_id]

            task.add_done_callback(forget)

        loop.call_soon_threadsafe(start)

    def on_close(self, msg: CloseStream) -> None:
        loop = self.state.ensure_loop()
        state = self.state

        def close() -> None:
            current = state.tasks.get(msg.session_id)
            if current is not None and current[0] <= msg.attempt:
                current[1].cancel()

        loop.call_soon_threadsafe(close)


async def _pump(
    directory: RoleDirectory,
    outbox: ChunkOutbox,
    session_id: str,
    attempt: int,
    provider: Provider,
    request: ModelRequest,
) -> None:
    """Forward one attempt's chunks, then exactly one end-of-stream message."""
    stream = provider.stream(request)
    first = True
    credit = directory.read_credit
    credit.restart(session_id)
    try:
        async for chunk in stream:
            if first:
                first = False
                directory.observer.first_chunk(session_id, attempt, time.monotonic())
            weight = chunk_weight(chunk)
            outbox.add(session_id, attempt, chunk, weight)
            if credit.take(session_id, weight):  # past its share of the roles: wait for them
                await credit.room(session_id)
    except asyncio.CancelledError:
        outbox.drop(session_id, attempt)
        raise
    except StreamError as exc:
        outbox.flush()
        directory.tell(TRACKER, StreamFailed(session_id, attempt, exc))
        return
    except Exception as exc:  # a provider bug is a failed attempt, not a dead reader
        logger.exception("provider stream for %s crashed", session_id)
        outbox.flush()
        error = StreamError(f"provider failed: {exc!r}", retryable=True, kind="internal")
        directory.tell(TRACKER, StreamFailed(session_id, attempt, error))
        return
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            # Closing a cancelled HTTP response may raise anything, cancellation included.
            with contextlib.suppress(BaseException):
                await aclose()
    outbox.flush()
    directory.tell(TRACKER, StreamCompleted(session_id, attempt))


async def _summarise(
    directory: RoleDirectory,
    session_id: str,
    attempt: int,
    provider: Provider,
    request: ModelRequest,
) -> None:
    """Collect a summary request's text; exactly one ``HistorySummarised`` or ``SummaryFailed``.

    The chunks go nowhere else: the editor never sees the summary as a reply.
    """
    stream = provider.stream(request)
    pieces: list[str] = []
    try:
        async for chunk in stream:
            pieces.extend(p.text for p in chunk.parts if isinstance(p, TextPart))
    except asyncio.CancelledError:
        raise
    except StreamError as exc:
        directory.tell(SUPERVISOR, SummaryFailed(session_id, attempt, exc.message))
        return
    except Exception as exc:  # a provider bug fails the summary, not the reader
        logger.exception("summary request for %s crashed", session_id)
        directory.tell(SUPERVISOR, SummaryFailed(session_id, attempt, f"provider failed: {exc!r}"))
        return
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(BaseException):
                await aclose()
    summary = "".join(pieces).strip()
    if not summary:
        directory.tell(
            SUPERVISOR, SummaryFailed(session_id, attempt, "the summary came back empty")
        )
        return
    directory.tell(SUPERVISOR, HistorySummarised(session_id, attempt, summary))
