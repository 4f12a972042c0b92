"""The plain HTTP GETs ``toolprep serve`` answers beside its WebSocket: metrics and health.

They are answered in the WebSocket server's ``process_request`` hook, on the same port and
loop as ``/acp`` (no second server, no second thread):

- ``GET /metrics``: the metrics in the Prometheus text format (or OpenMetrics, if the
  scraper's ``Accept`` asks for it), rendered by ``prometheus_client`` from the
  OpenTelemetry Prometheus reader (``runtime/telemetry``). It needs the daemon's bearer
  token, as ``/acp`` does. Without the ``telemetry`` extra, or with ``OTEL_SDK_DISABLED``,
  it answers 503 saying so. The page is rendered on a handler thread, not on the loop.
- ``GET /healthz``: 200 while the process serves (alive).
- ``GET /readyz``: 200 once the store can be written and the workers are up
  (``telemetry.health``), 503 otherwise and while the daemon stops.

The health paths need no token and say nothing but the state. All of them keep the
``Host`` and ``Origin`` checks (``admission``). With ``--metrics-port`` the metrics are
also served without a token on a loopback-only port of their own (``metrics_port``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import http
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Final, assert_never

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from toolprep.runtime.daemon.admission import Admission
from toolprep.runtime.telemetry.health import Readiness
from toolprep.runtime.telemetry.setup import Exposition, Telemetry, Unavailable

__all__ = ["HEALTH_PATH", "METRICS_PATH", "READY_PATH", "HttpEndpoints"]

logger = logging.getLogger(__name__)

METRICS_PATH: Final = "/metrics"
HEALTH_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"


class HttpEndpoints:
    """Answers the plain GETs for one listening port.

    ``probes``: ``/healthz`` and ``/readyz`` are served here too; ``token``: ``/metrics``
    needs the bearer token. ``serving()`` turns false once the daemon stops accepting.
    """

    def __init__(
        self,
        admission: Admission,
        telemetry: Telemetry,
        ready: Readiness,
        executor: Executor,
        serving: Callable[[], bool],
        *,
        probes: bool,
        token: bool,
    ) -> None:
        self._admission = admission
        self._telemetry = telemetry
        self._ready = ready
        self._executor = executor
        self._serving = serving
        self._probes = probes
        self._token = token

    def serves(self, path: str) -> bool:
        return path == METRICS_PATH or (self._probes and path in (HEALTH_PATH, READY_PATH))

    async def answer(self, connection: ServerConnection, request: Request, path: str) -> Response:
        """The response to a GET of ``path`` (one this ``serves``)."""
        metrics = path == METRICS_PATH
        refused = self._admission.check_plain(request.headers, token=metrics and self._token)
        if refused is not None:
            logger.info("refused GET %s (%d): %s", path, refused.status, refused.reason)
            answer = connection.respond(refused.status, refused.reason + "\n")
            if refused.status == http.HTTPStatus.UNAUTHORIZED:
                answer.headers["WWW-Authenticate"] = "Bearer"
            return answer
        if metrics:
            return await self._metrics(connection, request)
        if path == HEALTH_PATH:
            return connection.respond(http.HTTPStatus.OK, "alive\n")
        loop = asyncio.get_running_loop()
        ready = self._serving() and await loop.run_in_executor(self._executor, self._ready)
        if ready:
            return connection.respond(http.HTTPStatus.OK, "ready\n")
        return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "not ready\n")

    async def _metrics(self, connection: ServerConnection, request: Request) -> Response:
        accept = request.headers.get("Accept", "")
        loop = asyncio.get_running_loop()
        page = await loop.run_in_executor(self._executor, self._telemetry.page, accept)
        match page:
            case Exposition(body, content_type):
                answer = connection.respond(http.HTTPStatus.OK, "")
                # ``Headers`` keeps every value set: replace, do not add a second one.
                for name, value in (("Content-Type", content_type), ("Content-Length", len(body))):
                    del answer.headers[name]
                    answer.headers[name] = str(value)
                return dataclasses.replace(answer, body=body)
            case Unavailable(reason):
                return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, reason + "\n")
            case _:
                assert_never(page)
