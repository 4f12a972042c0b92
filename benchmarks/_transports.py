"""The HTTP stacks ``benchmarks.load --transport`` runs the runtime over, and its provider.

Shared by the runs in the benchmark's process and the runtimes that worker
processes and Ray shards build for ``--host`` (``benchmarks._hosts``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolprep.runtime.hosting.runtime import RuntimeConfig

__all__ = ["TRANSPORTS", "PooledProvider", "bench_config", "build_bench_provider"]

TRANSPORTS = ("aiohttp", "httpx", "aiohttp-asyncio", "aiohttp-uvloop")
"""The HTTP stacks ``--transport`` compares: the SDKs' aiohttp client on the runtime's default
loop (``auto``: uvloop when installed), their default httpx client, and the aiohttp client on
an asyncio or a uvloop loop."""


class PooledProvider:
    """Spreads streams round-robin over several SDK clients, each with its own connection pool.

    Not what the runtime does (``build_provider`` makes one client per
    process): it exists to measure what splitting the HTTP pool would buy,
    since the pool's bookkeeping per request and per close scans every
    connection it holds.
    """

    def __init__(self, providers: list[Any]) -> None:
        self.providers = providers
        self.name = providers[0].name
        self._turn = 0

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()

    def stream(self, request: Any) -> Any:
        self._turn += 1
        return self.providers[self._turn % len(self.providers)].stream(request)


def bench_config(transport: str) -> RuntimeConfig:
    """The runtime's configuration for ``transport``: its event loop (the report names the
    loop the stream loop turned out to be)."""
    from toolprep.runtime.hosting.runtime import RuntimeConfig

    match transport:
        case "aiohttp-asyncio":
            return RuntimeConfig(event_loop="asyncio")
        case "aiohttp-uvloop":
            return RuntimeConfig(event_loop="uvloop")
        case _:
            return RuntimeConfig()


def build_bench_provider(
    name: str,
    base_url: str,
    sessions: int,
    pools: int,
    keepalive: int | None,
    transport: str = "aiohttp",
) -> Any:
    """The production provider (``pools == 1`` and no ``keepalive``), or the pooled what-if.

    ``transport == "httpx"`` swaps in the SDK's default httpx client, for comparison;
    ``aiohttp-asyncio`` and ``aiohttp-uvloop`` are the production client (``bench_config``
    picks the loop).
    """
    from toolprep.runtime.providers.factory import DEFAULT_TIMEOUT, build_provider

    if pools <= 1 and keepalive is None:
        http_client: Any = None
        if transport == "httpx":
            import anthropic
            import openai

            sdk: Any = anthropic if name == "anthropic" else openai
            http_client = sdk.DefaultAsyncHttpxClient()
        return build_provider(
            name, base_url=base_url, api_key="bench", max_retries=0, http_client=http_client
        )
    import httpx2

    per_pool = max(1, -(-sessions // max(1, pools)))
    providers = []
    for _ in range(max(1, pools)):
        limits = httpx2.Limits(
            max_connections=max(per_pool, 1000 // max(1, pools)) + 16,
            max_keepalive_connections=keepalive if keepalive else per_pool + 16,
        )
        client = httpx2.AsyncClient(limits=limits, timeout=DEFAULT_TIMEOUT)
        providers.append(
            build_provider(
                name, base_url=base_url, api_key="bench", max_retries=0, http_client=client
            )
        )
    return PooledProvider(providers) if len(providers) > 1 else providers[0]
