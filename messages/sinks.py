"""Where a session's output goes: the one interface the emitter writes to.

An ACP connection, a session host's relay or a test's recorder implements it; the emitter
is told which one with ``AttachSink``, so the message and the emitter share this type.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol

from toolprep.messages.permissions import PermissionRequest


class SessionSink(Protocol):
    def send_update(self, session_id: str, update: dict[str, Any]) -> None: ...

    def request_permission(
        self, session_id: str, tool_call: dict[str, Any], request: PermissionRequest
    ) -> Future[str]: ...
