"""Every histogram declares bucket bounds in its own unit, so its quantiles mean something.

The SDK's default bounds (0 to 10 000) are made for milliseconds: a latency in seconds
would land in the first bucket whatever it was, and every p99 would read about 5 s.
"""

from __future__ import annotations

from toolprep.runtime.telemetry.instruments import FAST_SECONDS, INSTRUMENTS, PREPARING_LATENCY


def test_every_histogram_has_ascending_bounds() -> None:
    histograms = [spec for spec in INSTRUMENTS if spec.kind == "histogram"]
    assert histograms
    for spec in histograms:
        assert spec.buckets, spec.name
        assert list(spec.buckets) == sorted(set(spec.buckets)), spec.name
        assert spec.buckets[0] > 0, spec.name


def test_a_card_is_measured_in_fractions_of_a_millisecond() -> None:
    assert PREPARING_LATENCY.buckets == FAST_SECONDS
    assert FAST_SECONDS[0] <= 0.0001


def test_other_instruments_have_no_bounds() -> None:
    assert all(spec.buckets is None for spec in INSTRUMENTS if spec.kind != "histogram")
