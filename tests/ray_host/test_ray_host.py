"""``RayHost``: sessions on shard actors of a real local Ray cluster, driven through the boundary.

One cluster (two CPUs, 127.0.0.1) and one host with two shards serve the
whole module; the shards build their runtimes against the loopback provider
and journal into a store the front also reads, as ``toolprep serve --ray``
runs them. Each test closes the sessions it opened, so each starts with both
shards empty and the least loaded placement is predictable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.runtime import scenarios as sc
from tests.session_host.recording import RecordingFrameSink
from tests.support.processes import gone_within, pid_from
from tests.support.runtime_harness import (
    TURN_END,
    check_cards,
    is_discarded,
    is_preparing,
    lifecycle,
    message_text,
    provider_base_url,
)
from toolprep.messages.content import TextPart
from toolprep.messages.turns import TurnResult
from toolprep.runtime.kernel.session_host import (
    NO_EDITOR,
    EditorCapabilities,
    FileRead,
    FileWritten,
    ReadTextFile,
    RequestPermission,
    WriteTextFile,
)
from toolprep.runtime.store import SessionStore
from toolprep.runtime.workers.process import WorkerSpec
from toolprep.testing import FakeProviderServer

ray = pytest.importorskip("ray")

from toolprep.runtime.ray_host import (  # noqa: E402  (imports ray)
    RayHost,
    forwarded_environment,
    locate,
)

KIND = "anthropic"
TURN_S = 30.0
SUCCESSOR_S = 120.0
"""A turn that waits for a successor shard: a new Ray worker process that imports the runtime
and reloads the session from the store, which a busy machine slows far more than a turn; only
a hang comes near it."""
WEATHER = ("call_paris", "get_weather", {"city": "Paris"})


@dataclass
class RayUnderTest:
    host: RayHost
    server: FakeProviderServer

    def open(
        self, cwd: Path, editor: EditorCapabilities = NO_EDITOR
    ) -> tuple[str, RecordingFrameSink]:
        sink = RecordingFrameSink()
        return self.host.open_session(cwd, sink, editor=editor), sink

    def prompt(
        self, session_id: str, sink: RecordingFrameSink, text: str = "go"
    ) -> Future[TurnResult]:
        return sink.mark_result(session_id, self.host.prompt(session_id, [TextPart(text)]))

    def shard_pid(self, session_id: str) -> int:
        found = locate(session_id)
        assert found is not None, session_id
        slot, shard = found
        assert slot == self.host.slot_of(session_id)
        pid: int = ray.get(shard.pid.remote(), timeout=TURN_S)
        return pid


@pytest.fixture(scope="module")
def hosted(
    ray_cluster: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RayUnderTest]:
    path = tmp_path_factory.mktemp("ray-data") / "sessions.db"
    with FakeProviderServer() as server:
        store = SessionStore(path)
        config: dict[str, Any] = {
            "kind": KIND,
            "base_url": provider_base_url(KIND, server),
            "store": str(path),
        }
        spec = WorkerSpec("tests.session_host.worker_runtime:build", config)
        host = RayHost(spec, shards=2, store=store)
        try:
            yield RayUnderTest(host, server)
        finally:
            host.shutdown(timeout=10)
            store.close()


def test_sessions_go_to_the_least_loaded_shard_and_the_registry_finds_them(
    hosted: RayUnderTest, tmp_path: Path
) -> None:
    opened = [hosted.open(tmp_path) for _ in range(2)]
    assert {hosted.host.slot_of(session_id) for session_id, _ in opened} == {0, 1}
    pids = {hosted.shard_pid(session_id) for session_id, _ in opened}
    assert pids == set(hosted.host.worker_pids()) and len(pids) == 2
    for n, (session_id, sink) in enumerate(opened):
        call = (f"call_{n}", "get_weather", {"city": "Paris"})
        hosted.server.enqueue(
            sc.ok(sc.calls_turn(KIND, [call])), sc.ok(sc.text_turn(KIND, "Sunny."))
        )
        assert hosted.prompt(session_id, sink).result(TURN_S).stop_reason == "end_turn"
        frames = sink.frames()
        assert frames[-1] == TURN_END
        check_cards(frames)
        assert lifecycle(frames) == {f"call_{n}": ["preparing", "in_progress", "completed"]}
        assert message_text(frames) == "Sunny."
        assert sink.encoded_frames == len(frames) - 1  # relayed as the shard serialised them
    for session_id, _ in opened:
        hosted.host.close_session(session_id)
        assert locate(session_id) is None


def test_cancel_discards_every_card_before_the_cancelled_reply(
    hosted: RayUnderTest, tmp_path: Path
) -> None:
    hosted.server.enqueue(sc.prepared_then_stall(KIND, WEATHER))
    session_id, sink = hosted.open(tmp_path)
    reply = hosted.prompt(session_id, sink)
    sink.wait_until(lambda events: any(isinstance(e, dict) and is_preparing(e) for _, e in events))
    assert not reply.done()
    hosted.host.cancel(session_id)
    assert reply.result(TURN_S).stop_reason == "cancelled"
    hosted.host.close_session(session_id)
    frames = sink.frames()
    assert frames[-1] == TURN_END
    check_cards(frames)
    assert lifecycle(frames) == {"call_paris": ["preparing", "discarded"]}


def test_permission_and_editor_requests_round_trip_to_the_caller(
    hosted: RayUnderTest, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("on disk\n")
    editor = EditorCapabilities(read_text_file=True, write_text_file=True)
    session_id, sink = hosted.open(tmp_path, editor)

    command = sc.shell("echo ran > marker.txt", "call_shell")
    hosted.server.enqueue(sc.ok(sc.calls_turn(KIND, [command])), sc.ok(sc.text_turn(KIND)))
    reply = hosted.prompt(session_id, sink)
    asked = sink.wait_for_request(RequestPermission, TURN_S)
    assert asked.tool_call["toolCallId"] == "call_shell"
    assert not reply.done()
    assert hosted.host.answer_permission(session_id, asked.request_id, "allow_once")
    assert reply.result(TURN_S).stop_reason == "end_turn"
    assert not hosted.host.answer_permission(session_id, asked.request_id, "allow_once")
    assert (tmp_path / "marker.txt").read_text() == "ran\n"

    read = ("call_read", "read_file", {"path": "notes.txt"})
    hosted.server.enqueue(sc.ok(sc.calls_turn(KIND, [read])), sc.ok(sc.text_turn(KIND)))
    seen = len(hosted.server.requests)
    reply = hosted.prompt(session_id, sink)
    asked_read = sink.wait_for_request(ReadTextFile, TURN_S)
    assert asked_read.path == str((tmp_path / "notes.txt").resolve())
    assert hosted.host.answer_editor(session_id, asked_read.request_id, FileRead("unsaved\n"))
    assert reply.result(TURN_S).stop_reason == "end_turn"
    sent_back = json.dumps(hosted.server.requests[seen + 1].body)
    assert "unsaved" in sent_back

    hosted.host.close_session(session_id)
    frames = sink.frames()
    check_cards(frames)
    assert {call: steps[-1] for call, steps in lifecycle(frames).items()} == {
        "call_shell": "completed",
        "call_read": "completed",
    }

    writer, writer_sink = hosted.open(tmp_path, EditorCapabilities(write_text_file=True))
    write = ("call_write", "write_file", {"path": "notes.txt", "content": "new text\n"})
    hosted.server.enqueue(sc.ok(sc.calls_turn(KIND, [write])), sc.ok(sc.text_turn(KIND)))
    reply = hosted.prompt(writer, writer_sink)
    asked_write = writer_sink.wait_for_request(WriteTextFile, TURN_S)
    assert asked_write.content == "new text\n"
    assert hosted.host.answer_editor(writer, asked_write.request_id, FileWritten())
    assert reply.result(TURN_S).stop_reason == "end_turn"
    assert (tmp_path / "notes.txt").read_text() == "on disk\n"  # the editor wrote it, not the shard
    hosted.host.close_session(writer)
    written = writer_sink.frames()
    check_cards(written)
    assert lifecycle(written) == {"call_write": ["preparing", "in_progress", "completed"]}


@pytest.mark.timeout(SUCCESSOR_S + 180)  # the successor's wait, plus the turns before and after it
def test_a_killed_shard_ends_its_turns_and_its_sessions_reload_from_the_store(
    hosted: RayUnderTest, tmp_path: Path
) -> None:
    victim_dir, bystander_dir = tmp_path / "victim", tmp_path / "bystander"
    victim_dir.mkdir()
    bystander_dir.mkdir()
    victim, victim_sink = hosted.open(victim_dir)
    bystander, bystander_sink = hosted.open(bystander_dir)
    assert hosted.host.slot_of(victim) != hosted.host.slot_of(bystander)
    victim_pid, bystander_pid = hosted.shard_pid(victim), hosted.shard_pid(bystander)

    hosted.server.enqueue(sc.ok(sc.text_turn(KIND, "Noted.")))
    remembered = hosted.prompt(victim, victim_sink, "remember the word teapot")
    assert remembered.result(TURN_S).stop_reason == "end_turn"

    # The victim's turn runs a command whose background child would outlive a plain kill.
    long_call = sc.shell("sleep 300 & echo $! > sleep.pid; wait", "call_v")
    hosted.server.enqueue(sc.ok(sc.calls_turn(KIND, [long_call])))
    victim_turn = hosted.prompt(victim, victim_sink)
    asked = victim_sink.wait_for_request(RequestPermission, TURN_S)
    assert hosted.host.answer_permission(victim, asked.request_id, "allow_once")
    sleeper = pid_from(victim_dir / "sleep.pid", TURN_S)

    slow_call = sc.shell("sleep 2; echo finished", "call_b")
    hosted.server.enqueue(sc.ok(sc.calls_turn(KIND, [slow_call])), sc.ok(sc.text_turn(KIND)))
    bystander_turn = hosted.prompt(bystander, bystander_sink)
    asked = bystander_sink.wait_for_request(RequestPermission, TURN_S)
    assert hosted.host.answer_permission(bystander, asked.request_id, "allow_once")

    found = locate(victim)
    assert found is not None
    ray.kill(found[1])
    lost = victim_turn.result(TURN_S)
    assert lost.stop_reason is None
    assert lost.error is not None and "killed by `ray.kill`" in lost.error, lost.error
    assert gone_within(sleeper, TURN_S)  # its shard's tools do not outlive it

    assert bystander_turn.result(TURN_S).stop_reason == "end_turn"
    assert hosted.shard_pid(bystander) == bystander_pid  # the other shard noticed nothing
    assert "finished" in str(bystander_sink.frames())
    assert lifecycle(bystander_sink.frames()) == {
        "call_b": ["preparing", "in_progress", "completed"]
    }

    # A successor shard took the victim over, its history reloaded from the store.
    hosted.server.enqueue(sc.ok(sc.text_turn(KIND, "Back again.")))
    seen = len(hosted.server.requests)
    again = hosted.prompt(victim, victim_sink, "still there?")
    assert again.result(SUCCESSOR_S).stop_reason == "end_turn"
    assert "teapot" in json.dumps(hosted.server.requests[seen].body)
    assert hosted.shard_pid(victim) not in (victim_pid, bystander_pid)
    frames = victim_sink.frames()
    check_cards(frames)
    assert lifecycle(frames) == {"call_v": ["preparing", "in_progress", "discarded"]}
    assert message_text(frames).endswith("Back again.")

    # ``session/load`` still works: the replay ends every card, then the session goes on.
    # A load soon after the close goes back to the shard that closed it, whatever the
    # fillers did to the shards' loads: that shard may still be writing the close.
    served_by = hosted.host.slot_of(victim)
    hosted.host.close_session(victim)
    fillers = [hosted.open(tmp_path)[0] for _ in range(2)]
    loaded = RecordingFrameSink()
    hosted.host.load_session(victim, loaded)
    assert hosted.host.slot_of(victim) == served_by
    replayed = loaded.frames()
    check_cards(replayed)
    # The store keeps each card's opening, its start (written before the shell command ran)
    # and its end; the successor ended the open one as one that may have run.
    assert lifecycle(replayed) == {"call_v": ["preparing", "in_progress", "discarded"]}
    [ended] = [f for f in replayed if f.get("toolCallId") == "call_v" and is_discarded(f)]
    assert ended["_meta"]["discardReason"] == "interrupted"
    hosted.server.enqueue(sc.ok(sc.text_turn(KIND, "Loaded.")))
    reply = loaded.mark_result(victim, hosted.host.prompt(victim, [TextPart("and now?")]))
    assert reply.result(TURN_S).stop_reason == "end_turn"
    assert message_text(loaded.frames()).endswith("Loaded.")
    for session_id in (victim, bystander, *fillers):
        hosted.host.close_session(session_id)


def test_the_front_forwards_the_provider_settings_and_every_otel_variable() -> None:
    environ = {
        "ANTHROPIC_API_KEY": "sk-test",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_SERVICE_NAME": "team",
        "OTEL_TRACES_EXPORTER": "",
        "HOME": "/home/someone",
        "TOOLPREP_WORKER_METRICS": "1",
    }
    assert forwarded_environment(environ) == {
        "ANTHROPIC_API_KEY": "sk-test",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_SERVICE_NAME": "team",
    }
