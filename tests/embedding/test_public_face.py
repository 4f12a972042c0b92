"""Embedding the runtime needs one import line, and that import stays light.

The first test is the README's embedding example with the embedded replay provider in
place of ``build_provider("anthropic")`` (which needs a key and the network): every name
it uses comes from ``toolprep`` itself.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FunctionType, UnionType
from typing import Any

import orjson

import toolprep
from toolprep import ClientRequest, ModelRoute, ReplayProvider, Runtime, TextPart, TurnResult


class Recorder:
    """A ``FrameSink`` that keeps what the session sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.updates: list[dict[str, Any]] = []
        self.requests: list[ClientRequest] = []

    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        with self.lock:
            self.updates.append(update)

    def send_updates(self, frames: Sequence[tuple[str, dict[str, Any]]]) -> None:
        with self.lock:
            self.updates.extend(update for _, update in frames)

    def send_encoded_update(self, session_id: str, update_json: bytes) -> None:
        self.send_update(session_id, orjson.loads(update_json))

    def send_request(self, session_id: str, request: ClientRequest) -> None:
        with self.lock:
            self.requests.append(request)


def test_the_embedding_example_runs_on_names_from_toolprep_alone(tmp_path: Path) -> None:
    sink = Recorder()
    runtime = Runtime([ModelRoute(ReplayProvider.from_script(), "replay")])
    try:
        session_id = runtime.open_session(tmp_path, sink)
        result = runtime.prompt(session_id, [TextPart("hi")]).result(60)
    finally:
        runtime.shutdown()
    assert isinstance(result, TurnResult)
    assert result.stop_reason == "end_turn", result
    said = [u for u in sink.updates if u.get("sessionUpdate") == "agent_message_chunk"]
    assert said, sink.updates


def test_every_public_name_resolves_to_the_thing_it_names() -> None:
    for name in toolprep.__all__:
        value = getattr(toolprep, name)
        if isinstance(value, (type, FunctionType)):
            assert value.__name__ == name, (name, value)
        elif name != "__version__":  # a union of part or request types
            assert isinstance(value, UnionType), (name, value)
    assert set(toolprep.__all__) <= set(dir(toolprep))


def test_a_name_toolprep_does_not_have_is_an_attribute_error() -> None:
    try:
        toolprep.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("toolprep.NoSuchThing resolved")


def test_importing_toolprep_loads_none_of_its_modules_nor_an_sdk() -> None:
    probe = (
        "import sys, toolprep\n"
        "print(sorted(m for m in sys.modules if m.startswith(('toolprep', 'anthropic', "
        "'openai', 'httpx', 'pykka'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "['toolprep']"
