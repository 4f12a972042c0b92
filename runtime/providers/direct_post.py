"""One streaming POST straight over aiohttp, sending what the SDK client would have sent.

Going through an SDK's ``post`` cost more CPU than everything else in a
stream: per request it rebuilt options, URL and headers, and its httpx
layer over aiohttp wrapped every read. ``DirectPost`` keeps the SDK for
what it knows and does the rest itself:

- from the SDK client, once: the absolute URL (``base_url`` plus the path,
  redone only when ``base_url`` is replaced), the headers (its public
  ``default_headers``: credentials, version and platform headers, the
  user's default headers; plus the ``x-stainless-*`` retry count and
  timeouts its ``create()`` adds) and the timeouts (``client.timeout``);
- per request: the body the provider serialised, one aiohttp POST on the
  ``ClientSession`` of the running loop (one per loop that streams, opened
  by its first request and closed by ``aclose`` on that loop; the runtime
  streams on one loop), and a ``Reply`` whose ``read`` is the response's
  own ``content.readany``; once the headers are in, the body's read timeout
  is kept by one sweep per loop (``read_deadline``) rather than by a timer
  re-armed on every read;
- on failure only, the SDK's exceptions: a non-2xx answer is handed to the
  SDK client's own status-error factory (so the class, e.g.
  ``RateLimitError``, and the message are exactly what a caller of
  ``create()`` gets), and a failed connection becomes its
  ``APIConnectionError`` / ``APITimeoutError``. Tests pin both against the
  SDK on the same responses.

The session is built like the SDK's aiohttp client: the SDK's connection
limit, TLS from ``httpx2.create_ssl_context`` (which honours
``SSL_CERT_FILE``/``SSL_CERT_DIR``), and the proxy the environment names
(``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``, read once per base URL), which the
SDK's httpx client mounts in front of its aiohttp transport. Unlike the
SDK, nothing is retried here: the supervisor retries a stream with its own
policy, which honours ``retry-after`` and caps the wait.

A client built with an ``http_client`` of the caller's (tests, benchmarks
comparing transports) is posted to through that httpx client instead, and
so is a client whose credentials are an auth flow rather than a header
(Anthropic's token cache for OAuth or workload identity, ``custom_auth``):
through the SDK client's own http client, with that flow, which refreshes
the token as the SDK would.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import httpx2
import yarl

from toolprep.messages.content import GenerateContentResponse
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.read_deadline import ReadDeadlines
from toolprep.runtime.providers.sdk_compat import sdk_http_client
from toolprep.runtime.providers.streaming import (
    Reply,
    StreamAdapter,
    not_found_at,
    sdk_error_explained,
    sdk_status_error,
    stream_chunks,
    transport_error,
)

__all__ = [
    "CONNECTION_LIMIT",
    "TRANSPORT_ERRORS",
    "ConnectionErrorFactory",
    "DirectPost",
    "ExceptionMap",
    "SdkClient",
    "environment_proxy",
    "request_headers",
]

CONNECTION_LIMIT = 1000
"""The SDKs' ``DEFAULT_CONNECTION_LIMITS.max_connections``."""

TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    TimeoutError,
    httpx2.TransportError,
    httpx2.DecodingError,
)
"""What a failed connection or read raises, on either transport."""


class SdkClient(Protocol):
    """What ``anthropic.AsyncAnthropic`` and ``openai.AsyncOpenAI`` both offer."""

    @property
    def base_url(self) -> httpx2.URL: ...

    @property
    def auth_headers(self) -> Mapping[str, str]: ...

    @property
    def default_headers(self) -> Mapping[str, object]: ...

    @property
    def timeout(self) -> float | httpx2.Timeout | None: ...

    @property
    def custom_auth(self) -> httpx2.Auth | None: ...


ConnectionErrorFactory = Callable[[httpx2.Request, httpx2.TransportError], Exception]
"""The SDK's exception for a connection that failed before the answer began."""


def request_headers(client: SdkClient, extra: Mapping[str, str]) -> dict[str, str]:
    """The headers ``create()`` sends on a first attempt, from the client's public
    properties (an ``Omit``-ted default header is left out, as the SDK leaves it out).

    Read on the event loop: the SDK names the async library it runs on in a header.
    ``extra`` holds what one SDK's ``create()`` adds and the other's does not.
    """
    layers = (client.auth_headers, client.default_headers)
    headers = {k: v for layer in layers for k, v in layer.items() if isinstance(v, str)}
    headers["connection"] = "keep-alive"  # what httpx sends, and aiohttp only implies
    timeout = client.timeout
    read = timeout.read if isinstance(timeout, httpx2.Timeout) else timeout
    headers["x-stainless-retry-count"] = "0"
    if read is not None:
        headers["x-stainless-read-timeout"] = str(read)
    headers.update(extra)
    return headers


def _client_timeout(timeout: float | httpx2.Timeout | None) -> aiohttp.ClientTimeout:
    """The SDK's timeouts as its aiohttp transport passes them: no total, per phase."""
    phases = httpx2.Timeout(timeout)
    return aiohttp.ClientTimeout(
        total=None, sock_connect=phases.connect, sock_read=phases.read, connect=phases.pool
    )


ExceptionMap = Callable[[], AbstractContextManager[None]]
"""An SDK's ``map_aiohttp_exceptions``: its aiohttp transport's aiohttp -> httpx error map
(the two SDKs' maps differ: OpenAI's reports a refused connection as a connect timeout)."""


def _as_httpx_error(exc: BaseException, exception_map: ExceptionMap) -> httpx2.TransportError:
    """The httpx error the SDK's aiohttp transport raises for ``exc`` (same type and text)."""
    if isinstance(exc, httpx2.TransportError):
        return exc
    try:
        with exception_map():
            raise exc
    except httpx2.TransportError as mapped:
        return mapped
    except Exception:  # not in the map: a plain timeout
        timeout = httpx2.ReadTimeout(str(exc))
        timeout.__cause__ = exc
        return timeout
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class _LoopPost:
    """A ``DirectPost``'s state on one event loop (a session's sockets belong to its loop)."""

    session: aiohttp.ClientSession
    deadlines: ReadDeadlines | None


class DirectPost:
    """Posts request bodies to one path of one SDK client's API, over aiohttp."""

    def __init__(
        self,
        client: SdkClient,
        path: str,
        *,
        connection_error: ConnectionErrorFactory,
        status_error: Callable[[httpx2.Response], Exception],
        exception_map: ExceptionMap,
        extra_headers: Mapping[str, str] | None = None,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self._extra_headers = dict(extra_headers or {})
        self.headers: dict[str, str] = {}  # read from the client on the first request's loop
        self._timeout = client.timeout
        self._aiohttp_timeout = _client_timeout(client.timeout)
        self._connection_error = connection_error
        self._exception_map = exception_map
        self._status_error = status_error
        self._auth = client.custom_auth
        if http_client is None and self._auth is not None:
            http_client = sdk_http_client(client)
        self._http_client = http_client
        self._on_loop: dict[asyncio.AbstractEventLoop, _LoopPost] = {}
        self._base_url: httpx2.URL | None = None
        self._url = ""
        self._parsed_url = yarl.URL()
        self._proxy: str | None = None

    @property
    def url(self) -> str:
        """The path joined onto the client's ``base_url`` as the SDK joins it (the base
        ends in a slash, the path's leading slash goes), redone only if ``base_url`` changes."""
        self._follow_base_url()
        return self._url

    def _follow_base_url(self) -> None:
        base = self.client.base_url
        if base is not self._base_url:
            raw_path = base.raw_path + self.path.lstrip("/").encode("ascii")
            self._url = str(base.copy_with(raw_path=raw_path))
            self._parsed_url = yarl.URL(self._url, encoded=True)  # aiohttp parses a str each time
            self._proxy = environment_proxy(base)
            self._base_url = base

    def stream(
        self, encode: Callable[[], bytes], adapter: StreamAdapter, *, max_event_bytes: int
    ) -> AsyncIterator[GenerateContentResponse]:
        """The stream of one request, for either wire: ``encode`` makes the body once the
        stream is iterated (so its errors come from the stream, as every failure does)."""

        async def send() -> Reply:
            return await self.open(encode())

        return stream_chunks(
            send,
            adapter,
            max_event_bytes=max_event_bytes,
            read_errors=TRANSPORT_ERRORS,
            read_failed=self.read_failed,
        )

    async def aclose(self) -> None:
        """Close the aiohttp session of the running loop (each loop that streamed has one,
        since a session's sockets belong to its loop)."""
        on_loop = self._on_loop.pop(asyncio.get_running_loop(), None)
        if on_loop is not None:
            await on_loop.session.close()

    async def open(self, body: bytes) -> Reply:
        """POST ``body``; a 2xx answer's ``Reply``, else the mapped ``StreamError``."""
        if self._http_client is not None:
            return await self._open_httpx(self._http_client, body)
        loop = asyncio.get_running_loop()
        on_loop = self._on_loop.get(loop)
        if on_loop is None:
            on_loop = self._on_loop[loop] = self._start_on(loop)
        try:
            self._follow_base_url()
            response = await on_loop.session.post(
                self._parsed_url,
                data=body,
                timeout=self._aiohttp_timeout,
                proxy=self._proxy,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._failed(exc)  # noqa: B904 (its cause is the SDK's error)
        if not 200 <= response.status < 300:
            try:
                content = await response.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise self._failed(exc)  # noqa: B904 (its cause is the SDK's error)
            finally:
                response.release()
            headers = [
                (k, v)
                for k, v in response.raw_headers
                if k.lower() not in (b"content-encoding", b"content-length", b"transfer-encoding")
            ]
            answer = httpx2.Response(
                response.status, headers=headers, content=content, request=self._request()
            )
            raise self._status_failure(answer)

        deadlines = on_loop.deadlines
        unwatch = deadlines.watch(response) if deadlines is not None else None

        async def close() -> None:
            if unwatch is not None:
                unwatch()
            if response.content.at_eof():
                response.release()
            else:
                response.close()  # abandoned mid-body: the server must see the hang-up

        return Reply(response.headers.get("content-type"), response.content.readany, close)

    def _start_on(self, loop: asyncio.AbstractEventLoop) -> _LoopPost:
        """What posting on ``loop`` needs, made by its first request: the headers (read on
        the loop), a session sending them, and the watch over its bodies' read timeout
        (none when the client sets no read timeout)."""
        self.headers = request_headers(self.client, self._extra_headers)
        read_timeout = self._aiohttp_timeout.sock_read
        deadlines = ReadDeadlines(loop, read_timeout) if read_timeout else None
        return _LoopPost(self._new_session(self.headers), deadlines)

    def _new_session(self, headers: Mapping[str, str]) -> aiohttp.ClientSession:
        """A session sending ``headers`` with every request: built into aiohttp's header
        map once, rather than merged into it on every request."""
        connector = aiohttp.TCPConnector(
            limit=CONNECTION_LIMIT, ssl=httpx2.create_ssl_context(trust_env=True)
        )
        # No trust_env: aiohttp would then read ~/.netrc and the proxy variables on every
        # request (on the executor: about a tenth of a core at 1000 sessions); the proxy is
        # read once per base URL instead (``environment_proxy``), and the SDK reads no netrc.
        return aiohttp.ClientSession(connector=connector, headers=headers)

    async def _open_httpx(self, http_client: httpx2.AsyncClient, body: bytes) -> Reply:
        if not self.headers:
            self.headers = request_headers(self.client, self._extra_headers)
        request = http_client.build_request(
            "POST", self.url, content=body, headers=self.headers, timeout=self._timeout
        )
        try:
            response = await http_client.send(request, stream=True, auth=self._auth)
        except httpx2.TransportError as exc:
            raise self._failed(exc)  # noqa: B904 (its cause is the SDK's error)
        if not response.is_success:
            try:
                await response.aread()
            finally:
                await response.aclose()
            raise self._status_failure(response)
        chunks = response.aiter_bytes()

        async def read() -> bytes:
            return await anext(chunks, b"")

        return Reply(response.headers.get("content-type"), read, response.aclose)

    def _request(self) -> httpx2.Request:
        """The request as the SDK would have described it in an exception."""
        return httpx2.Request(
            "POST",
            self.url,
            headers=self.headers,
            extensions={"timeout": httpx2.Timeout(self._timeout).as_dict()},
        )

    def _status_failure(self, answer: httpx2.Response) -> StreamError:
        sdk_error = self._status_error(answer)
        failure = sdk_status_error(sdk_error)
        if answer.status_code == 404 and not sdk_error_explained(sdk_error):
            failure = not_found_at(failure, self.url, str(self.client.base_url))
        failure.__cause__ = sdk_error
        return failure

    def _sdk_error(self, exc: BaseException) -> Exception:
        """What the SDK raises for a failed connection or read: its transport's httpx error
        (mapped from aiohttp's by the SDK's own map) wrapped by its client."""
        cause = _as_httpx_error(exc, self._exception_map)
        sdk_error = self._connection_error(self._request(), cause)
        sdk_error.__cause__ = cause
        return sdk_error

    def _failed(self, exc: BaseException) -> StreamError:
        sdk_error = self._sdk_error(exc)
        failure = transport_error(sdk_error, self.client.base_url)
        failure.__cause__ = sdk_error
        return failure

    def read_failed(self, exc: BaseException) -> StreamError:
        """A connection that failed mid-body. The message names the transport's own error
        (OpenAI's SDK would say only "Connection error."); the cause is the SDK's error."""
        failure = transport_error(exc, self.client.base_url)
        failure.__cause__ = self._sdk_error(exc)
        return failure


def environment_proxy(url: httpx2.URL) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP_PROXY``, ``HTTPS_PROXY``,
    ``ALL_PROXY``, with ``NO_PROXY`` exempting hosts), as the SDK's httpx client mounts it
    when it is built; None to connect directly."""
    if url.host and urllib.request.proxy_bypass(url.host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(url.scheme) or proxies.get("all")
