"""The client side of one WebSocket connection: an editor's ACP connection, with a reader thread."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from benchmarks import _harness as h

__all__ = ["CALL_TIMEOUT_S", "Line", "ResultHandler", "WsLoadClient"]

CALL_TIMEOUT_S = 60.0

Line = dict[str, Any]
ResultHandler = Callable[[Line, int], None]


class WsLoadClient:
    """One ACP connection to the daemon, as a remote editor holds it: a reader thread each.

    Responses are matched to requests by id and their callbacks run on the
    reader thread, in wire order with the frames; ``on_update(session_id,
    update, read_ns)`` gets each ``session/update`` with ``read_ns``, the
    ``time.time_ns()`` right after the frame was read (comparable with the
    provider's send stamps). When the connection ends every unanswered
    request is answered with a local error, so nothing waits for a reply
    that cannot come.
    """

    def __init__(
        self, url: str, token: str, on_update: h.UpdateHandler, name: str = "bench-ws"
    ) -> None:
        self.socket: ClientConnection = connect(
            url,
            additional_headers={"Authorization": f"Bearer {token}"},
            compression=None,
            legacy=True,
            max_size=None,
            open_timeout=CALL_TIMEOUT_S,
        )
        self._on_update = on_update
        self._ids = itertools.count(1)
        self._pending: dict[int, ResultHandler] = {}
        self._lock = threading.Lock()
        self.errors: list[Line] = []
        self.agent_requests = 0
        self.close_code: int | None = None
        self.reader = threading.Thread(target=self._read_loop, name=name, daemon=True)
        self.reader.start()

    def request(self, method: str, params: Any, on_result: ResultHandler | None = None) -> None:
        """Send a request; ``on_result(response, read_ns)`` runs on the reader thread.

        Raises ``ConnectionClosed`` once the connection is gone, unless the
        reader has already answered the request with its local error.
        """
        request_id = next(self._ids)
        if on_result is not None:
            with self._lock:
                self._pending[request_id] = on_result
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        try:
            self.socket.send(orjson.dumps(message), text=True)
        except ConnectionClosed:
            with self._lock:
                unanswered = self._pending.pop(request_id, None)
            if unanswered is not None or on_result is None:
                raise

    def notify(self, method: str, params: Any) -> None:
        """Send a notification (``session/cancel``): no id, no answer."""
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        self.socket.send(orjson.dumps(message), text=True)

    def call(self, method: str, params: Any, timeout: float = CALL_TIMEOUT_S) -> Line:
        """Blocking request for set-up steps (never call it from the reader thread)."""
        return h.blocking_call(self.request, method, params, timeout)

    def _read_loop(self) -> None:
        loads = orjson.loads
        on_update = self._on_update
        recv = self.socket.recv
        try:
            while True:
                data = recv(decode=False)
                read_ns = time.time_ns()
                message = loads(data)
                method = message.get("method")
                if method == "session/update":
                    params = message["params"]
                    on_update(params["sessionId"], params["update"], read_ns)
                elif method is None:
                    with self._lock:
                        callback = self._pending.pop(message.get("id"), None)
                    if callback is not None:
                        callback(message, read_ns)
                    elif "error" in message:
                        self.errors.append(message)
                else:
                    self.agent_requests += 1  # none expected: read_file needs no permission
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self.socket.close_code
            with self._lock:
                orphans = list(self._pending.values())
                self._pending.clear()
            gone: Line = {"error": {"code": None, "message": "connection closed"}}
            for callback in orphans:
                callback(gone, time.time_ns())

    def close(self) -> None:
        self.socket.close()
        self.reader.join(10)
