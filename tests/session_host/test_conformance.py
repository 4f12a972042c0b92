"""What every ``SessionHost`` must do, driven through the boundary only.

Each test runs against every implementation in ``hosts.IMPLEMENTATIONS`` with
real sessions streaming from the loopback provider. The assertions are the
guarantees ``runtime.session_host`` documents: ordered frames with the whole
card lifecycle before the result, discards before a ``cancelled`` result,
requests that cross as plain data and are answered through the host, clear
errors for unknown sessions, and sessions that never see each other's output.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.runtime import scenarios as sc
from tests.session_host.hosts import HostUnderTest
from tests.session_host.recording import RecordingFrameSink
from tests.support.processes import none_with_argument_within, pids_with_argument
from tests.support.runtime_harness import (
    TURN_END,
    check_cards,
    is_preparing,
    lifecycle,
    message_text,
    unnumbered,
)
from toolprep.messages.content import TextPart
from toolprep.messages.frames import user_message_chunk
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorCapabilities,
    EditorFailed,
    FileRead,
    FileWritten,
    HostClosed,
    ReadTextFile,
    RequestPermission,
    SessionHost,
    UnknownSession,
    WriteTextFile,
)
from toolprep.runtime.mcp.specs import StdioServer

TURN_S = 20.0
WEATHER = ("call_paris", "get_weather", {"city": "Paris"})


def _prompt(
    hosted: HostUnderTest, session_id: str, sink: RecordingFrameSink, text: str = "hello"
) -> Future[TurnResult]:
    return sink.mark_result(session_id, hosted.host.prompt(session_id, [TextPart(text)]))


def _open(hosted: HostUnderTest, **kw: Any) -> tuple[str, RecordingFrameSink]:
    sink = RecordingFrameSink()
    return hosted.host.open_session(hosted.cwd, sink, **kw), sink


def _assert_plain_data(request: ClientRequest) -> None:
    """A request must be able to cross a process boundary: picklable and JSON-able."""
    assert pickle.loads(pickle.dumps(request)) == request
    json.dumps(dataclasses.asdict(request))


def test_prompt_streams_the_card_lifecycle_in_order_then_resolves(hosted: HostUnderTest) -> None:
    kind = hosted.kind
    hosted.server.enqueue(
        sc.ok(sc.calls_turn(kind, [WEATHER])), sc.ok(sc.text_turn(kind, "Sunny in Paris."))
    )
    session_id, sink = _open(hosted)
    result = _prompt(hosted, session_id, sink).result(TURN_S)
    assert result.stop_reason == "end_turn"
    frames = sink.frames()
    assert frames[-1] == TURN_END
    check_cards(frames)
    assert lifecycle(frames) == {"call_paris": ["preparing", "in_progress", "completed"]}
    assert message_text(frames) == "Sunny in Paris."
    assert sink.session_ids() == {session_id}
    assert sink.requests() == []


@pytest.mark.process  # the session starts an MCP server process
def test_mcp_servers_run_with_the_session_and_stop_when_it_closes(
    hosted: HostUnderTest,
) -> None:
    """Wherever the session runs, its MCP server runs beside it and goes with it."""
    tag = f"conformance-{uuid.uuid4().hex}"
    server = StdioServer(
        "echo",
        sys.executable,
        ("-m", "tests.support.mcp_echo_server", "--tag", tag),
        (("PYTHONPATH", str(REPO_ROOT)),),
    )
    probe = ("call_probe", "mcp__echo__env_has", {"name": "PYTHONPATH"})
    kind = hosted.kind
    hosted.server.enqueue(sc.ok(sc.calls_turn(kind, [probe])), sc.ok(sc.text_turn(kind)))
    session_id, sink = _open(hosted, mcp_servers=[server])
    assert len(pids_with_argument(tag)) == 1
    assert _prompt(hosted, session_id, sink).result(TURN_S).stop_reason == "end_turn"
    assert "mcp__echo__env_has" in str(hosted.server.requests[0].body)
    frames = sink.frames()
    check_cards(frames)
    assert lifecycle(frames) == {"call_probe": ["preparing", "in_progress", "completed"]}
    assert "PYTHONPATH is set" in str(frames)
    hosted.host.close_session(session_id)
    assert none_with_argument_within(tag, TURN_S)


def test_cancel_discards_every_card_before_the_cancelled_result(hosted: HostUnderTest) -> None:
    hosted.server.enqueue(sc.prepared_then_stall(hosted.kind, WEATHER))
    session_id, sink = _open(hosted)
    reply = _prompt(hosted, session_id, sink)
    sink.wait_until(lambda events: any(isinstance(e, dict) and is_preparing(e) for _, e in events))
    assert not reply.done()
    hosted.host.cancel(session_id)
    assert reply.result(TURN_S).stop_reason == "cancelled"
    hosted.host.close_session(session_id)  # nothing may follow the result, even at close
    frames = sink.frames()
    assert frames[-1] == TURN_END
    check_cards(frames)
    assert lifecycle(frames) == {"call_paris": ["preparing", "discarded"]}


def test_an_accepted_prompt_is_recorded_first_and_a_refused_one_not_at_all(
    hosted: HostUnderTest,
) -> None:
    hosted.server.enqueue(sc.prepared_then_stall(hosted.kind, WEATHER))
    session_id, sink = _open(hosted)
    asked = UserMessage(
        "msg_asked", ({"type": "text", "text": "hello"}, {"type": "text", "text": "!"})
    )
    reply = sink.mark_result(session_id, hosted.host.prompt(session_id, [TextPart("hello")], asked))
    sink.wait_until(lambda events: any(isinstance(e, dict) and is_preparing(e) for _, e in events))
    # A turn runs: this prompt is refused, so it never happened for a replay either.
    refused = UserMessage("msg_refused", ({"type": "text", "text": "again"},))
    assert hosted.host.prompt(session_id, [TextPart("again")], refused).result(TURN_S).error
    hosted.host.cancel(session_id)
    assert reply.result(TURN_S).stop_reason == "cancelled"
    frames = sink.frames()
    assert [unnumbered(f) for f in frames[:2]] == [
        user_message_chunk("msg_asked", block) for block in asked.blocks
    ]
    assert [f for f in frames if f.get("sessionUpdate") == "user_message_chunk"] == frames[:2]


def test_cancel_of_an_idle_session_does_nothing(hosted: HostUnderTest) -> None:
    hosted.server.enqueue(sc.ok(sc.text_turn(hosted.kind, "Still here.")))
    session_id, sink = _open(hosted)
    hosted.host.cancel(session_id)
    assert _prompt(hosted, session_id, sink).result(TURN_S).stop_reason == "end_turn"
    assert message_text(sink.frames()) == "Still here."


@pytest.mark.process  # the scenario runs a shell command
@pytest.mark.parametrize(
    ("outcome", "ran", "terminal"),
    [("allow_once", True, "completed"), ("reject_once", False, "failed")],
)
def test_permission_request_crosses_the_boundary_and_the_callers_answer_decides(
    hosted: HostUnderTest, outcome: str, ran: bool, terminal: str
) -> None:
    kind = hosted.kind
    command = sc.shell("echo ran > marker.txt", "call_shell")
    hosted.server.enqueue(sc.ok(sc.calls_turn(kind, [command])), sc.ok(sc.text_turn(kind)))
    session_id, sink = _open(hosted)
    reply = _prompt(hosted, session_id, sink)
    asked = sink.wait_for_request(RequestPermission)
    _assert_plain_data(asked)
    assert asked.tool_call["toolCallId"] == "call_shell"
    assert "echo ran > marker.txt" in json.dumps(asked.tool_call)
    assert not reply.done()
    assert hosted.host.answer_permission(session_id, asked.request_id, outcome)  # type: ignore[arg-type]
    assert reply.result(TURN_S).stop_reason == "end_turn"
    assert not hosted.host.answer_permission(session_id, asked.request_id, "allow_once")
    assert (hosted.cwd / "marker.txt").exists() is ran
    frames = sink.frames()
    check_cards(frames)
    assert lifecycle(frames)["call_shell"][-1] == terminal
    assert sink.requests() == [asked]


def test_a_permission_answer_that_is_no_outcome_is_refused(hosted: HostUnderTest) -> None:
    kind = hosted.kind
    command = sc.shell("echo ran > marker.txt", "call_shell")
    hosted.server.enqueue(sc.ok(sc.calls_turn(kind, [command])), sc.ok(sc.text_turn(kind)))
    session_id, sink = _open(hosted)
    reply = _prompt(hosted, session_id, sink)
    asked = sink.wait_for_request(RequestPermission)
    with pytest.raises(ValueError, match=r"unknown permission outcome 'maybe'.*allow_once"):
        hosted.host.answer_permission(session_id, asked.request_id, "maybe")  # type: ignore[arg-type]
    assert hosted.host.answer_permission(session_id, asked.request_id, "reject_once")
    assert reply.result(TURN_S).stop_reason == "end_turn"


def test_editor_read_crosses_the_boundary_and_the_answer_is_what_the_model_sees(
    hosted: HostUnderTest,
) -> None:
    kind = hosted.kind
    (hosted.cwd / "notes.txt").write_text("on disk\n")
    read = ("call_read", "read_file", {"path": "notes.txt"})
    hosted.server.enqueue(sc.ok(sc.calls_turn(kind, [read])), sc.ok(sc.text_turn(kind)))
    session_id, sink = _open(hosted, editor=EditorCapabilities(read_text_file=True))
    reply = _prompt(hosted, session_id, sink)
    asked = sink.wait_for_request(ReadTextFile)
    _assert_plain_data(asked)
    assert asked.path == str((hosted.cwd / "notes.txt").resolve())
    assert hosted.host.answer_editor(session_id, asked.request_id, FileRead("unsaved buffer\n"))
    assert reply.result(TURN_S).stop_reason == "end_turn"
    sent_back = json.dumps(hosted.server.requests[1].body)
    assert "unsaved buffer" in sent_back and "on disk" not in sent_back
    check_cards(sink.frames())
    assert lifecycle(sink.frames())["call_read"][-1] == "completed"


def test_editor_write_goes_to_the_editor_not_the_disk(hosted: HostUnderTest) -> None:
    kind = hosted.kind
    (hosted.cwd / "notes.txt").write_text("on disk\n")
    write = ("call_write", "write_file", {"path": "notes.txt", "content": "new text\n"})
    hosted.server.enqueue(sc.ok(sc.calls_turn(kind, [write])), sc.ok(sc.text_turn(kind)))
    session_id, sink = _open(hosted, editor=EditorCapabilities(write_text_file=True))
    reply = _prompt(hosted, session_id, sink)
    last = sink.wait_for_request(WriteTextFile)
    _assert_plain_data(last)
    assert last.content == "new text\n"
    assert hosted.host.answer_editor(session_id, last.request_id, FileWritten())
    assert reply.result(TURN_S).stop_reason == "end_turn"
    assert (hosted.cwd / "notes.txt").read_text() == "on disk\n"
    check_cards(sink.frames())
    assert lifecycle(sink.frames())["call_write"][-1] == "completed"


class AnsweringOnTheSpot(RecordingFrameSink):
    """A caller that answers each request inside ``send_request``: an editor whose reply
    came back before the agent had finished handing the request on."""

    def __init__(self, host: SessionHost) -> None:
        super().__init__()
        self._host = host
        self.taken: list[bool] = []

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        super().send_request(session_id, request)
        match request:
            case RequestPermission(request_id=request_id):
                taken = self._host.answer_permission(session_id, request_id, "allow_once")
            case ReadTextFile(request_id=request_id):
                answer = FileRead("unsaved buffer\n")
                taken = self._host.answer_editor(session_id, request_id, answer)
            case WriteTextFile(request_id=request_id):
                taken = self._host.answer_editor(session_id, request_id, FileWritten())
        self.taken.append(taken)


@pytest.mark.process  # the scenario runs a shell command
def test_a_caller_may_answer_inside_send_request(hosted: HostUnderTest) -> None:
    """Each answer is taken, so no tool waits out a timeout for it."""
    kind = hosted.kind
    (hosted.cwd / "notes.txt").write_text("on disk\n")
    calls = [
        sc.shell("echo ran > marker.txt", "call_shell"),
        ("call_read", "read_file", {"path": "notes.txt"}),
        ("call_write", "write_file", {"path": "out.txt", "content": "new text\n"}),
    ]
    hosted.server.enqueue(sc.ok(sc.calls_turn(kind, calls)), sc.ok(sc.text_turn(kind)))
    sink = AnsweringOnTheSpot(hosted.host)
    editor = EditorCapabilities(read_text_file=True, write_text_file=True)
    session_id = hosted.host.open_session(hosted.cwd, sink, editor=editor)
    assert _prompt(hosted, session_id, sink).result(TURN_S).stop_reason == "end_turn"
    assert sorted(type(r).__name__ for r in sink.requests()) == [
        "ReadTextFile",
        "RequestPermission",
        "WriteTextFile",
    ]
    assert sink.taken == [True, True, True]
    assert (hosted.cwd / "marker.txt").read_text() == "ran\n"
    assert not (hosted.cwd / "out.txt").exists()  # written through the editor
    assert "unsaved buffer" in json.dumps(hosted.server.requests[1].body)
    frames = sink.frames()
    check_cards(frames)
    assert {call: states[-1] for call, states in lifecycle(frames).items()} == {
        "call_shell": "completed",
        "call_read": "completed",
        "call_write": "completed",
    }


def test_an_editor_failure_fails_the_tool_with_its_reason(hosted: HostUnderTest) -> None:
    kind = hosted.kind
    read = ("call_read", "read_file", {"path": "notes.txt"})
    hosted.server.enqueue(sc.ok(sc.calls_turn(kind, [read])), sc.ok(sc.text_turn(kind)))
    session_id, sink = _open(hosted, editor=EditorCapabilities(read_text_file=True))
    reply = _prompt(hosted, session_id, sink)
    asked = sink.wait_for_request(ReadTextFile)
    failed = EditorFailed("the editor could not read_text_file: no such buffer")
    assert hosted.host.answer_editor(session_id, asked.request_id, failed)
    assert reply.result(TURN_S).stop_reason == "end_turn"
    assert "no such buffer" in json.dumps(hosted.server.requests[1].body)
    assert lifecycle(sink.frames())["call_read"][-1] == "failed"


def test_closing_settles_an_unanswered_request_and_ends_the_turn(hosted: HostUnderTest) -> None:
    command = sc.shell("echo ran > marker.txt", "call_shell")
    hosted.server.enqueue(sc.ok(sc.calls_turn(hosted.kind, [command])))
    session_id, sink = _open(hosted)
    reply = _prompt(hosted, session_id, sink)
    asked = sink.wait_for_request(RequestPermission)
    hosted.host.close_session(session_id)
    assert reply.result(TURN_S).stop_reason == "cancelled"
    assert not (hosted.cwd / "marker.txt").exists()
    check_cards(sink.frames())
    with pytest.raises(UnknownSession):
        hosted.host.answer_permission(session_id, asked.request_id, "allow_once")


def test_a_closed_session_is_unknown_afterwards(hosted: HostUnderTest) -> None:
    hosted.server.enqueue(sc.ok(sc.text_turn(hosted.kind, "Bye.")))
    session_id, sink = _open(hosted)
    assert _prompt(hosted, session_id, sink).result(TURN_S).stop_reason == "end_turn"
    hosted.host.close_session(session_id)
    with pytest.raises(UnknownSession, match=session_id):
        hosted.host.prompt(session_id, [TextPart("again")])
    with pytest.raises(UnknownSession, match=session_id):
        hosted.host.close_session(session_id)


@pytest.mark.parametrize(
    "call",
    [
        "prompt",
        "cancel",
        "close_session",
        "answer_permission",
        "answer_editor",
    ],
)
def test_an_unknown_session_id_is_a_clear_error(hosted: HostUnderTest, call: str) -> None:
    host = hosted.host
    calls: dict[str, Callable[[], object]] = {
        "prompt": lambda: host.prompt("sess_nope", [TextPart("x")]),
        "cancel": lambda: host.cancel("sess_nope"),
        "close_session": lambda: host.close_session("sess_nope"),
        "answer_permission": lambda: host.answer_permission("sess_nope", "r1", "allow_once"),
        "answer_editor": lambda: host.answer_editor("sess_nope", "r1", FileWritten()),
    }
    with pytest.raises(UnknownSession, match="Session not found: sess_nope"):
        calls[call]()


def test_a_session_id_already_open_is_refused(hosted: HostUnderTest) -> None:
    session_id, _ = _open(hosted)
    with pytest.raises(ValueError, match=f"already open: {session_id}"):
        hosted.host.open_session(hosted.cwd, RecordingFrameSink(), session_id)


@pytest.mark.own_host  # shuts its host down
def test_a_shut_down_host_opens_no_session(hosted: HostUnderTest) -> None:
    hosted.host.shutdown(timeout=5)
    with pytest.raises(HostClosed, match="shut down"):
        hosted.host.open_session(hosted.cwd, RecordingFrameSink())


def test_two_sessions_frames_never_mix(hosted: HostUnderTest) -> None:
    kind = hosted.kind
    texts = {"alpha " * 40, "omega " * 40}
    hosted.server.enqueue(
        *(sc.ok(sc.text_turn(kind, text, fragment_size=3)) for text in sorted(texts))
    )
    opened = [_open(hosted) for _ in range(2)]
    replies = [_prompt(hosted, sid, sink) for sid, sink in opened]
    assert [r.result(TURN_S).stop_reason for r in replies] == ["end_turn", "end_turn"]
    assert {message_text(sink.frames()) for _, sink in opened} == texts
    for session_id, sink in opened:
        assert sink.session_ids() == {session_id}
        assert sink.frames()[-1] == TURN_END
