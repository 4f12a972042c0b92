"""The SSE decoder's cost and size bounds: linear scanning, the per-event cap, end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from acp import RequestError, text_block
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.runtime import scenarios as sc
from tests.support.agent_process import RecordingClient, agent_command, running_agent
from tests.support.eventually import eventually_async
from tests.support.runtime_harness import harness
from toolprep.runtime.providers.base import StreamError
from toolprep.runtime.providers.errors import format_bytes
from toolprep.runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES, SseDecoder, decode_sse
from toolprep.testing import FakeProviderServer, ScriptedResponse, unterminated_line

MIB = 1 << 20


def feed_pieces(decoder: SseDecoder, raw: bytes, cuts: list[int]) -> list[tuple[str | None, str]]:
    points = sorted({c % (len(raw) + 1) for c in cuts})
    out: list[tuple[str | None, str]] = []
    for a, b in zip([0, *points], [*points, len(raw)], strict=True):
        out += decoder.feed(raw[a:b])
    tail: list[tuple[str | None, str]] = decoder.end()
    return out + tail


# --- linear decoding -------------------------------------------------------------------


def test_each_byte_is_scanned_once_however_long_the_unfinished_line() -> None:
    decoder = SseDecoder()
    pieces = [b"data: ", *[b"y" * 100] * 2_000, b"\n\n"]
    events = [e for piece in pieces for e in decoder.feed(piece)]
    assert events == [(None, "y" * 200_000)]
    # Re-scanning the unfinished line on every read would count about 2000 x 100 KB.
    assert decoder.scanned_bytes == sum(len(p) for p in pieces)


def test_crlf_split_from_a_long_line_still_ends_it_once() -> None:
    decoder = SseDecoder()
    out = decoder.feed(b"data: " + b"z" * 5000)
    out += decoder.feed(b"\r")
    out += decoder.feed(b"\n")
    out += decoder.feed(b"\r\n")
    assert out == [(None, "z" * 5000)]
    assert decoder.scanned_bytes == 5006 + 1 + 1 + 2 - 1  # the LF of the split CRLF is skipped


_ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r"])
_VALUE = st.builds(
    lambda base, times: base * times,
    st.text(st.characters(blacklist_characters="\r\n", max_codepoint=0x2FF), max_size=12),
    st.integers(1, 3000),
)
_EVENT = st.tuples(
    st.one_of(st.none(), st.text("abcdefgh_", min_size=1, max_size=8)),
    st.lists(st.tuples(_VALUE, _ENDINGS), min_size=1, max_size=4),
    _ENDINGS,
)


@settings(max_examples=120, deadline=None)
@given(events=st.lists(_EVENT, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 10**6)))
def test_any_events_and_read_boundaries_decode_to_what_was_sent(
    events: list[tuple[str | None, list[tuple[str, bytes]], bytes]], cuts: list[int]
) -> None:
    raw = b""
    expected: list[tuple[str | None, str]] = []
    for name, lines, blank in events:
        if name is not None:
            raw += b"event: " + name.encode() + b"\n"
        for value, ending in lines:
            raw += b"data: " + value.encode() + ending
        raw += blank if lines[-1][1] != b"\r" or blank != b"\n" else b"\r"
        expected.append((name, "\n".join(value for value, _ in lines)))
    assert feed_pieces(SseDecoder(), raw, cuts) == expected
    assert decode_sse(raw) == expected


# --- the per-event cap -----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(size=st.integers(7, 3000), limit=st.integers(7, 3000), cuts=st.lists(st.integers(0, 4000)))
def test_a_line_is_accepted_exactly_when_it_fits_the_limit(
    size: int, limit: int, cuts: list[int]
) -> None:
    line = b"data: " + b"q" * (size - 6)
    decoder = SseDecoder(max_event_bytes=limit)
    if size <= limit:
        assert feed_pieces(decoder, line + b"\n\n", cuts) == [(None, "q" * (size - 6))]
    else:
        with pytest.raises(StreamError) as caught:
            feed_pieces(decoder, line + b"\n\n", cuts)
        assert caught.value.kind == "event_too_large"


def test_the_cap_fires_on_the_read_that_crosses_it_not_at_the_end() -> None:
    decoder = SseDecoder(max_event_bytes=64 * 1024)
    pieces = unterminated_line(MIB, piece=16 * 1024)
    for piece in pieces[:4]:
        assert decoder.feed(piece) == []  # 64 KiB held: exactly the limit
    with pytest.raises(StreamError) as caught:
        decoder.feed(pieces[4])
    error = caught.value
    assert (error.kind, error.retryable) == ("event_too_large", False)
    assert "SSE event exceeded the 64 KiB limit" in error.message


def test_many_data_lines_add_up_to_one_event() -> None:
    line = b"data: " + b"a" * 94 + b"\n"  # 101 bytes with its line ending
    decoder = SseDecoder(max_event_bytes=1010)
    assert decoder.feed(line * 10 + b"\n") == [(None, "\n".join(["a" * 94] * 10))]
    with pytest.raises(StreamError, match="1010 bytes limit"):
        decoder.feed(line * 11 + b"\n")


def test_the_count_starts_again_with_each_event() -> None:
    event = b"data: " + b"b" * 900 + b"\n\n"
    decoder = SseDecoder(max_event_bytes=1000)
    assert len(decoder.feed(event * 50)) == 50


def test_default_cap_is_8_mib_and_named_in_the_message() -> None:
    decoder = SseDecoder()
    assert decoder.max_event_bytes == DEFAULT_MAX_EVENT_BYTES == 8 * MIB
    with pytest.raises(StreamError) as caught:
        for piece in unterminated_line(8 * MIB + 1, piece=MIB):
            decoder.feed(piece)
    assert caught.value.message.startswith("SSE event exceeded the 8 MiB limit")
    assert "--max-sse-event-bytes" in caught.value.message


@pytest.mark.parametrize(
    ("size", "shown"),
    [(8 * MIB, "8 MiB"), (512 * 1024, "512 KiB"), (1 << 30, "1 GiB"), (1000, "1000 bytes")],
)
def test_limits_are_shown_in_the_unit_they_were_set_in(size: int, shown: str) -> None:
    assert format_bytes(size) == shown


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        SseDecoder(max_event_bytes=0)


# --- end to end --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_huge_unterminated_line_fails_the_turn_without_retry(kind: str, tmp_path: Path) -> None:
    with harness(kind, tmp_path, max_retries=3) as h:
        h.server.enqueue(ScriptedResponse(events=unterminated_line(9 * MIB)))
        failing, failing_sink = h.session()
        result = h.turn(failing, failing_sink, timeout=60)
        assert result.stop_reason is None and result.error is not None
        assert result.error.startswith("SSE event exceeded the 8 MiB limit")
        assert len(h.server.requests) == 1  # final: no retry
        assert h.runtime.supervisor_state.retries == 0
        # The agent goes on serving: another session, and the same one again.
        h.server.enqueue(sc.ok(sc.text_turn(kind, "fine")), sc.ok(sc.text_turn(kind, "again")))
        other, other_sink = h.session()
        assert h.turn(other, other_sink).stop_reason == "end_turn"
        assert h.turn(failing, failing_sink).stop_reason == "end_turn"


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
async def test_cli_limit_applies_while_another_session_is_served(kind: str, tmp_path: Path) -> None:
    with FakeProviderServer() as server:
        # Paced, so the oversized event is still arriving while the other session runs.
        server.enqueue(ScriptedResponse(events=unterminated_line(2 * MIB), pace_s=0.02))
        client = RecordingClient()
        command, env = agent_command(kind, server, "--max-sse-event-bytes", str(MIB))
        async with running_agent(command, env, client) as (conn, _):
            big = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            small = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            failing = asyncio.ensure_future(
                conn.prompt(session_id=big.session_id, prompt=[text_block("go")])
            )
            await eventually_async(lambda: server.requests)
            server.enqueue(sc.ok(sc.text_turn(kind, "Served.")))
            reply = await conn.prompt(session_id=small.session_id, prompt=[text_block("hi")])
            assert reply.stop_reason == "end_turn"
            with pytest.raises(RequestError) as caught:
                await asyncio.wait_for(failing, 30)
        assert "SSE event exceeded the 1 MiB limit" in str(caught.value)
        assert len(server.requests) == 2  # one each: the oversized event was not retried
        texts = [
            f["content"]["text"]
            for f in client.frames(small.session_id)
            if f["sessionUpdate"] == "agent_message_chunk"
        ]
        assert "".join(texts) == "Served."
