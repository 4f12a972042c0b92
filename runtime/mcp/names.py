"""Tool names for MCP tools: ``mcp__<server id>__<tool>``, within what providers accept.

Both Anthropic and OpenAI take function names of at most 64 characters from
``[A-Za-z0-9_-]``; an MCP tool may be named with dots, spaces or at length.
Such a name is rewritten (other characters become ``_``) and, when too
long, cut and given a short hash of the original so that two long names
sharing a beginning stay distinct. The call still goes to the server under
the tool's own name.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_CHARS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_CHARS = 8


def tool_name(server: str, tool: str) -> str:
    """The registry name of ``tool`` of the server whose id is ``server``."""
    prefix = f"mcp__{server}__"
    safe = _UNSAFE.sub("_", tool) or "_"
    if len(prefix) + len(safe) <= MAX_NAME_CHARS and safe == tool:
        return prefix + safe
    digest = hashlib.sha256(tool.encode()).hexdigest()[:_HASH_CHARS]
    room = MAX_NAME_CHARS - len(prefix) - len(digest) - 1
    return f"{prefix}{safe[:room]}_{digest}"
