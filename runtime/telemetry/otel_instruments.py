"""``Metrics`` recorded into OpenTelemetry instruments (the ``telemetry`` extra).

Imported only once telemetry is on (``setup``): importing this module imports the
OpenTelemetry API. The observable instruments call their readings on the collecting
thread (a scrape, an export); a reading that fails is logged and skipped for that
collection, so a broken reading never fails a scrape of the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from toolprep.runtime.telemetry.instruments import (
    CLIENTS_ATTACHED,
    CONNECTIONS_OPEN,
    FRAMES_CACHED_BYTES,
    SEND_BUFFER_BYTES,
    SESSIONS_LIVE,
    TURNS,
    WORKER_RESTARTS,
    ConnectionReadings,
    InstrumentSpec,
    Metrics,
    SessionReadings,
    TurnOutcome,
)

__all__ = ["OtelMetrics"]

logger = logging.getLogger(__name__)

Reading = Callable[[], int]


class OtelMetrics(Metrics):
    """The instruments of one ``Meter``; each reading is registered once (the latest wins)."""

    def __init__(self, meter: Meter) -> None:
        self._turns = meter.create_counter(TURNS.name, TURNS.unit, TURNS.description)
        self._lock = threading.Lock()
        self._readings: dict[str, Reading] = {}
        observed = (
            SESSIONS_LIVE,
            CLIENTS_ATTACHED,
            FRAMES_CACHED_BYTES,
            CONNECTIONS_OPEN,
            SEND_BUFFER_BYTES,
        )
        for spec in observed:
            meter.create_observable_up_down_counter(
                spec.name, [self._callback(spec)], spec.unit, spec.description
            )
        meter.create_observable_counter(
            WORKER_RESTARTS.name,
            [self._callback(WORKER_RESTARTS)],
            WORKER_RESTARTS.unit,
            WORKER_RESTARTS.description,
        )

    def turn_ended(self, outcome: TurnOutcome) -> None:
        self._turns.add(1, {"stop_reason": outcome})

    def observe_sessions(self, readings: SessionReadings) -> None:
        self._read(SESSIONS_LIVE, lambda: readings.open_sessions)
        self._read(CLIENTS_ATTACHED, lambda: readings.attached_clients)
        self._read(FRAMES_CACHED_BYTES, lambda: readings.cached_frame_bytes)

    def observe_connections(self, readings: ConnectionReadings) -> None:
        self._read(CONNECTIONS_OPEN, lambda: readings.connections)
        self._read(SEND_BUFFER_BYTES, lambda: readings.send_buffer_bytes)

    def observe_worker_restarts(self, restarts: Callable[[], int]) -> None:
        self._read(WORKER_RESTARTS, restarts)

    def _read(self, spec: InstrumentSpec, reading: Reading) -> None:
        with self._lock:
            self._readings[spec.name] = reading

    def _callback(self, spec: InstrumentSpec) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                reading = self._readings.get(spec.name)
            if reading is None:  # nothing registered it in this process: no point at all
                return []
            try:
                return [Observation(reading())]
            except Exception:
                logger.exception("cannot read %s for this collection", spec.name)
                return []

        return observe
