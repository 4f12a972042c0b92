"""The replay script: which recorded responses a replay provider answers with.

The format is documented in ``runtime.providers.replay``. Loading a script
reads and checks it, and nothing more: the CLI loads ``--replay FILE`` with it
to refuse a missing or malformed script at launch, before anything heavy is
imported.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import orjson

__all__ = [
    "ReplayFormat",
    "ReplayResponse",
    "ReplayScript",
    "ReplayScriptError",
    "ReplayTurn",
    "default_script_path",
]

ReplayFormat = Literal["anthropic", "openai"]


class ReplayScriptError(ValueError):
    """A replay script that does not follow the documented format."""


@dataclass(frozen=True, slots=True)
class ReplayResponse:
    events: tuple[bytes, ...] = ()
    pace_s: float = 0.0
    stall_after_events: int | None = None
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    on_tool_error: ReplayResponse | None = None
    """Answered instead when a tool result the request carries back failed."""


@dataclass(frozen=True, slots=True)
class ReplayTurn:
    match: str | None
    responses: tuple[ReplayResponse, ...]


def _split_events(raw: bytes) -> tuple[bytes, ...]:
    """Cut a transcript into events (each keeps its blank line) so pacing is per event."""
    events: list[bytes] = []
    current: list[bytes] = []
    for line in raw.splitlines(keepends=True):
        current.append(line)
        if not line.strip():
            if len(current) > 1:
                events.append(b"".join(current))
            current = []
    if current and b"".join(current).strip():
        events.append(b"".join(current))
    return tuple(events)


def _response(spec: Any, base: Traversable, where: str) -> ReplayResponse:
    if not isinstance(spec, dict):
        raise ReplayScriptError(f"{where}: a response must be an object")
    status = spec.get("status", 200)
    if not isinstance(status, int) or not 100 <= status < 600:
        raise ReplayScriptError(f"{where}: status must be an HTTP status code")
    raw: bytes
    if "sse_file" in spec:
        target = base
        for piece in str(spec["sse_file"]).split("/"):
            target = target.joinpath(piece)
        raw = target.read_bytes()
    elif "sse" in spec:
        raw = str(spec["sse"]).encode("utf-8")
    elif status == 200:
        raise ReplayScriptError(f"{where}: needs sse_file, sse or a non-200 status")
    else:
        raw = b""
    stall = spec.get("stall_after_events")
    if stall is not None and (not isinstance(stall, int) or stall < 0):
        raise ReplayScriptError(f"{where}: stall_after_events must be a non-negative integer")
    body = spec.get("body", b"")
    body_bytes = (
        body
        if isinstance(body, bytes)
        else (body.encode() if isinstance(body, str) else orjson.dumps(body))
    )
    headers = spec.get("headers") or {}
    if not isinstance(headers, dict):
        raise ReplayScriptError(f"{where}: headers must be an object")
    instead = spec.get("on_tool_error")
    return ReplayResponse(
        events=_split_events(raw),
        pace_s=float(spec.get("pace_ms", 0)) / 1000.0,
        stall_after_events=stall,
        status=status,
        body=body_bytes,
        headers={str(k): str(v) for k, v in headers.items()},
        on_tool_error=(
            None if instead is None else _response(instead, base, f"{where} on_tool_error")
        ),
    )


@dataclass(frozen=True, slots=True)
class ReplayScript:
    provider: ReplayFormat
    turns: tuple[ReplayTurn, ...]

    @classmethod
    def from_dict(cls, data: Any, base: Traversable | Path) -> ReplayScript:
        """Validate a parsed script; ``sse_file`` paths resolve against ``base``."""
        if not isinstance(data, dict):
            raise ReplayScriptError("replay script must be a JSON object")
        provider = data.get("provider")
        if provider not in ("anthropic", "openai"):
            raise ReplayScriptError("replay script: provider must be 'anthropic' or 'openai'")
        turns_raw = data.get("turns")
        if not isinstance(turns_raw, list):
            raise ReplayScriptError("replay script: turns must be a list")
        turns: list[ReplayTurn] = []
        for t, turn in enumerate(turns_raw):
            if not isinstance(turn, dict) or not isinstance(turn.get("responses"), list):
                raise ReplayScriptError(f"replay script turn {t}: needs a responses list")
            match = turn.get("match")
            if match is not None and not isinstance(match, str):
                raise ReplayScriptError(f"replay script turn {t}: match must be a string or null")
            responses = tuple(
                _response(r, base, f"replay script turn {t} response {n}")
                for n, r in enumerate(turn["responses"])
            )
            turns.append(ReplayTurn(match or None, responses))
        return cls(provider, tuple(turns))

    @classmethod
    def load(cls, path: str | Path | None = None) -> ReplayScript:
        """Read a script file, or the packaged default script when ``path`` is None."""
        if path is None:
            base: Traversable = importlib.resources.files("toolprep.runtime").joinpath("replay")
            return cls.from_dict(orjson.loads(base.joinpath("default.json").read_bytes()), base)
        file = Path(path)
        try:
            raw = file.read_bytes()
        except OSError as exc:
            # The same class (FileNotFoundError, PermissionError...), with the path in words.
            raise type(exc)(f"replay script {file}: {exc.strerror or exc}") from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ReplayScriptError(f"replay script {file}: not valid JSON ({exc})") from None
        return cls.from_dict(data, file.resolve().parent)


def default_script_path() -> Traversable:
    return importlib.resources.files("toolprep.runtime").joinpath("replay").joinpath("default.json")
