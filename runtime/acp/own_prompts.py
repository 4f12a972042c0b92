"""The prompts one connection sent whose turns still run: their record is not sent back.

A session records each prompt it accepts as ``user_message_chunk`` frames,
so that ``session/load`` replays the questions with the answers, and those
frames reach the session's sinks like any other. The client that sent the
prompt shows it already, and a client appends a user chunk to the user
message it shows last (Zed does): sending the record back would show the
prompt twice. So a connection drops the record of its own running prompts
and of nothing else: another client attached to the same daemon session
sees the prompt, and a replay carries every prompt.

Frames often arrive encoded (relayed from a worker, or fanned out by a
daemon session), so a prompt's frames are told by their opening bytes, which
``messages.frames.user_message_chunk`` fixes; no frame is decoded for it.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson

from toolprep.messages.frames import user_message_chunk

__all__ = ["OwnPrompts", "encoded_prefix"]


def encoded_prefix(message_id: str) -> bytes:
    """How every encoded ``user_message_chunk`` frame of ``message_id`` begins."""
    head = orjson.dumps(user_message_chunk(message_id, {}))
    return head[: head.index(b'"content":')]


class OwnPrompts:
    """Thread-safe: prompts are sent on the connection's reader thread, frames come from others.

    Readers take no lock: each session's entry is a tuple, replaced whole.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: dict[str, tuple[str, ...]] = {}
        self._prefixes: dict[str, tuple[bytes, ...]] = {}

    def sent(self, session_id: str, message_id: str) -> None:
        """This connection is sending ``message_id`` to the session: do not echo it."""
        with self._lock:
            self._ids[session_id] = (*self._ids.get(session_id, ()), message_id)
            prefix = encoded_prefix(message_id)
            self._prefixes[session_id] = (*self._prefixes.get(session_id, ()), prefix)

    def ended(self, session_id: str, message_id: str) -> None:
        """The prompt was answered: its record came before the answer (or never will)."""
        with self._lock:
            ids = self._ids.get(session_id, ())
            if message_id not in ids:
                return
            at = ids.index(message_id)
            ids = ids[:at] + ids[at + 1 :]
            prefixes = self._prefixes[session_id]
            prefixes = prefixes[:at] + prefixes[at + 1 :]
            if ids:
                self._ids[session_id], self._prefixes[session_id] = ids, prefixes
            else:
                del self._ids[session_id], self._prefixes[session_id]

    def is_echo(self, session_id: str, update: dict[str, Any]) -> bool:
        ids = self._ids.get(session_id)
        return (
            ids is not None
            and update.get("sessionUpdate") == "user_message_chunk"
            and update.get("messageId") in ids
        )

    def is_encoded_echo(self, session_id: str, update_json: bytes) -> bool:
        prefixes = self._prefixes.get(session_id)
        return prefixes is not None and update_json.startswith(prefixes)
