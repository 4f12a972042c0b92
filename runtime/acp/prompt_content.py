"""ACP prompt content blocks -> model parts.

Only what ``promptCapabilities`` advertises is accepted: text, resource
links and embedded text resources. Anything else is a bad-params error that
names the offending block, rather than being silently dropped.
"""

from __future__ import annotations

from typing import Any

from toolprep.messages.content import Part, TextPart
from toolprep.runtime.acp.errors import INVALID_PARAMS, RpcError


def prompt_to_parts(prompt: Any) -> tuple[Part, ...]:
    if not isinstance(prompt, list) or not prompt:
        raise RpcError(
            INVALID_PARAMS, "Invalid params: 'prompt' must be a non-empty array of content blocks"
        )
    parts: list[Part] = []
    for index, block in enumerate(prompt):
        where = f"prompt[{index}]"
        if not isinstance(block, dict):
            raise RpcError(INVALID_PARAMS, f"Invalid params: '{where}' must be an object")
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            if not isinstance(text, str):
                raise RpcError(INVALID_PARAMS, f"Invalid params: '{where}.text' must be a string")
            parts.append(TextPart(text))
        elif kind == "resource_link":
            uri, name = block.get("uri"), block.get("name")
            if not isinstance(uri, str) or not isinstance(name, str):
                raise RpcError(
                    INVALID_PARAMS, f"Invalid params: '{where}' needs string 'uri' and 'name'"
                )
            parts.append(TextPart(f"[Resource link: {name} <{uri}>]"))
        elif kind == "resource":
            resource = block.get("resource")
            if not isinstance(resource, dict) or not isinstance(resource.get("uri"), str):
                raise RpcError(
                    INVALID_PARAMS, f"Invalid params: '{where}.resource' needs a string 'uri'"
                )
            text = resource.get("text")
            if not isinstance(text, str):
                raise RpcError(
                    INVALID_PARAMS,
                    f"Invalid params: '{where}.resource' must be a text resource "
                    "(blobs are not supported)",
                )
            parts.append(TextPart(f'<resource uri="{resource["uri"]}">\n{text}\n</resource>'))
        else:
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: '{where}.type' {kind!r} is not supported "
                "(text, resource_link, resource)",
            )
    return tuple(parts)
