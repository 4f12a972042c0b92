"""A three-prompt conversation that shows every kind of thing an editor's thread holds.

Prompt blocks of each kind the agent accepts (text, a resource link, an
embedded resource), a thought, agent text, a tool card and a plan, so that
comparing a replayed thread with the one first shown means something.
"""

from __future__ import annotations

from typing import Any

from tests.runtime import scenarios as sc
from tests.support.message_log import MessageLog
from tests.support.thread_rebuilder import Card, Said, ThreadRebuilder
from toolprep.testing import FakeProviderServer

__all__ = ["KIND", "PLAN", "PROMPTS", "check_shown", "enqueue_answers", "run_prompt"]

KIND = "anthropic"

LINK = {
    "type": "resource_link",
    "uri": "file:///project/notes.txt",
    "name": "notes.txt",
    "title": "Notes",
    "size": 12,
    "annotations": {"priority": 0.5, "audience": ["user"]},
}
RESOURCE = {
    "type": "resource",
    "resource": {"uri": "file:///project/a.py", "text": "a = 1\n", "mimeType": "text/x-python"},
}
PROMPTS: list[list[dict[str, Any]]] = [
    [{"type": "text", "text": "Look at the notes"}, LINK],
    [{"type": "text", "text": "Plan it, with this file"}, RESOURCE],
    [{"type": "text", "text": "Thanks"}],
]
PLAN = [{"content": "write the replay", "status": "in_progress", "priority": "high"}]


def enqueue_answers(server: FakeProviderServer) -> None:
    """The model's side of the conversation (the shell call needs ``--allow-shell``)."""
    server.enqueue(
        sc.ok(
            sc.anthropic_sse(
                thinking="The notes first.",
                text="Reading them.",
                tool_calls=[sc.shell("echo noted", "call_read")],
            )
        ),
        sc.ok(sc.text_turn(KIND, "They say hello.")),
        sc.ok(sc.anthropic_sse(tool_calls=[("call_plan", "todo_write", {"todos": PLAN})])),
        sc.ok(sc.text_turn(KIND, "Planned.")),
        sc.ok(sc.text_turn(KIND, "You are welcome.")),
    )


def run_prompt(
    client: MessageLog, session_id: str, prompt: list[dict[str, Any]], shown: ThreadRebuilder
) -> None:
    """Send ``prompt`` and wait for its reply; ``shown`` gets the turn as this client shows it."""
    before = len(client.updates(session_id))
    shown.sent(prompt)
    request = client.request("session/prompt", {"sessionId": session_id, "prompt": prompt})
    reply = client.reply(request)
    assert reply["result"]["stopReason"] == "end_turn", reply
    # Every frame of the turn came before its reply.
    shown.apply_all(client.updates(session_id)[before:])


def check_shown(shown: ThreadRebuilder) -> None:
    """The thread of the whole conversation, as the client that sent it shows it."""
    assert [turn.user for turn in shown.turns] == PROMPTS
    first, second, third = shown.turns
    assert first.items == [
        Said("The notes first.", thought=True),
        Said("Reading them.", thought=False),
        Card("call_read", "Run echo noted", "completed"),
        Said("They say hello.", thought=False),
    ]
    assert second.plan == PLAN
    assert second.items == [Said("Planned.", thought=False)]
    assert third.items == [Said("You are welcome.", thought=False)]
