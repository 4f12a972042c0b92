"""Provider transcripts for lifecycle scenarios, in either wire format."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from toolprep.testing import ScriptedResponse as ScriptedResponse
from toolprep.testing import anthropic_sse as anthropic_sse
from toolprep.testing import openai_sse as openai_sse
from toolprep.testing import split_sse_events

Call = tuple[str, str, Mapping[str, Any]]

ANTHROPIC_OVERLOADED = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
OPENAI_SERVER_ERROR = b'data: {"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}\n\n'


def shell(command: str, call_id: str = "call_sh", **extra: Any) -> Call:
    """A ``run_shell_command`` call, as the model would make it."""
    return (call_id, "run_shell_command", {"command": command, **extra})


def calls_turn(
    kind: str, calls: Sequence[Call], text: str | None = None, fragment_size: int = 6
) -> str:
    if kind == "anthropic":
        return anthropic_sse(text=text, tool_calls=calls, fragment_size=fragment_size)
    return openai_sse(text=text, tool_calls=calls, fragment_size=fragment_size)


def text_turn(kind: str, text: str = "All done.", **kw: Any) -> str:
    if kind == "anthropic":
        return anthropic_sse(text=text, **kw)
    return openai_sse(text=text, **kw)


def events(transcript: str) -> list[bytes]:
    return split_sse_events(transcript)


def error_event(kind: str) -> bytes:
    return ANTHROPIC_OVERLOADED if kind == "anthropic" else OPENAI_SERVER_ERROR


def until_opened(
    kind: str, call: Call, extra_fragments: int = 1, text: str | None = None
) -> list[bytes]:
    """The stream up to the call's identity plus a few argument fragments (never complete)."""
    all_events = events(calls_turn(kind, [call], text=text))
    opener = next(i for i, e in enumerate(all_events) if call[0].encode() in e)
    return all_events[: opener + 1 + extra_fragments]


def until_parsed(kind: str, call: Call) -> list[bytes]:
    """The stream up to the point where the call is complete (parsed) but the stream is not over."""
    all_events = events(calls_turn(kind, [call]))
    if kind == "anthropic":
        stop = next(
            i
            for i, e in enumerate(all_events)
            if b"content_block_stop" in e
            and i > 1
            and any(call[0].encode() in x for x in all_events[:i])
        )
        return all_events[: stop + 1]
    finish = next(i for i, e in enumerate(all_events) if b'"finish_reason":"tool_calls"' in e)
    return all_events[: finish + 1]


def prepared_then_error(kind: str, call: Call) -> ScriptedResponse:
    return ScriptedResponse(events=[*until_opened(kind, call), error_event(kind)])


def prepared_then_truncated(kind: str, call: Call) -> ScriptedResponse:
    return ScriptedResponse(events=until_opened(kind, call))


def prepared_then_stall(kind: str, call: Call) -> ScriptedResponse:
    evs = until_opened(kind, call)
    return ScriptedResponse(events=evs, stall_after=len(evs))


def text_then_stall(kind: str, text: str) -> ScriptedResponse:
    """An answer whose text is all sent, then a stream that never ends (the turn runs on)."""
    evs = events(text_turn(kind, text))
    return ScriptedResponse(events=evs, stall_after=len(evs) - 3)


def prepared_then_cut(kind: str, call: Call) -> ScriptedResponse:
    evs = until_opened(kind, call, extra_fragments=2)
    return ScriptedResponse(
        events=[*evs, *events(calls_turn(kind, [call]))[len(evs) :]], cut_after=len(evs)
    )


def parsed_then_error(kind: str, call: Call) -> ScriptedResponse:
    return ScriptedResponse(events=[*until_parsed(kind, call), error_event(kind)])


def ok(transcript: str, **kw: Any) -> ScriptedResponse:
    return ScriptedResponse(events=transcript, **kw)


def args_of(body: Mapping[str, Any]) -> str:
    return json.dumps(body)
