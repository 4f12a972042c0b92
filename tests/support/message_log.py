"""What an ACP agent wrote to a test client, with deadline-bound waits on it.

Shared by the stdio client (``AgentProcess``) and the WebSocket one
(``WsClient``): each reads on a thread of its own and ``record``s every
message, already validated against the ACP schema.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.support.acp_schema import validate_agent_message, validate_response
from tests.support.eventually import eventually

Message = dict[str, Any]


class MessageLog:
    """``send`` is the transport's; everything else is shared."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._changed = threading.Condition()
        self._next_id = 0
        self._methods: dict[int, str] = {}  # request id -> method, to validate its response

    def send(self, message: Message) -> None:
        raise NotImplementedError

    def record(self, message: Message) -> None:
        validate_agent_message(message)
        method = None if "method" in message else self._methods.get(message.get("id", -1))
        if method is not None:
            validate_response(method, message)
        with self._changed:
            self.messages.append(message)
            self._changed.notify_all()

    def request(self, method: str, params: Message) -> int:
        self._next_id += 1
        self._methods[self._next_id] = method
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def wait_for(self, predicate: Callable[[list[Message]], bool], timeout: float = 30.0) -> None:
        """Until ``predicate`` holds of the messages so far (or of something else it reads, such
        as the provider's requests, which no message announces)."""

        def holds() -> bool:
            with self._changed:
                return predicate(self.messages)

        try:
            eventually(holds, timeout=timeout)
        except AssertionError as failure:
            raise AssertionError(f"timed out; the agent wrote {self.messages!r}") from failure

    def reply(self, request_id: int, timeout: float = 30.0) -> Message:
        self.wait_for(lambda ms: any(_answers(m, request_id) for m in ms), timeout)
        return next(m for m in self.messages if _answers(m, request_id))

    def updates(self, session_id: str | None = None) -> list[Message]:
        """The ``session/update`` payloads so far (of one session, if named), in order."""
        with self._changed:
            return [
                m["params"]["update"]
                for m in self.messages
                if m.get("method") == "session/update"
                and session_id in (None, m["params"]["sessionId"])
            ]

    def prompt_until_shown(self, session_id: str, answer: str) -> list[Message]:
        """Prompt, and return the session's updates once they show ``answer`` in full (the
        turn may still run): the point a caller kills the agent at, text shown."""
        self.prompt(session_id, "answer slowly")

        def shown(_: list[Message]) -> bool:
            updates = self.updates(session_id)
            return answer in "".join(
                u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk"
            )

        self.wait_for(shown, timeout=60)
        return self.updates(session_id)

    def prompt(self, session_id: str, text: str = "go") -> int:
        return self.request(
            "session/prompt",
            {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]},
        )


def _answers(message: Message, request_id: int) -> bool:
    return message.get("id") == request_id and "method" not in message
