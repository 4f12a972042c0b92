"""The caller's side of the session-host boundary, as a test sees it.

``RecordingFrameSink`` keeps everything the host sent a session, in arrival
order: frames (decoded to dicts whichever way they came), requests, and a
marker when the prompt resolved, so a test can assert ordering across the
boundary exactly as an editor would observe it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import orjson

from tests.support.eventually import eventually
from tests.support.runtime_harness import TURN_END
from toolprep.messages.turns import TurnResult
from toolprep.runtime.kernel.session_host import ClientRequest

R = TypeVar("R", bound=ClientRequest)

Event = tuple[str, dict[str, Any] | ClientRequest]


class RecordingFrameSink:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.events: list[Event] = []
        self.encoded_frames = 0

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        self._record(session_id, update)

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        for session_id, update in frames:
            self._record(session_id, update)

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        self.encoded_frames += 1
        self._record(session_id, orjson.loads(update_json))

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        self._record(session_id, request)

    def mark_result(self, session_id: str, reply: Future[TurnResult]) -> Future[TurnResult]:
        """Record a marker among the frames when ``reply`` resolves; returns ``reply``."""
        reply.add_done_callback(lambda _done: self._record(session_id, TURN_END))
        return reply

    def _record(self, session_id: str, event: dict[str, Any] | ClientRequest) -> None:
        with self._changed:
            self.events.append((session_id, event))
            self._changed.notify_all()

    def frames(self) -> list[dict[str, Any]]:
        """Every frame and result marker, in arrival order (what ``check_cards`` takes)."""
        with self._changed:
            return [e for _, e in self.events if isinstance(e, dict)]

    def requests(self) -> list[ClientRequest]:
        with self._changed:
            return [e for _, e in self.events if not isinstance(e, dict)]

    def session_ids(self) -> set[str]:
        with self._changed:
            return {s for s, _ in self.events}

    def wait_until(self, done: Callable[[list[Event]], bool], timeout: float = 30.0) -> None:
        def holds() -> bool:
            with self._changed:
                return done(self.events)

        try:
            eventually(holds, timeout=timeout)
        except AssertionError as failure:
            raise AssertionError(f"timed out waiting; events so far: {self.events}") from failure

    def wait_for_request(self, kind: type[R], timeout: float = 30.0) -> R:
        self.wait_until(lambda events: any(isinstance(e, kind) for _, e in events), timeout)
        return next(r for r in self.requests() if isinstance(r, kind))
