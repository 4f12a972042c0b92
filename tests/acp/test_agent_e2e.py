"""``toolprep acp`` end to end: the official ACP client SDK on one side, a loopback
provider speaking each wire format on the other. Every message the agent sends is
validated against the official schema by the client's observer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from acp import text_block

from tests.runtime import scenarios as sc
from tests.support.agent_process import (
    RecordingClient,
    SharedSdkAgents,
)
from tests.support.runtime_harness import check_cards, is_preparing, lifecycle

PROVIDERS = ["anthropic", "openai"]


def _read_call(call_id: str = "call_read") -> sc.Call:
    return (call_id, "read_file", {"path": "README.md"})


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("kind", PROVIDERS)
async def test_multi_step_turn_streams_the_whole_lifecycle(
    kind: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    (tmp_path / "README.md").write_text("# Hello from the project\n")
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(kind, client)
    server.enqueue(
        sc.ok(sc.calls_turn(kind, [_read_call()], text="Let me read it."), pace_s=0.002),
        sc.ok(sc.text_turn(kind, "It says hello.")),
    )
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("What is this?")])
    assert reply.stop_reason == "end_turn"
    frames = client.frames(session.session_id)
    check_cards(frames)
    assert lifecycle(frames) == {"call_read": ["preparing", "in_progress", "completed"]}
    completed = next(f for f in frames if f.get("status") == "completed")
    assert "Hello from the project" in str(completed["content"])
    started = next(f for f in frames if f.get("status") == "in_progress")
    assert started["rawInput"] == {"path": "README.md"} and started["kind"] == "read"
    assert started["locations"][0]["path"].endswith("README.md")
    texts = "".join(
        f["content"]["text"] for f in frames if f["sessionUpdate"] == "agent_message_chunk"
    )
    assert texts == "Let me read it.It says hello."
    # The tool result reached the model in its own format on the second request.
    assert "Hello from the project" in str(server.requests[1].body)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("kind", PROVIDERS)
async def test_retry_and_fallback_discard_cards(
    kind: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    paris, tokyo = (
        ("call_a", "get_weather", {"city": "Paris"}),
        ("call_b", "read_file", {"path": "x"}),
    )
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(
        kind, client, "--model", "primary", "--fallback-model", "backup"
    )
    server.enqueue(
        sc.prepared_then_error(kind, paris),  # retried on the primary model
        sc.prepared_then_error(kind, tokyo),
        sc.prepared_then_error(kind, ("call_c", "read_file", {"path": "y"})),
        sc.ok(sc.text_turn(kind, "Recovered.")),  # the fallback model answers
    )
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    frames = client.frames()
    check_cards(frames)
    assert lifecycle(frames) == {
        "call_a": ["preparing", "discarded"],
        "call_b": ["preparing", "discarded"],
        "call_c": ["preparing", "discarded"],
    }
    assert [r.body["model"] for r in server.requests] == [
        "primary",
        "primary",
        "primary",
        "backup",
    ]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("kind", PROVIDERS)
async def test_cancel_mid_stream_replies_cancelled(
    kind: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(kind, client)
    server.enqueue(sc.prepared_then_stall(kind, _read_call()))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    prompt = asyncio.ensure_future(
        conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    )
    await client.wait_for(lambda fs: any(is_preparing(f) for f in fs))
    await conn.cancel(session_id=session.session_id)
    reply = await asyncio.wait_for(prompt, 10)
    assert reply.stop_reason == "cancelled"
    check_cards(client.frames())
    assert lifecycle(client.frames()) == {"call_read": ["preparing", "discarded"]}


@pytest.mark.asyncio(loop_scope="module")
async def test_cancel_mid_permission(tmp_path: Path, shared_sdk_agents: SharedSdkAgents) -> None:
    kind = "anthropic"
    shell = ("call_sh", "run_shell_command", {"command": "echo hi"})
    client = RecordingClient(permission="wait")
    conn, server = await shared_sdk_agents.agent(kind, client)
    server.enqueue(sc.ok(sc.calls_turn(kind, [shell])))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    prompt = asyncio.ensure_future(
        conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    )
    await asyncio.wait_for(client.permission_asked.wait(), 10)
    await conn.cancel(session_id=session.session_id)
    client.permission_release.set()  # the client answers "cancelled", as ACP asks
    reply = await asyncio.wait_for(prompt, 10)
    assert reply.stop_reason == "cancelled"
    check_cards(client.frames())
    # It never ran, so its card never said it did: pending, then failed with the reason.
    assert lifecycle(client.frames()) == {"call_sh": ["preparing", "failed"]}
    assert "Cancelled while waiting for permission" in str(client.frames()[-1])


@pytest.mark.asyncio(loop_scope="module")
async def test_a_permission_request_the_client_cancels_reads_as_a_cancel_mid_permission(
    tmp_path: Path,
    shared_sdk_agents: SharedSdkAgents,
) -> None:
    """The client's "cancelled" answer alone (it may overtake the session's cancel) fails the
    call with the same reason a turn cancel gives, and the turn goes on."""
    kind = "anthropic"
    shell = ("call_sh", "run_shell_command", {"command": "echo hi"})
    client = RecordingClient(permission="wait")
    client.permission_release.set()  # answers "cancelled" as soon as it is asked
    conn, server = await shared_sdk_agents.agent(kind, client)
    server.enqueue(sc.ok(sc.calls_turn(kind, [shell])), sc.ok(sc.text_turn(kind, "Skipped.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    assert lifecycle(client.frames()) == {"call_sh": ["preparing", "failed"]}
    assert "Cancelled while waiting for permission" in str(client.frames())
    assert "nothing was run" in str(server.requests[1].body)  # what the model is told


@pytest.mark.asyncio(loop_scope="module")
async def test_permission_rejected_fails_the_call_and_turn_goes_on(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    kind = "openai"
    shell = ("call_sh", "run_shell_command", {"command": "echo hi"})
    client = RecordingClient(permission="reject_once")
    conn, server = await shared_sdk_agents.agent(kind, client)
    server.enqueue(sc.ok(sc.calls_turn(kind, [shell])), sc.ok(sc.text_turn(kind, "OK, I won't.")))
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    assert lifecycle(client.frames()) == {"call_sh": ["preparing", "failed"]}
    assert "was not allowed by the user" in str(client.frames())
    assert (
        "not allowed" in str(server.requests[1].body).lower()
        or "reject" in str(server.requests[1].body).lower()
    )


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("kind", PROVIDERS)
async def test_two_sessions_on_one_connection_stay_apart(
    kind: str, tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    (tmp_path / "README.md").write_text("readme")
    client = RecordingClient()
    conn, server = await shared_sdk_agents.agent(kind, client)
    server.enqueue(
        sc.ok(sc.calls_turn(kind, [_read_call("call_one")]), pace_s=0.003),
        sc.ok(sc.calls_turn(kind, [_read_call("call_two")]), pace_s=0.003),
        sc.ok(sc.text_turn(kind)),
        sc.ok(sc.text_turn(kind)),
    )
    one = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    two = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    replies = await asyncio.gather(
        conn.prompt(session_id=one.session_id, prompt=[text_block("a")]),
        conn.prompt(session_id=two.session_id, prompt=[text_block("b")]),
    )
    assert [r.stop_reason for r in replies] == ["end_turn", "end_turn"]
    ids_one = set(lifecycle(client.frames(one.session_id)))
    ids_two = set(lifecycle(client.frames(two.session_id)))
    assert len(ids_one) == 1 and len(ids_two) == 1 and not ids_one & ids_two
    for sid in (one.session_id, two.session_id):
        check_cards(client.frames(sid))


@pytest.mark.asyncio(loop_scope="module")
async def test_file_tools_go_through_the_editor_when_it_offers_fs(
    tmp_path: Path, shared_sdk_agents: SharedSdkAgents
) -> None:
    kind = "anthropic"
    (tmp_path / "README.md").write_text("saved on disk\n")
    write = ("call_write", "write_file", {"path": "notes/NOTES.md", "content": "from the model\n"})
    client = RecordingClient()
    client.buffers[str(tmp_path / "README.md")] = "unsaved editor buffer\n"
    conn, server = await shared_sdk_agents.agent(kind, client, client_fs=True)
    server.enqueue(
        sc.ok(sc.calls_turn(kind, [_read_call(), write])),
        sc.ok(sc.text_turn(kind, "Done.")),
    )
    session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    reply = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
    assert reply.stop_reason == "end_turn"
    check_cards(client.frames())
    # The read saw the editor's unsaved text, not the file on disk.
    assert "unsaved editor buffer" in str(server.requests[1].body)
    assert "saved on disk" not in str(server.requests[1].body)
    assert client.written == [(str(tmp_path / "notes" / "NOTES.md"), "from the model\n")]
    assert lifecycle(client.frames()) == {
        "call_read": ["preparing", "in_progress", "completed"],
        "call_write": ["preparing", "in_progress", "completed"],
    }
    methods = [m.get("method") for m in client.raw]
    assert "fs/read_text_file" in methods and "fs/write_text_file" in methods
