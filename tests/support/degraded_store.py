"""What an editor must see from an agent or daemon whose store cannot be written, and
once it can again: the stored sessions listed and loaded, new sessions and turns
refused by cause, then accepted."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.runtime import scenarios as sc
from tests.support.message_log import Message, MessageLog
from tests.support.runtime_harness import lifecycle
from tests.support.sqlite_lock import write_locked
from toolprep.messages import frames as fr
from toolprep.runtime.store import SessionStore
from toolprep.testing import FakeProviderServer

__all__ = [
    "NUMBERED_TURN",
    "REFUSED",
    "STORE_READ_ONLY",
    "TURN",
    "crashed_session",
    "dead_owner",
    "degrade_and_recover",
    "discarded_after_recovery",
    "empty_and_recover",
    "locked_and_recover",
]

STORE_READ_ONLY = -32004
SESSION_NOT_FOUND = -32002
REFUSED = re.compile(
    r"^the session store is read-only: (?P<cause>.+); new turns are refused until it "
    r"can be written$"
)

TURN = [
    fr.preparing("call_1", "read_file", "read"),
    fr.execution_started(
        "call_1",
        "read_file",
        title="Read setup.cfg",
        kind="read",
        locations=[],
        raw_input={"path": "setup.cfg"},
        prepared=True,
    ),
    fr.tool_result("call_1", "read_file", ok=True, content=[], raw_output="x"),
    fr.agent_message_chunk("Done."),
]

NUMBERED_TURN = [fr.numbered(frame, seq) for seq, frame in enumerate(TURN, 1)]
"""``TURN`` as the log holds it: each frame numbered in order (``_meta.toolprep.seq``)."""


def dead_owner() -> str:
    """An owner on this host whose process has ended (a child that already exited)."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return f"{socket.gethostname()}:{int(child.stdout)}:?"


def crashed_session(db: Path, cwd: Path | str = "/work") -> None:
    """Store ``sess_1``: a finished turn, then a card its process died with open."""
    with SessionStore(db, owner=dead_owner()) as store:
        store.sessions.create("sess_1", str(cwd))
        store.frame_log.append_frames("sess_1", TURN)
        store.frame_log.append_frames("sess_1", [fr.preparing("call_2", "grep", "search")])


def _refused(reply: Message) -> str:
    """The cause a read-only refusal names; fails unless ``reply`` is one."""
    assert "error" in reply, reply
    error = reply["error"]
    assert error["code"] == STORE_READ_ONLY, error
    found = REFUSED.match(error["message"])
    assert found is not None, error
    assert error["data"] == {"cause": found["cause"]}
    return found["cause"]


def degrade_and_recover(
    client: MessageLog,
    cwd: Path,
    provider: FakeProviderServer,
    clear: Callable[[], None],
    kind: str,
) -> str:
    """Drive ``client`` (initialized) over a store holding ``crashed_session``, unwritable
    until ``clear`` is called; returns the cause the refusals named."""
    listed = client.reply(client.request("session/list", {}))["result"]
    assert [s["sessionId"] for s in listed["sessions"]] == ["sess_1"]
    params = {"sessionId": "sess_1", "cwd": str(cwd), "mcpServers": []}
    assert "result" in client.reply(client.request("session/load", params))
    replayed = client.updates("sess_1")
    assert replayed[: len(TURN)] == NUMBERED_TURN
    # Not discarded yet: the store could not be written.
    assert lifecycle(replayed)["call_2"] == ["preparing"]

    new = {"cwd": str(cwd), "mcpServers": []}
    cause = _refused(client.reply(client.request("session/new", new)))
    assert _refused(client.reply(client.prompt("sess_1", "go on"))) == cause

    clear()
    provider.enqueue(sc.ok(sc.text_turn(kind, "Written again.")))
    session_id = client.reply(client.request("session/new", new))["result"]["sessionId"]
    reply = client.reply(client.prompt(session_id, "and now?"))
    assert reply["result"]["stopReason"] == "end_turn", reply
    return cause


def discarded_after_recovery(db: Path) -> list[str]:
    """The lifecycle of the card ``crashed_session`` left open, as stored now."""
    with SessionStore(db) as store:
        return lifecycle(list(store.sessions.load("sess_1").frames))["call_2"]


def empty_and_recover(
    client: MessageLog,
    cwd: Path,
    provider: FakeProviderServer,
    clear: Callable[[], None],
    kind: str,
) -> str:
    """Drive ``client`` (initialized) over a data directory that held no store and could
    not be written until ``clear`` is called: no session listed, none found, new ones
    refused by cause, then taken; returns the cause the refusals named."""
    listed = client.reply(client.request("session/list", {}))["result"]
    assert listed == {"sessions": [], "nextCursor": None}, listed
    params = {"sessionId": "sess_1", "cwd": str(cwd), "mcpServers": []}
    missing = client.reply(client.request("session/load", params))
    assert missing.get("error", {}).get("code") == SESSION_NOT_FOUND, missing
    new = {"cwd": str(cwd), "mcpServers": []}
    cause = _refused(client.reply(client.request("session/new", new)))
    assert _refused(client.reply(client.request("session/new", new))) == cause

    clear()
    provider.enqueue(sc.ok(sc.text_turn(kind, "Written at last.")))
    session_id = client.reply(client.request("session/new", new))["result"]["sessionId"]
    reply = client.reply(client.prompt(session_id, "and now?"))
    assert reply["result"]["stopReason"] == "end_turn", reply
    listed = client.reply(client.request("session/list", {}))["result"]
    assert [s["sessionId"] for s in listed["sessions"]] == [session_id], listed
    return cause


def locked_and_recover(
    client: MessageLog, cwd: Path, db: Path, provider: FakeProviderServer, kind: str
) -> str:
    """Drive ``client`` (initialized, with one session stored in ``db``) while another
    process holds ``db``'s write lock: the sessions listed, a new one refused by cause
    (-32004, never -32603); then, the lock released, a new session taken. Returns the
    cause the refusal named."""
    new = {"cwd": str(cwd), "mcpServers": []}
    with write_locked(db):
        listed = client.reply(client.request("session/list", {}))
        assert len(listed.get("result", {}).get("sessions", [])) == 1, listed
        cause = _refused(client.reply(client.request("session/new", new), timeout=120))
        listed = client.reply(client.request("session/list", {}))
        assert len(listed.get("result", {}).get("sessions", [])) == 1, listed
    provider.enqueue(sc.ok(sc.text_turn(kind, "Unlocked.")))
    session_id = client.reply(client.request("session/new", new))["result"]["sessionId"]
    reply = client.reply(client.prompt(session_id, "and now?"))
    assert reply["result"]["stopReason"] == "end_turn", reply
    return cause
