"""``/metrics`` over the front and its workers: one family per name, each worker labelled."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from toolprep.runtime.telemetry.gathered_metrics import WORKER_LABEL, gathered_families


def _worker_text(discards: int, shared_value: float) -> str:
    registry = CollectorRegistry()
    counter = Counter("toolprep_cards_discarded", "Discards.", ["reason"], registry=registry)
    counter.labels(reason="retry").inc(discards)
    Counter("shared", "A name the front has too.", registry=registry).inc(shared_value)
    return generate_latest(registry).decode()


def test_the_workers_samples_share_one_family_each_labelled_with_its_worker() -> None:
    front = CollectorRegistry()
    Counter("shared", "The front's own.", registry=front).inc(7)
    readings = [(0, _worker_text(2, 100)), (1, _worker_text(3, 200)), (2, "not { metrics")]
    text = generate_latest(gathered_families(front, lambda: readings)).decode()

    families = {f.name: f for f in text_string_to_metric_families(text)}
    # Rendered once each, as the text format requires.
    assert text.count("# TYPE toolprep_cards_discarded_total counter") == 1
    discards = {
        s.labels[WORKER_LABEL]: s.value
        for s in families["toolprep_cards_discarded"].samples
        if s.name.endswith("_total")
    }
    assert discards == {"0": 2.0, "1": 3.0}  # the worker whose text did not parse is left out
    # A name the front records too: its sample and the workers', in one family.
    shared = [s for s in families["shared"].samples if s.name == "shared_total"]
    assert sorted((s.labels.get(WORKER_LABEL, "front"), s.value) for s in shared) == [
        ("0", 100.0),
        ("1", 200.0),
        ("front", 7.0),
    ]
    assert text.count("# TYPE shared_total counter") == 1


def test_without_workers_the_page_is_the_fronts() -> None:
    front = CollectorRegistry()
    Counter("toolprep_turns", "Turns.", registry=front).inc()
    text = generate_latest(gathered_families(front, None)).decode()
    assert "toolprep_turns_total 1.0" in text
