"""A provider whose SDK loads in the background while the agent already answers.

Importing ``anthropic`` or ``openai`` costs one to two seconds of CPU on an idle
machine and many more on a busy one, and nothing before a model request needs
it: not ``initialize``, not ``session/new``. ``DeferredProvider`` starts that
import on a thread of its own as soon as the routes are built, at launch, and
builds the real provider (``factory.build_provider``) on the first stream,
which waits for the import only if it has not finished by then. The wait is
an ``await`` on the stream loop, so other streams and replies go on meanwhile.

A thread rather than a lazy import at the first stream: by the time an editor
sends its first prompt the SDK is usually loaded, so the first tool card is
not held back either. Settings that would make the build fail (an unknown
provider, OpenAI's default endpoint without a key) are checked before the
thread starts, so they are still refused at launch.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future

from toolprep.messages.content import GenerateContentResponse
from toolprep.runtime.providers.base import ModelRequest, Provider, StreamError

__all__ = ["DeferredProvider"]


class DeferredProvider:
    """A ``Provider`` named ``name`` that imports ``module`` on a background thread and
    calls ``build`` (on the stream loop) once it is in."""

    def __init__(self, name: str, module: str, build: Callable[[], Provider]) -> None:
        self.name = name
        self.module = module
        self._build = build
        self._built: Provider | None = None
        self._lock = threading.Lock()
        self._imported: Future[None] = Future()
        threading.Thread(target=self._import, name=f"toolprep-import-{module}", daemon=True).start()

    def _import(self) -> None:
        try:
            importlib.import_module(self.module)
        except BaseException as exc:  # reported by the first stream, not lost on this thread
            self._imported.set_exception(exc)
        else:
            self._imported.set_result(None)

    def _provider(self) -> Provider:
        with self._lock:
            if self._built is None:
                self._built = self._build()
            return self._built

    def resolve(self, timeout: float | None = None) -> Provider:
        """The real provider, waiting up to ``timeout`` for the SDK import (any thread)."""
        self._imported.result(timeout)
        return self._provider()

    async def stream(self, request: ModelRequest) -> AsyncIterator[GenerateContentResponse]:
        provider = self._built
        if provider is None:
            try:
                await asyncio.wrap_future(self._imported)
            except Exception as exc:
                raise StreamError(
                    f"the {self.name} SDK could not be imported: {exc}",
                    retryable=False,
                    kind="setup",
                ) from exc
            provider = self._provider()
        async for chunk in provider.stream(request):
            yield chunk

    async def aclose(self) -> None:
        """Close the real provider's client, if a stream ever built it."""
        if self._built is not None:
            await self._built.aclose()
