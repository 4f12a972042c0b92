"""The process's telemetry: metrics (OpenTelemetry, the ``telemetry`` extra) and readiness.

``settings`` reads the standard ``OTEL_*`` variables; ``setup`` starts what they ask for
(nothing, unless configured; ``toolprep serve``'s ``/metrics`` always asks for the
Prometheus reader); ``instruments`` is the typed facade the daemon records into, a no-op
when telemetry is off; ``health`` says whether the daemon is ready. Importing this package,
``settings``, ``instruments``, ``setup`` or ``health`` imports nothing of OpenTelemetry.
See docs/observability.md.
"""
