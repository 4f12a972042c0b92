"""The worker protocol: every command a front sends a worker and every event a worker sends
back, as frozen values, with one encoding for each direction.

A message travels as one wire frame (``wire``): a JSON object header tagged by ``type``,
and for two messages a raw payload: a prompt's JSON (``Prompt``) and a session update's
JSON (``Updated``), which the front relays to the editor without decoding it. Decoding
matches the tag and the shape of every field, so a peer that sends anything else gets
``ProtocolError`` naming what it sent, never a half-built command.

``PROTOCOL_VERSION`` travels in the worker's ``Ready``: a front refuses a worker that
speaks another version (an install upgraded under a running front) with that said.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, assert_never, get_args

import orjson

from toolprep.messages.codec import (
    CodecError,
    dump_prompt,
    dump_result,
    load_prompt,
    load_result,
)
from toolprep.messages.content import Part
from toolprep.messages.modes import SessionMode, check_mode
from toolprep.messages.permissions import PermissionOutcome, check_outcome
from toolprep.messages.turns import TurnResult, UserMessage
from toolprep.runtime.kernel.session_host import (
    ClientRequest,
    EditorAnswer,
    EditorCapabilities,
    SessionConfig,
)
from toolprep.runtime.mcp.specs import McpServerSpec
from toolprep.runtime.workers.codec import (
    dump_answer,
    dump_config,
    dump_mcp_servers,
    dump_request,
    load_answer,
    load_config,
    load_mcp_servers,
    load_request,
)

__all__ = [
    "PROTOCOL_VERSION",
    "AnswerEditor",
    "AnswerPermission",
    "Cancel",
    "CardChange",
    "Close",
    "Command",
    "ConfigReturned",
    "ErrorKind",
    "Event",
    "FlushJournal",
    "Open",
    "OpenHow",
    "Prompt",
    "ProtocolError",
    "Raised",
    "ReadMetrics",
    "Ready",
    "Requested",
    "Returned",
    "ServedElsewhereRaised",
    "SetMode",
    "SetModel",
    "ShowConfig",
    "Shutdown",
    "ToolGroupChanged",
    "TurnEnded",
    "UnknownModelRaised",
    "Updated",
    "decode_command",
    "decode_event",
    "encode_command",
    "encode_event",
]

PROTOCOL_VERSION = 5
"""1 was positional lists; 2 is tagged objects, and the version rides on ``Ready``; 3 takes
the runtime's config and the secrets in a ``start`` frame on stdin, before any command,
rather than on the command line and in the environment; 4 adds ``ReadMetrics``; 5 gives
``Cancel`` the reason the session is told."""

OpenHow = Literal["new", "restore", "restore_or_new"]
"""How a worker opens a session: fresh, from the store, or from the store if it is there."""

ErrorKind = Literal[
    "unknown_session", "host_closed", "mcp_refused", "store_read_only", "invalid", "failed"
]
"""Which exception a worker's failed call is raised as again in the front."""

_OPEN_HOWS: frozenset[str] = frozenset(get_args(OpenHow))

CardChange = tuple[str, str, bool]
"""``(call id, tool name, terminal?)`` of a tool-call frame (``messages.frames.card_change``)."""


class ProtocolError(CodecError):
    """A frame that is not a message of this protocol: the peer is broken or another version."""


# --- commands: front to worker ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Open:
    call_id: int
    session_id: str
    cwd: str
    editor: EditorCapabilities
    how: OpenHow
    mcp_servers: tuple[McpServerSpec, ...] = ()


@dataclass(frozen=True, slots=True)
class Prompt:
    call_id: int
    session_id: str
    parts: tuple[Part, ...]
    user_message: UserMessage | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    session_id: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Close:
    session_id: str


@dataclass(frozen=True, slots=True)
class AnswerPermission:
    call_id: int
    session_id: str
    request_id: str
    outcome: PermissionOutcome


@dataclass(frozen=True, slots=True)
class AnswerEditor:
    call_id: int
    session_id: str
    request_id: str
    answer: EditorAnswer


@dataclass(frozen=True, slots=True)
class ShowConfig:
    call_id: int
    session_id: str


@dataclass(frozen=True, slots=True)
class FlushJournal:
    call_id: int
    session_id: str


@dataclass(frozen=True, slots=True)
class SetModel:
    call_id: int
    session_id: str
    model: str


@dataclass(frozen=True, slots=True)
class SetMode:
    call_id: int
    session_id: str
    mode: SessionMode


@dataclass(frozen=True, slots=True)
class ReadMetrics:
    """The worker's metrics in the Prometheus text format (``Returned``: a string, empty
    when it records none), for the front's ``/metrics``."""

    call_id: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    timeout: float


Command = (
    Open
    | Prompt
    | Cancel
    | Close
    | AnswerPermission
    | AnswerEditor
    | ShowConfig
    | FlushJournal
    | SetModel
    | SetMode
    | ReadMetrics
    | Shutdown
)

# --- events: worker to front ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ready:
    pid: int
    protocol: int = PROTOCOL_VERSION


@dataclass(frozen=True, slots=True)
class Updated:
    session_id: str
    card: CardChange | None
    update_json: bytes


@dataclass(frozen=True, slots=True)
class Requested:
    session_id: str
    request: ClientRequest


@dataclass(frozen=True, slots=True)
class ToolGroupChanged:
    pgid: int
    live: bool


@dataclass(frozen=True, slots=True)
class Returned:
    """A call's plain answer: an opened session's id, an answer taken or not, nothing."""

    call_id: int
    value: str | bool | None


@dataclass(frozen=True, slots=True)
class ConfigReturned:
    call_id: int
    config: SessionConfig


@dataclass(frozen=True, slots=True)
class TurnEnded:
    call_id: int
    result: TurnResult


@dataclass(frozen=True, slots=True)
class Raised:
    call_id: int
    kind: ErrorKind
    message: str


@dataclass(frozen=True, slots=True)
class UnknownModelRaised:
    call_id: int
    model: str
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ServedElsewhereRaised:
    call_id: int
    session_id: str
    holder: str


Event = (
    Ready
    | Updated
    | Requested
    | ToolGroupChanged
    | Returned
    | ConfigReturned
    | TurnEnded
    | Raised
    | UnknownModelRaised
    | ServedElsewhereRaised
)

Frame = tuple[dict[str, Any], bytes]
"""A message as ``wire`` carries it: the tagged header and the raw payload."""


def encode_command(command: Command) -> Frame:
    match command:
        case Open(call_id, sid, cwd, editor, how, servers):
            return {
                "type": "open",
                "call": call_id,
                "session": sid,
                "cwd": cwd,
                "read_text_file": editor.read_text_file,
                "write_text_file": editor.write_text_file,
                "how": how,
                "mcp_servers": dump_mcp_servers(servers),
            }, b""
        case Prompt(call_id, sid, parts, user_message):
            prompt = orjson.dumps(dump_prompt(parts, user_message))
            return {"type": "prompt", "call": call_id, "session": sid}, prompt
        case Cancel(sid, reason):
            return {"type": "cancel", "session": sid, "reason": reason}, b""
        case Close(sid):
            return {"type": "close", "session": sid}, b""
        case AnswerPermission(call_id, sid, rid, outcome):
            header = {"type": "answer_permission", "call": call_id, "session": sid}
            return {**header, "request": rid, "outcome": outcome}, b""
        case AnswerEditor(call_id, sid, rid, answer):
            header = {"type": "answer_editor", "call": call_id, "session": sid}
            return {**header, "request": rid, "answer": dump_answer(answer)}, b""
        case ShowConfig(call_id, sid):
            return {"type": "show_config", "call": call_id, "session": sid}, b""
        case FlushJournal(call_id, sid):
            return {"type": "flush_journal", "call": call_id, "session": sid}, b""
        case SetModel(call_id, sid, model):
            return {"type": "set_model", "call": call_id, "session": sid, "model": model}, b""
        case SetMode(call_id, sid, mode):
            return {"type": "set_mode", "call": call_id, "session": sid, "mode": mode}, b""
        case ReadMetrics(call_id):
            return {"type": "read_metrics", "call": call_id}, b""
        case Shutdown(timeout):
            return {"type": "shutdown", "timeout": timeout}, b""
        case _:
            assert_never(command)


def decode_command(header: Any, payload: bytes = b"") -> Command:
    """The command a frame carries; ``ProtocolError`` for any frame that is not one."""
    try:
        return _decode_command(header, payload)
    except ProtocolError:
        raise
    except (CodecError, orjson.JSONDecodeError) as exc:
        raise ProtocolError(f"a malformed {_tag(header)} command: {exc}") from None


def _decode_command(header: Any, payload: bytes) -> Command:
    match header:
        case {
            "type": "open",
            "call": int(call_id),
            "session": str(sid),
            "cwd": str(cwd),
            "read_text_file": bool(can_read),
            "write_text_file": bool(can_write),
            "how": str(how),
            "mcp_servers": list(servers),
        } if how in _OPEN_HOWS:
            editor = EditorCapabilities(read_text_file=can_read, write_text_file=can_write)
            return Open(call_id, sid, cwd, editor, _open_how(how), load_mcp_servers(servers))
        case {"type": "prompt", "call": int(call_id), "session": str(sid)}:
            parts, user_message = load_prompt(orjson.loads(payload))
            return Prompt(call_id, sid, tuple(parts), user_message)
        case {"type": "cancel", "session": str(sid), "reason": str() | None as reason}:
            return Cancel(sid, reason)
        case {"type": "close", "session": str(sid)}:
            return Close(sid)
        case {
            "type": "answer_permission",
            "call": int(call_id),
            "session": str(sid),
            "request": str(rid),
            "outcome": str(outcome),
        }:
            return AnswerPermission(call_id, sid, rid, _outcome(outcome))
        case {
            "type": "answer_editor",
            "call": int(call_id),
            "session": str(sid),
            "request": str(rid),
            "answer": answer,
        }:
            return AnswerEditor(call_id, sid, rid, load_answer(answer))
        case {"type": "show_config", "call": int(call_id), "session": str(sid)}:
            return ShowConfig(call_id, sid)
        case {"type": "flush_journal", "call": int(call_id), "session": str(sid)}:
            return FlushJournal(call_id, sid)
        case {"type": "set_model", "call": int(call_id), "session": str(sid), "model": str(m)}:
            return SetModel(call_id, sid, m)
        case {"type": "set_mode", "call": int(call_id), "session": str(sid), "mode": str(mode)}:
            return SetMode(call_id, sid, _mode(mode))
        case {"type": "read_metrics", "call": int(call_id)}:
            return ReadMetrics(call_id)
        case {"type": "shutdown", "timeout": int() | float() as timeout}:
            return Shutdown(float(timeout))
        case _:
            raise ProtocolError(f"not a worker command: {header!r}")


def encode_event(event: Event) -> Frame:
    match event:
        case Ready(pid, protocol):
            return {"type": "ready", "pid": pid, "protocol": protocol}, b""
        case Updated(sid, card, update_json):
            return {"type": "updated", "session": sid, "card": card}, update_json
        case Requested(sid, request):
            return {"type": "requested", "session": sid, "request": dump_request(request)}, b""
        case ToolGroupChanged(pgid, live):
            return {"type": "tool_group", "pgid": pgid, "live": live}, b""
        case Returned(call_id, value):
            return {"type": "returned", "call": call_id, "value": value}, b""
        case ConfigReturned(call_id, config):
            return {"type": "config", "call": call_id, "config": dump_config(config)}, b""
        case TurnEnded(call_id, result):
            return {"type": "turn_ended", "call": call_id, "result": dump_result(result)}, b""
        case Raised(call_id, kind, message):
            return {"type": "raised", "call": call_id, "kind": kind, "message": message}, b""
        case UnknownModelRaised(call_id, model, models):
            header = {"type": "unknown_model", "call": call_id}
            return {**header, "model": model, "models": list(models)}, b""
        case ServedElsewhereRaised(call_id, sid, holder):
            header = {"type": "served_elsewhere", "call": call_id}
            return {**header, "session": sid, "holder": holder}, b""
        case _:
            assert_never(event)


def decode_event(header: Any, payload: bytes = b"") -> Event:
    """The event a frame carries; ``ProtocolError`` for any frame that is not one."""
    try:
        return _decode_event(header, payload)
    except ProtocolError:
        raise
    except CodecError as exc:
        raise ProtocolError(f"a malformed {_tag(header)} event: {exc}") from None


def _decode_event(header: Any, payload: bytes) -> Event:
    match header:
        case {"type": "updated", "session": str(sid), "card": None}:
            return Updated(sid, None, payload)
        case {"type": "updated", "session": str(sid), "card": [str(cid), str(tool), bool(end)]}:
            return Updated(sid, (cid, tool, end), payload)
        case {"type": "ready", "pid": int(pid), "protocol": int(protocol)}:
            return Ready(pid, protocol)
        case {"type": "requested", "session": str(sid), "request": request}:
            return Requested(sid, load_request(request))
        case {"type": "tool_group", "pgid": int(pgid), "live": bool(live)}:
            return ToolGroupChanged(pgid, live)
        case {"type": "returned", "call": int(call_id), "value": str() | bool() | None as value}:
            return Returned(call_id, value)
        case {"type": "config", "call": int(call_id), "config": config}:
            return ConfigReturned(call_id, load_config(config))
        case {"type": "turn_ended", "call": int(call_id), "result": result}:
            return TurnEnded(call_id, load_result(result))
        case {"type": "raised", "call": int(call_id), "kind": str(kind), "message": str(message)}:
            return Raised(call_id, _error_kind(kind), message)
        case {
            "type": "unknown_model",
            "call": int(call_id),
            "model": str(model),
            "models": list(m),
        }:
            if not all(isinstance(name, str) for name in m):
                raise ProtocolError(f"model names must be text: {m!r}")
            return UnknownModelRaised(call_id, model, tuple(m))
        case {
            "type": "served_elsewhere",
            "call": int(call_id),
            "session": str(sid),
            "holder": str(holder),
        }:
            return ServedElsewhereRaised(call_id, sid, holder)
        case {"type": "ready"}:
            raise ProtocolError(
                f"a worker of another protocol version said it is ready ({header!r}); "
                f"this front speaks version {PROTOCOL_VERSION}"
            )
        case _:
            raise ProtocolError(f"not a worker event: {header!r}")


def _tag(header: Any) -> str:
    return repr(header.get("type")) if isinstance(header, dict) else "untagged"


def _open_how(how: str) -> OpenHow:
    match how:
        case "new" | "restore" | "restore_or_new":
            return how
        case _:
            raise ProtocolError(f"not a way to open a session: {how!r}")


def _outcome(outcome: str) -> PermissionOutcome:
    try:
        return check_outcome(outcome)
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None


def _mode(mode: str) -> SessionMode:
    try:
        return check_mode(mode)
    except ValueError as exc:
        raise ProtocolError(str(exc)) from None


def _error_kind(kind: str) -> ErrorKind:
    match kind:
        case (
            "unknown_session"
            | "host_closed"
            | "mcp_refused"
            | "store_read_only"
            | "invalid"
            | "failed"
        ):
            return kind
        case _:
            raise ProtocolError(f"not an error kind: {kind!r}")
