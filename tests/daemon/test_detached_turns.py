"""A turn in ``toolprep serve`` goes on when its clients leave (``--detached-turns``).

Each test lets the only client leave while the model is still streaming, the provider
held at a gate until the daemon has counted the client gone (``toolprep_clients_attached``
on ``/metrics``). ``--disconnect-grace 0`` makes the old behaviour, a turn cancelled once
nobody is attached, happen at once, so a turn that still ends normally went on without
anyone; the idle session is then closed as at once, so the client that comes back loads it
from the store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from tests.daemon.conftest import KIND, StartDaemon
from tests.daemon.telemetry_daemon import get, http_base, sample
from tests.runtime import scenarios as sc
from tests.support.daemon_process import DaemonProcess
from tests.support.eventually import eventually
from tests.support.message_log import Message
from tests.support.runtime_harness import check_cards, lifecycle, message_text
from toolprep.testing import FakeProviderServer, ScriptedResponse

PERMISSION = "session/request_permission"

GATE_TIMEOUT_S = 120.0


def _gated(events: list[bytes], before: int, gate: threading.Event) -> Iterator[bytes]:
    """``events``, holding back all but the first ``before`` until ``gate`` is set."""
    yield from events[:before]
    if not gate.wait(GATE_TIMEOUT_S):
        raise TimeoutError("the test never opened the gate")
    yield from events[before:]


def _nobody_attached(daemon: DaemonProcess) -> None:
    """Wait until the daemon counts no client attached to any session."""
    headers = {"Authorization": f"Bearer {daemon.token}"}

    def detached() -> bool:
        scraped = get(http_base(daemon) + "/metrics", headers)
        return scraped.status == 200 and sample(scraped.body, "toolprep_clients_attached") == 0

    eventually(detached, timeout=60)


def _thoughts(frames: list[Message]) -> str:
    return "".join(
        f["content"]["text"] for f in frames if f["sessionUpdate"] == "agent_thought_chunk"
    )


def test_a_turn_goes_on_to_its_end_with_no_client_and_a_later_client_sees_all_of_it(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(
        "--data-dir", str(tmp_path / "data"), "--workers", "1", "--disconnect-grace", "0"
    )
    gate = threading.Event()
    answer = "Finished while nobody was watching."
    events = sc.events(sc.text_turn(KIND, answer))
    provider.enqueue(ScriptedResponse(events=_gated(events, 3, gate)))
    first = daemon.client()
    session_id = first.start_session(workdir)
    first.prompt(session_id)
    first.wait_for(lambda _: message_text(first.updates(session_id)) != "")
    first.close()  # the editor went away mid-answer
    _nobody_attached(daemon)
    gate.set()

    def finished_and_stored() -> list[Message]:
        frames = daemon.replayed(session_id, workdir)
        assert message_text(frames) == answer, frames
        return frames

    frames = eventually(finished_and_stored, timeout=60, interval=0.5)
    assert "cancelled" not in _thoughts(frames)
    check_cards(frames)
    assert daemon.stop() == 0


def test_a_permission_asked_while_nobody_is_attached_goes_to_the_next_client(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(
        "--data-dir", str(tmp_path / "data"), "--workers", "1", "--disconnect-grace", "0"
    )
    gate = threading.Event()
    call = sc.shell("echo detached", "call_detached")
    events = sc.events(sc.calls_turn(KIND, [call]))
    shown = len(sc.until_opened(KIND, call))
    provider.enqueue(
        ScriptedResponse(events=_gated(events, shown, gate)),
        sc.ok(sc.text_turn(KIND, "Ran it once you said so.")),
    )
    first = daemon.client()
    session_id = first.start_session(workdir)
    first.prompt(session_id)
    first.wait_for(lambda _: "call_detached" in lifecycle(first.updates(session_id)))
    first.close()  # the card is preparing; its permission is asked once nobody is there
    _nobody_attached(daemon)
    gate.set()

    later = daemon.loaded(session_id, workdir)
    try:
        later.wait_for(lambda ms: any(m.get("method") == PERMISSION for m in ms), timeout=60)
        [ask] = later.requests(PERMISSION)
        assert ask["params"]["toolCall"]["toolCallId"] == "call_detached"
        later.answer_permission(ask, "allow_once")
        later.wait_for(
            lambda _: message_text(later.updates(session_id)) == "Ran it once you said so.",
            timeout=60,
        )
        frames = later.updates(session_id)
    finally:
        later.close()
    check_cards(frames)
    assert lifecycle(frames)["call_detached"][-1] == "completed"
    assert daemon.stop() == 0


def test_a_turn_left_alone_past_max_detached_is_cancelled_saying_why(
    start_daemon: StartDaemon, provider: FakeProviderServer, workdir: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(
        "--data-dir", str(tmp_path / "data"), "--workers", "2", "--max-detached", "0.5"
    )  # two workers: the reason crosses the worker protocol
    provider.enqueue(sc.prepared_then_stall(KIND, ("call_left", "get_weather", {})))
    first = daemon.client()
    session_id = first.start_session(workdir)
    first.prompt(session_id)
    first.wait_for(lambda _: "call_left" in lifecycle(first.updates(session_id)))
    first.close()

    # Each look attaches a client (which holds the turn) for a moment: look seldom.
    def cancelled() -> list[Message]:
        frames = daemon.replayed(session_id, workdir)
        assert lifecycle(frames).get("call_left") == ["preparing", "discarded"], frames
        return frames

    frames = eventually(cancelled, timeout=30, interval=1.5)
    assert "turn cancelled: no client was attached for 0.5 s" in _thoughts(frames)
    check_cards(frames)
    assert daemon.stop() == 0
