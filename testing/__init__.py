"""A small test kit for code that embeds toolprep, as ``trio.testing`` is for trio.

The loopback provider (``FakeProviderServer``, ``toolprep.testing.provider``) is a real
HTTP server on 127.0.0.1 that streams scripted turns in the Anthropic and OpenAI wire
formats; the builders in ``toolprep.testing.sse`` write those turns. Point a provider
(``build_provider(..., base_url=server.base_url)``) at it to test an integration end to
end with the real SDKs and no network. toolprep's own tests and benchmarks use the same
server and builders. ``toolprep.testing.daemon`` has the ``toolprep serve`` command line
against such a provider, ``toolprep.testing.ray_cluster`` a throwaway loopback Ray cluster.

Nothing in the runtime imports this package, and it holds no load generator or benchmark:
those live in the repository's ``benchmarks/``.
"""

from toolprep.testing.provider import (
    FakeProviderServer,
    RecordedRequest,
    Responder,
    ScriptedResponse,
)
from toolprep.testing.sse import (
    ToolCallSpec,
    anthropic_sse,
    openai_sse,
    split_sse_events,
    unterminated_line,
)

__all__ = [
    "FakeProviderServer",
    "RecordedRequest",
    "Responder",
    "ScriptedResponse",
    "ToolCallSpec",
    "anthropic_sse",
    "openai_sse",
    "split_sse_events",
    "unterminated_line",
]
