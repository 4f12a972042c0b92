"""What ``initialize`` tells the client, and what the client's answer lets sessions use.

The agent's capabilities depend only on whether sessions are kept (an archive
adds load, list, delete and resume); the client's ``fs`` capabilities decide
whether a session's file tools may ask the editor for a file's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import Any

from toolprep.messages.frames import META_KEY
from toolprep.runtime.kernel.session_host import EditorCapabilities

__all__ = ["PROTOCOL_VERSION", "agent_version", "editor_capabilities", "initialize_result"]

PROTOCOL_VERSION = 1


def agent_version() -> str:
    """The installed toolprep's version, or ``0.0.0`` when it runs uninstalled."""
    try:
        return metadata.version("toolprep")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def initialize_result(*, keeps_sessions: bool, meta: Mapping[str, object]) -> dict[str, Any]:
    """The ``initialize`` answer; ``meta`` goes under ``_meta.toolprep`` when not empty."""
    result: dict[str, Any] = {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": keeps_sessions,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": True},
            "sessionCapabilities": (
                {"close": {}, "list": {}, "delete": {}, "resume": {}}
                if keeps_sessions
                else {"close": {}}
            ),
        },
        "authMethods": [],
        "agentInfo": {"name": "toolprep", "title": "toolprep", "version": agent_version()},
    }
    if meta:
        result["_meta"] = {META_KEY: dict(meta)}
    return result


def editor_capabilities(client_capabilities: Mapping[str, Any]) -> EditorCapabilities:
    """Which ``fs/*`` requests the client said it answers (none unless it said so)."""
    fs_caps = client_capabilities.get("fs")
    fs_caps = fs_caps if isinstance(fs_caps, dict) else {}
    return EditorCapabilities(
        read_text_file=fs_caps.get("readTextFile") is True,
        write_text_file=fs_caps.get("writeTextFile") is True,
    )
