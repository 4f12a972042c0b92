"""The SSE decoder: WHATWG line rules, EOF handling, and independence from read boundaries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.providers.helpers import FIXTURES
from toolprep.runtime.providers.sse import SseDecoder, decode_sse


def test_event_name_and_data() -> None:
    assert decode_sse(b"event: ping\ndata: {}\n\n") == [("ping", "{}")]


def test_data_without_event_name() -> None:
    assert decode_sse(b"data: x\n\n") == [(None, "x")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert decode_sse(b"data: a\ndata: b\ndata:\n\n") == [(None, "a\nb\n")]


def test_only_one_space_after_colon_is_dropped() -> None:
    assert decode_sse(b"data:x\n\ndata:  y\n\n") == [(None, "x"), (None, " y")]


def test_comments_and_unknown_fields_are_ignored() -> None:
    body = b": keep-alive\nid: 7\nretry: 100\nfoo: bar\ndata: z\n\n"
    assert decode_sse(body) == [(None, "z")]


def test_blank_line_without_data_dispatches_nothing_and_resets_event_name() -> None:
    assert decode_sse(b"event: a\n\ndata: b\n\n") == [(None, "b")]


def test_crlf_and_cr_line_endings() -> None:
    assert decode_sse(b"event: e\r\ndata: 1\r\n\r\n") == [("e", "1")]
    assert decode_sse(b"event: e\rdata: 2\r\r") == [("e", "2")]


def test_crlf_split_across_reads_is_one_line_ending() -> None:
    decoder = SseDecoder()
    out = decoder.feed(b"data: 1\r")
    out += decoder.feed(b"\n\r")
    out += decoder.feed(b"\ndata: 2\r\n\r\n")
    assert out + decoder.end() == [(None, "1"), (None, "2")]


def test_trailing_event_without_blank_line_is_dispatched_at_end() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b'data: {"type":"message_stop"}') == []
    assert decoder.end() == [(None, '{"type":"message_stop"}')]


def test_trailing_event_with_newline_but_no_blank_line() -> None:
    assert decode_sse(b"data: last\n") == [(None, "last")]


def test_leading_bom_is_skipped_even_when_split() -> None:
    decoder = SseDecoder()
    out = decoder.feed(b"\xef")
    out += decoder.feed(b"\xbb")
    out += decoder.feed(b"\xbfdata: x\n\n")
    assert out == [(None, "x")]


def test_multibyte_utf8_split_across_reads() -> None:
    raw = "data: café — ok\n\n".encode()
    decoder = SseDecoder()
    out: list[tuple[str | None, str]] = []
    for i in range(len(raw)):
        out += decoder.feed(raw[i : i + 1])
    assert out + decoder.end() == [(None, "café — ok")]


TRANSCRIPTS = [p.read_bytes() for p in sorted(FIXTURES.glob("*.sse"))] + [
    b"event: a\r\ndata: 1\r\ndata: 2\r\n\r\n: c\r\ndata: 3\r\rdata: 4",
]


@settings(max_examples=150, deadline=None)
@given(
    index=st.integers(0, len(TRANSCRIPTS) - 1), cuts=st.lists(st.integers(0, 10_000), max_size=40)
)
def test_any_read_boundaries_give_the_same_events(index: int, cuts: list[int]) -> None:
    raw = TRANSCRIPTS[index]
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    decoder = SseDecoder()
    out: list[tuple[str | None, str]] = []
    for piece in pieces:
        out += decoder.feed(piece)
    assert out + decoder.end() == decode_sse(raw)
    assert decode_sse(raw)  # every transcript has events
