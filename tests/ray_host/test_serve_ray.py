"""``toolprep serve --ray ADDRESS --shards 2``: the daemon on an existing Ray cluster, end to end.

The test starts a local cluster on 127.0.0.1 and joins it as a driver of
its own (to find and kill a shard, as an operator's script would); the real
daemon process joins the same cluster by address, its shards build the CLI's
runtime against the loopback provider, and real WebSocket clients drive it.
The provider key reaches the shards only through the daemon: the cluster was
started without it. The daemon's ``/metrics`` gathers what the shards counted.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.daemon.telemetry_daemon import get, http_base, sample
from tests.runtime import scenarios as sc
from tests.support.daemon_process import (
    DaemonProcess,
    daemon_environment,
    refused_start,
)
from tests.support.message_log import Message
from tests.support.processes import gone_within, pid_from
from tests.support.runtime_harness import check_cards, lifecycle, message_text, provider_base_url
from tests.support.ws_client import WsClient
from toolprep.testing import FakeProviderServer
from toolprep.testing.daemon import serve_command

ray = pytest.importorskip("ray")

from toolprep.runtime.ray_host import locate  # noqa: E402  (imports ray)

KIND = "anthropic"
PERMISSION = "session/request_permission"
DEADLINE_S = 60.0
NAME = "serve-under-test"  # this daemon's name on the cluster (--ray-name)


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture(scope="module")
def daemon(
    ray_cluster: ModuleType,
    provider: FakeProviderServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[DaemonProcess]:
    address = ray_cluster.get_runtime_context().gcs_address
    root = tmp_path_factory.mktemp("serve-ray")
    command = serve_command(
        KIND,
        provider_base_url(KIND, provider),
        "--data-dir",
        str(root / "data"),
        "--ray",
        address,
        "--shards",
        "2",
        "--ray-name",
        NAME,
        # The test reads the pid a command wrote: unsandboxed, it is the machine's pid.
        "--sandbox",
        "off",
    )
    env = daemon_environment()
    started = DaemonProcess(command, env, root, root / "daemon.log", start_timeout=120.0)
    try:
        yield started
    finally:
        started.kill()


def _asked(client: WsClient, count: int) -> Message:
    client.wait_for(lambda ms: sum(m.get("method") == PERMISSION for m in ms) >= count, DEADLINE_S)
    return client.requests(PERMISSION)[count - 1]


def test_serve_on_ray_keeps_the_boundary_promises_when_a_shard_is_killed(
    daemon: DaemonProcess, provider: FakeProviderServer, tmp_path: Path
) -> None:
    victim_dir, bystander_dir = tmp_path / "victim", tmp_path / "bystander"
    victim_dir.mkdir()
    bystander_dir.mkdir()
    client = daemon.client()
    try:
        victim = client.start_session(victim_dir)
        bystander = client.result(
            client.request("session/new", {"cwd": str(bystander_dir), "mcpServers": []})
        )["sessionId"]
        # Placed least loaded, and found on the cluster by id from another driver.
        where = {session: locate(session, NAME) for session in (victim, bystander)}
        assert all(found is not None for found in where.values()), where
        assert {found[0] for found in where.values() if found is not None} == {0, 1}

        # A permission request round-trips to the client; the answer decides.
        provider.enqueue(
            sc.ok(sc.calls_turn(KIND, [sc.shell("echo ran > marker.txt", "call_ok")])),
            sc.ok(sc.text_turn(KIND, "Ran it.")),
        )
        turn = client.prompt(victim, "remember the word teapot")
        client.answer_permission(_asked(client, 1), "allow_once")
        assert client.result(turn, DEADLINE_S)["stopReason"] == "end_turn"
        assert (victim_dir / "marker.txt").read_text() == "ran\n"

        # Mid-turn, the victim's shard is killed.
        long_call = sc.shell("sleep 300 & echo $! > sleep.pid; wait", "call_cut")
        provider.enqueue(sc.ok(sc.calls_turn(KIND, [long_call])))
        cut = client.prompt(victim)
        client.answer_permission(_asked(client, 2), "allow_once")
        sleeper = pid_from(victim_dir / "sleep.pid", DEADLINE_S)
        # The kill comes once the client has been shown the call running: the frame that says
        # so crosses the cluster after the command has started, not before.
        client.wait_for(
            lambda _: "in_progress" in lifecycle(client.updates(victim)).get("call_cut", []),
            DEADLINE_S,
        )
        found = where[victim]
        assert found is not None
        ray.kill(found[1])
        error = client.reply(cut, DEADLINE_S)["error"]
        assert "killed by `ray.kill`" in error["message"], error
        assert gone_within(sleeper, DEADLINE_S)  # the shard's tools went with it
        frames = client.updates(victim)
        check_cards(frames)
        assert lifecycle(frames)["call_cut"] == ["preparing", "in_progress", "discarded"]

        # The other shard noticed nothing.
        provider.enqueue(sc.ok(sc.text_turn(KIND, "Unbothered.")))
        assert client.result(client.prompt(bystander), DEADLINE_S)["stopReason"] == "end_turn"
        assert message_text(client.updates(bystander)) == "Unbothered."
        assert locate(bystander, NAME) == where[bystander]

        # The successor reloaded the victim from the store: it still knows the first turn.
        provider.enqueue(sc.ok(sc.text_turn(KIND, "Back again.")))
        seen = len(provider.requests)
        again = client.prompt(victim, "still there?")
        assert client.result(again, DEADLINE_S)["stopReason"] == "end_turn"
        assert "teapot" in str(provider.requests[seen].body)
    finally:
        client.close()

    # ``session/load`` from a new connection replays it, every card terminal.
    reader = daemon.client()
    try:
        reader.initialize()
        assert "result" in reader.load(victim, victim_dir)
        reader.wait_for(lambda _: "Back again." in message_text(reader.updates(victim)))
        replayed = reader.updates(victim)
        check_cards(replayed)
        ends = {call: steps[-1] for call, steps in lifecycle(replayed).items()}
        assert ends == {"call_ok": "completed", "call_cut": "discarded"}
    finally:
        reader.close()

    # /metrics: the shards' turns, gathered by the daemon and labelled by shard slot, and
    # the killed shard counted as a restart.
    page = get(http_base(daemon) + "/metrics", {"Authorization": f"Bearer {daemon.token}"})
    assert page.status == 200, page
    assert sample(page.body, "toolprep_worker_restarts_total") == 1
    attempts = re.findall(r"^toolprep_attempts_total\{([^}]*)\} (\S+)$", page.body, re.MULTILINE)
    assert attempts and all('worker="' in labels for labels, _ in attempts), attempts
    assert daemon.stop() == 0


def test_serve_says_at_once_when_no_cluster_answers_at_the_address(tmp_path: Path) -> None:
    with socket.socket() as unused:  # a port nothing listens on: bound, never listening
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
        said = refused_start(tmp_path, "--ray", address, "--shards", "1", timeout=DEADLINE_S)
    assert f"cannot join the Ray cluster at {address}: nothing answers there" in said
