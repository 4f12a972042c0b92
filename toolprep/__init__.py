"""toolprep: an ACP agent runtime that shows tool cards while the model prepares arguments.

Everything installs under this one import name so a hosting daemon's own top-level modules
(``messages``, ``runtime``, ...) never collide with ours. The subpackages live at the
repository's top level (``messages/``, ``actors/``, ``runtime/``) and are mapped here by the
build configuration.

What an embedder needs is importable from here::

    from toolprep import ModelRoute, Runtime, TextPart, build_provider, serve_stdio

These names (``__all__``) and the ones the docs document are the stable, public surface;
anything imported from deeper (``toolprep.runtime....``) is internal and may change.

Each name loads its module on first use, so ``import toolprep`` stays as cheap as it was
(the CLI and every worker import it before anything else): nothing here imports the
actors, the providers or their SDKs until a name that needs them is asked for.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from toolprep.messages.content import (
        FunctionCall,
        FunctionCallPart,
        FunctionResponse,
        FunctionResponsePart,
        Part,
        TextPart,
        ThoughtPart,
    )
    from toolprep.messages.turns import TurnResult, UserMessage
    from toolprep.runtime.acp.stdio_serving import serve_stdio
    from toolprep.runtime.daemon.websocket_serving import serve_websocket
    from toolprep.runtime.hosting.runtime import Runtime, RuntimeConfig
    from toolprep.runtime.kernel.observer import TurnObserver
    from toolprep.runtime.kernel.session_host import (
        ClientRequest,
        EditorCapabilities,
        FrameSink,
        SessionHost,
        SessionHostError,
    )
    from toolprep.runtime.providers.base import Provider
    from toolprep.runtime.providers.factory import build_provider
    from toolprep.runtime.providers.replay import ReplayProvider
    from toolprep.runtime.providers.routes import ModelRoute
    from toolprep.runtime.telemetry.setup import telemetry_from_environ

__version__ = "0.2.0"
"""This release of toolprep (``pyproject.toml``'s ``version``)."""

_HOMES: dict[str, str] = {
    "ClientRequest": "toolprep.runtime.kernel.session_host",
    "EditorCapabilities": "toolprep.runtime.kernel.session_host",
    "FrameSink": "toolprep.runtime.kernel.session_host",
    "FunctionCall": "toolprep.messages.content",
    "FunctionCallPart": "toolprep.messages.content",
    "FunctionResponse": "toolprep.messages.content",
    "FunctionResponsePart": "toolprep.messages.content",
    "ModelRoute": "toolprep.runtime.providers.routes",
    "Part": "toolprep.messages.content",
    "Provider": "toolprep.runtime.providers.base",
    "ReplayProvider": "toolprep.runtime.providers.replay",
    "Runtime": "toolprep.runtime.hosting.runtime",
    "RuntimeConfig": "toolprep.runtime.hosting.runtime",
    "SessionHost": "toolprep.runtime.kernel.session_host",
    "SessionHostError": "toolprep.runtime.kernel.session_host",
    "TextPart": "toolprep.messages.content",
    "ThoughtPart": "toolprep.messages.content",
    "TurnObserver": "toolprep.runtime.kernel.observer",
    "TurnResult": "toolprep.messages.turns",
    "UserMessage": "toolprep.messages.turns",
    "build_provider": "toolprep.runtime.providers.factory",
    "serve_stdio": "toolprep.runtime.acp.stdio_serving",
    "serve_websocket": "toolprep.runtime.daemon.websocket_serving",
    "telemetry_from_environ": "toolprep.runtime.telemetry.setup",
}
"""Each public name and the module it lives in."""

__all__ = [
    "ClientRequest",
    "EditorCapabilities",
    "FrameSink",
    "FunctionCall",
    "FunctionCallPart",
    "FunctionResponse",
    "FunctionResponsePart",
    "ModelRoute",
    "Part",
    "Provider",
    "ReplayProvider",
    "Runtime",
    "RuntimeConfig",
    "SessionHost",
    "SessionHostError",
    "TextPart",
    "ThoughtPart",
    "TurnObserver",
    "TurnResult",
    "UserMessage",
    "__version__",
    "build_provider",
    "serve_stdio",
    "serve_websocket",
    "telemetry_from_environ",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'toolprep' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
