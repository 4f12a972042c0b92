"""One scrape of ``/metrics`` over several processes: the front's metrics and its workers'.

In the daemon with workers, turns run in the worker processes, so that is where the
attempts, cards and tool calls are counted. Each worker records them in a Prometheus
registry of its own; at each scrape the front reads every live worker's exposition
(``WorkerHost.read_worker_metrics``), parses it with ``prometheus_client``'s parser and
serves it with its own: the samples of one name, the front's and every worker's, under one
family (as the text format requires), each worker's labelled ``worker`` with its slot. A
worker's family whose type differs from the front's of the same name is left out (it
could not be rendered as one). A worker that does not answer in time is left out of that
scrape only.

Imported only once telemetry is on (it imports ``prometheus_client``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from toolprep.runtime.telemetry.setup import WorkerReadings

__all__ = ["WORKER_LABEL", "gathered_families"]

logger = logging.getLogger(__name__)

WORKER_LABEL = "worker"


class _Families:
    """What ``prometheus_client``'s encoders render: anything with ``collect``."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def gathered_families(registry: CollectorRegistry, workers: WorkerReadings | None) -> _Families:
    """The front's families with every worker's samples merged in by name."""
    own = list(registry.collect())
    if workers is None:
        return _Families(own)
    merged: dict[str, Metric] = {family.name: family for family in own}
    for slot, text in workers():
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError as exc:
            logger.warning("worker %d sent metrics that do not parse: %s", slot, exc)
            continue
        for family in parsed:
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            elif into.type != family.type:
                continue
            into.samples.extend(_labelled(family.samples, slot))
    return _Families(list(merged.values()))


def _labelled(samples: Iterable[Sample], slot: int) -> list[Sample]:
    label = str(slot)
    return [
        Sample(s.name, {**s.labels, WORKER_LABEL: label}, s.value, s.timestamp, s.exemplar)
        for s in samples
    ]
