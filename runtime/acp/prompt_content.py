"""ACP prompt content blocks -> model parts, and the blocks the session records.

Only what ``promptCapabilities`` advertises is accepted: text, resource
links and embedded text resources. Anything else is a bad-params error that
names the offending block, rather than being silently dropped.

Each accepted block is also kept as the session's record of the prompt
(``user_message_chunk`` frames, replayed by ``session/load``). The record
carries the block's fields as ACP defines them, copied only when they have
the type the schema gives them: a field a client sent malformed would
otherwise be stored and replayed, and break the stream of every client that
loads the session later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolprep.messages.content import Part, TextPart
from toolprep.runtime.acp.errors import INVALID_PARAMS, RpcError

__all__ = ["PromptContent", "parse_prompt"]

_LINK_TEXT_FIELDS = ("title", "description", "mimeType")
_ANNOTATION_FIELDS: dict[str, type | tuple[type, ...]] = {
    "lastModified": str,
    "priority": (int, float),
}
_ROLES = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class PromptContent:
    """A prompt as the model gets it (``parts``) and as the session records it (``blocks``)."""

    parts: tuple[Part, ...]
    blocks: tuple[dict[str, Any], ...]


def parse_prompt(prompt: Any) -> PromptContent:
    if not isinstance(prompt, list) or not prompt:
        raise RpcError(
            INVALID_PARAMS, "Invalid params: 'prompt' must be a non-empty array of content blocks"
        )
    parts: list[Part] = []
    blocks: list[dict[str, Any]] = []
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
            blocks.append(_recorded(block, {"type": "text", "text": text}))
        elif kind == "resource_link":
            uri, name = block.get("uri"), block.get("name")
            if not isinstance(uri, str) or not isinstance(name, str):
                raise RpcError(
                    INVALID_PARAMS, f"Invalid params: '{where}' needs string 'uri' and 'name'"
                )
            parts.append(TextPart(f"[Resource link: {name} <{uri}>]"))
            link: dict[str, Any] = {"type": "resource_link", "uri": uri, "name": name}
            link.update((f, block[f]) for f in _LINK_TEXT_FIELDS if isinstance(block.get(f), str))
            size = block.get("size")
            if isinstance(size, int) and not isinstance(size, bool):
                link["size"] = size
            blocks.append(_recorded(block, link))
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
            contents: dict[str, Any] = {"uri": resource["uri"], "text": text}
            if isinstance(resource.get("mimeType"), str):
                contents["mimeType"] = resource["mimeType"]
            if isinstance(resource.get("_meta"), dict):
                contents["_meta"] = resource["_meta"]
            blocks.append(_recorded(block, {"type": "resource", "resource": contents}))
        else:
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: '{where}.type' {kind!r} is not supported "
                "(text, resource_link, resource)",
            )
    return PromptContent(tuple(parts), tuple(blocks))


def _recorded(sent: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    """``block`` with the annotations and ``_meta`` every content block may carry."""
    annotations = _annotations(sent.get("annotations"))
    if annotations is not None:
        block["annotations"] = annotations
    if isinstance(sent.get("_meta"), dict):
        block["_meta"] = sent["_meta"]
    return block


def _annotations(sent: Any) -> dict[str, Any] | None:
    if not isinstance(sent, dict):
        return None
    kept: dict[str, Any] = {
        name: sent[name]
        for name, kind in _ANNOTATION_FIELDS.items()
        if isinstance(sent.get(name), kind) and not isinstance(sent.get(name), bool)
    }
    audience = sent.get("audience")
    if isinstance(audience, list) and all(role in _ROLES for role in audience):
        kept["audience"] = audience
    if isinstance(sent.get("_meta"), dict):
        kept["_meta"] = sent["_meta"]
    return kept or None
