"""The loop provider streams run on: asyncio's or uvloop's (``RuntimeConfig.event_loop``,
``--event-loop``), each driving real turns over loopback HTTP."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import uvloop

from tests.runtime import scenarios as sc
from tests.support.runtime_harness import check_cards, harness, lifecycle
from toolprep.runtime.kernel.event_loops import EventLoopChoice, check_event_loop, new_stream_loop

PARIS = ("call_paris", "get_weather", {"city": "Paris"})


@pytest.mark.parametrize(
    ("choice", "uvloop_expected"), [("asyncio", False), ("uvloop", True), ("auto", True)]
)
def test_each_choice_makes_its_loop(choice: EventLoopChoice, uvloop_expected: bool) -> None:
    loop = new_stream_loop(choice)
    try:
        assert isinstance(loop, uvloop.Loop) is uvloop_expected
        assert loop.run_until_complete(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        loop.close()


def test_an_unknown_choice_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown event loop 'trio': choose one of auto, asyncio"):
        check_event_loop("trio")


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_tool_turn_on_either_loop(kind: str, event_loop: EventLoopChoice, tmp_path: Path) -> None:
    with harness(kind, tmp_path, event_loop=event_loop) as h:
        h.server.enqueue(sc.ok(sc.calls_turn(kind, [PARIS])), sc.ok(sc.text_turn(kind)))
        sid, sink = h.session()
        assert h.turn(sid, sink).stop_reason == "end_turn"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "in_progress", "completed"]}
        assert isinstance(h.runtime.reader_state.loop, uvloop.Loop) is (event_loop == "uvloop")


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_cancel_mid_stream_on_either_loop(event_loop: EventLoopChoice, tmp_path: Path) -> None:
    with harness("anthropic", tmp_path, event_loop=event_loop) as h:
        h.server.enqueue(sc.prepared_then_stall("anthropic", PARIS))
        sid, sink = h.session()
        reply = h.prompt(sid, sink)
        sink.wait_for_preparing()
        h.runtime.cancel(sid)
        assert reply.result(timeout=10).stop_reason == "cancelled"
        check_cards(sink.frames())
        assert lifecycle(sink.frames()) == {"call_paris": ["preparing", "discarded"]}
        assert h.tool.executed == []


# A fresh interpreter in which ``import uvloop`` fails, as on an install without the extra.
_WITHOUT_UVLOOP = "import sys; sys.modules['uvloop'] = None\n"


def _run_without_uvloop(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_UVLOOP + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_without_uvloop_auto_runs_asyncio_and_uvloop_is_refused_by_name() -> None:
    probe = _run_without_uvloop(
        """
        import asyncio
        from toolprep.runtime.kernel.event_loops import check_event_loop, new_stream_loop
        loop = new_stream_loop("auto")
        print(type(loop).__module__)
        loop.close()
        import threading
        from toolprep.runtime.providers.routes import ModelRoute
        from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
        from toolprep.runtime.providers.factory import build_provider

        provider = build_provider("anthropic", base_url="http://127.0.0.1:9", api_key="k")
        threads = threading.active_count()
        for attempt in (
            lambda: new_stream_loop("uvloop"),
            lambda: check_event_loop("uvloop"),
            lambda: Runtime([ModelRoute(provider, "m")], config=RuntimeConfig(event_loop="uvloop")),
        ):
            try:
                attempt()
            except ValueError as exc:
                print(exc)
        print(threading.active_count() - threads)
        """
    )
    assert probe.returncode == 0, probe.stderr
    module, *refusals, threads_started = probe.stdout.splitlines()
    assert module.startswith("asyncio")
    assert threads_started == "0"  # the runtime refused before starting any role
    refusal = "event loop 'uvloop' is not installed: pip install 'toolprep[uvloop]'"
    assert refusals == [f"{refusal} (or choose 'auto')"] * 3


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_cli_asked_for_a_missing_uvloop_stops_at_start_up(workers: str) -> None:
    args = ["acp", "--provider", "replay", "--no-persist", "--event-loop", "uvloop"]
    result = _run_without_uvloop(
        f"""
        from toolprep.runtime.cli.main import main
        raise SystemExit(main({[*args, "--workers", workers]!r}))
        """
    )
    assert result.returncode == 2
    assert "toolprep: event loop 'uvloop' is not installed" in result.stderr
