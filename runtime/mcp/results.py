"""What an MCP ``tools/call`` result becomes: the model's text and the card's content.

Works on the result as JSON (``CallToolResult`` dumped by alias), so the
rules are plain data in, plain data out. Text blocks pass through; images,
audio and binary resources are named with their type and size rather than
pasted in as base64 (a card is one JSON-RPC line, and base64 tells the
model nothing); a result with no content but ``structuredContent`` shows
that as JSON. The text is capped, keeping its beginning, with a note.
A result marked ``isError`` fails the call with the server's own text.
Every secret the agent holds is masked in that text first, as in a shell
command's output: a server kept from the secrets by its environment may
still find them (``/proc/<parent>/environ`` is readable by the same user).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from toolprep.runtime.tools.acp_shapes import text_content
from toolprep.runtime.tools.base import ToolError, ToolOutput


def to_output(
    result: Mapping[str, Any],
    *,
    server: str,
    tool: str,
    max_chars: int,
    mask: Callable[[str], str],
) -> ToolOutput:
    """``result`` as the call's output, ``mask`` applied to its text; ``ToolError`` when the
    server marked it an error."""
    pieces = [_describe(block) for block in result.get("content") or ()]
    text = "\n".join(piece for piece in pieces if piece)
    structured = result.get("structuredContent")
    if not text and structured is not None:
        text = orjson.dumps(structured, option=orjson.OPT_INDENT_2).decode()
    text = mask(text)
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[output cut at {max_chars} of {len(text)} characters]"
    if result.get("isError"):
        raise ToolError(f"MCP server '{server}': {tool} failed: {text or '(no message)'}")
    shown = text or "(no output)"
    return ToolOutput(
        llm_output=shown,
        content=(text_content(shown),),
        raw_output={"server": server, "tool": tool, "chars": len(text)},
    )


def _describe(block: Any) -> str:
    if not isinstance(block, Mapping):
        return ""
    match block.get("type"):
        case "text":
            return str(block.get("text", ""))
        case "image" | "audio" as kind:
            return f"[{kind} {block.get('mimeType', '?')}, {_decoded_size(block.get('data'))}]"
        case "resource_link":
            return f"[resource {block.get('name', '')} <{block.get('uri', '')}>]"
        case "resource":
            resource = block.get("resource")
            resource = resource if isinstance(resource, Mapping) else {}
            uri = resource.get("uri", "")
            if isinstance(resource.get("text"), str):
                return f"[resource <{uri}>]\n{resource['text']}"
            size = _decoded_size(resource.get("blob"))
            return f"[binary resource <{uri}> {resource.get('mimeType', '?')}, {size}]"
        case other:
            return f"[{other} content]"


def _decoded_size(data: Any) -> str:
    length = len(data) if isinstance(data, str) else 0
    return f"{length * 3 // 4} bytes"
