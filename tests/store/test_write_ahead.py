"""A tool with effects runs only once its start is in the session's log, on a real store.

A process killed while such a tool runs then leaves a card whose start is stored, which
the next process replays as ``interrupted`` (it may have run), never as "not run". A
store that cannot take the start keeps the tool from running, and says why.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.runtime import scenarios as sc
from tests.support.runtime_harness import check_cards, harness, lifecycle, message_text
from tests.support.sqlite_lock import write_locked
from toolprep.messages import frames as fr
from toolprep.runtime.store import SessionStore
from toolprep.runtime.tools.base import ToolContext, ToolKind, ToolOutput
from toolprep.runtime.tools.registry import default_registry
from toolprep.testing import FakeProviderServer

KIND = "anthropic"
CALL = ("call_w", "log_entry", {"line": "hello"})


@dataclass
class StartCheckingTool:
    """A tool with effects that, as it runs, reads its own card's start from the database
    through a connection of its own (as another process would after a crash)."""

    db: Path
    name: str = "log_entry"
    description: str = "Append a line to the log"
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {"line": {"type": "string"}}}
    )
    kind: ToolKind = "edit"
    saw_start: list[bool] = field(default_factory=list)

    def title(self, args: Mapping[str, Any]) -> str:
        return "Log a line"

    def locations(self, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]]:
        return []

    def needs_permission(self, args: Mapping[str, Any]) -> bool:
        return False

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        with contextlib.closing(sqlite3.connect(self.db)) as other:
            rows = other.execute(
                "SELECT frame FROM frames WHERE session_id = ?", (ctx.session_id,)
            ).fetchall()
        starts = [
            f
            for f in (orjson.loads(row) for (row,) in rows)
            if f.get("toolCallId") == ctx.tool_call_id and f.get("status") == "in_progress"
        ]
        self.saw_start.append(len(starts) == 1)
        return ToolOutput(llm_output="logged")


def test_a_tool_with_effects_runs_after_its_start_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    tool = StartCheckingTool(db)
    registry = default_registry()
    registry.register(tool)
    with FakeProviderServer() as server:
        server.enqueue(sc.ok(sc.calls_turn(KIND, [CALL])), sc.ok(sc.text_turn(KIND, "Logged.")))
        with (
            SessionStore(db) as store,
            harness(KIND, tmp_path, store=store, server=server, registry=registry) as h,
        ):
            session_id, sink = h.session()
            assert h.turn(session_id, sink).stop_reason == "end_turn"
    assert tool.saw_start == [True]
    assert lifecycle(sink.frames()) == {"call_w": ["preparing", "in_progress", "completed"]}


def test_a_tool_whose_start_cannot_be_stored_does_not_run_and_the_turn_says_why(
    tmp_path: Path,
) -> None:
    """The database is locked past the busy timeout: the call is not run (its card fails
    naming the cause), the turn's end tells the client what was not saved, and once the
    store takes writes again the frames it refused are written, so a load shows them."""
    db = tmp_path / "s.db"
    tool = StartCheckingTool(db)
    registry = default_registry()
    registry.register(tool)
    with FakeProviderServer() as server:
        server.enqueue(
            sc.ok(sc.calls_turn(KIND, [CALL])),
            sc.ok(sc.text_turn(KIND, "Sorry.")),
            sc.ok(sc.text_turn(KIND, "Saved now.")),
        )
        with (
            SessionStore(db, busy_timeout=0.1) as store,
            harness(KIND, tmp_path, store=store, server=server, registry=registry) as h,
        ):
            session_id, sink = h.session()
            with write_locked(db):
                assert h.turn(session_id, sink).stop_reason == "end_turn"
                assert h.runtime.flush_journal()  # its notice is not stored either
            shown = [f for f in sink.frames() if f.get("sessionUpdate") != "__turn_result__"]
            assert h.turn(session_id, sink).stop_reason == "end_turn"
            assert h.runtime.flush_journal()
            later = [f for f in sink.frames() if f.get("sessionUpdate") != "__turn_result__"]
            later = later[len(shown) :]
            replay = [orjson.loads(f) for f in store.frame_log.encoded_frames(session_id)]
    assert tool.saw_start == []  # never ran
    check_cards(sink.frames())
    [failed] = [f for f in shown if f.get("toolCallId") == "call_w" and f["status"] == "failed"]
    assert failed["content"] == [
        fr.text_content("log_entry was not run: its start could not be saved (database is locked)")
    ]
    assert "[the session could not be saved: database is locked (" in message_text(shown)
    # Every frame the client was shown has its number; those of the locked turn were kept
    # and stored with the next turn's, so a load shows what the client saw.
    assert [fr.seq_of(f) for f in shown + later] == list(range(1, len(shown + later) + 1))
    assert replay == [*shown, *later]
