"""Ingest cost per SSE event: our adapters vs ``orjson.loads`` vs the SDKs' typed events.

For each provider the same decoded events are timed four ways, interleaved
in one run so machine noise hits all of them alike (best of several rounds):

- ``orjson``        ``orjson.loads(data)`` alone: the floor for any adapter,
                    since every adapter has to parse each event;
- ``adapter``       a fresh ``AnthropicStreamAdapter`` / ``OpenAIStreamAdapter``
                    per stream, ``feed`` on every event (chunks, preparations,
                    parsed calls: everything the runtime gets);
- ``sdk_construct`` what the SDK stream does per event: stdlib ``json.loads``
                    then ``construct_type`` into ``RawMessageStreamEvent`` /
                    ``ChatCompletionChunk`` (no validation, the SDK default);
- ``sdk_validate``  the same with pydantic validation (``validate_type``, the
                    SDK's ``_strict_response_validation`` path).

The corpus is every recorded transcript in ``tests/fixtures/providers``
(when present; streams that fail mid-way are left out) plus a synthetic
tool-heavy turn per provider in the shape of real streams: a short
thinking/text preamble, then two ``write_file`` calls whose arguments arrive
in fragments of the sizes the recorded streams use. Results are reported for
the whole corpus, per part (the recorded streams are short, so per-stream
and per-call work weighs more there) and per event class (argument
fragment / text or thinking delta / other).

Run: ``python -m benchmarks.ingest [--rounds N] [--out PATH]``; writes JSON to
``benchmarks/reports/ingest.json`` by default and prints a summary.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from toolprep.runtime.providers.anthropic_adapter import AnthropicStreamAdapter
from toolprep.runtime.providers.openai_adapter import OpenAIStreamAdapter
from toolprep.runtime.providers.sse import decode_sse

Event = tuple[str | None, bytes]
Stream = list[Event]

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "providers"
DEFAULT_OUT = ROOT / "benchmarks" / "reports" / "ingest.json"
TARGET_RATIO = 2.0


# --- corpus ----------------------------------------------------------------------------


def _fragments(text: str, rng: random.Random, low: int = 3, high: int = 16) -> Iterator[str]:
    i = 0
    while i < len(text):
        n = rng.randint(low, high)
        yield text[i : i + n]
        i += n


def _file_body(rng: random.Random) -> str:
    words = ("def", "return", "self", "value", "import", "class", "for", "in", "if", "None")
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) for _ in range(30)]
    return "\n".join(lines)


def _anthropic_turn(rng: random.Random) -> Stream:
    def ev(name: str, payload: dict[str, Any]) -> Event:
        return name, orjson.dumps(payload)

    out = [
        ev(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "model": "bench",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 900, "output_tokens": 1},
                },
            },
        )
    ]
    out.append(
        ev(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        )
    )
    for piece in _fragments(
        "I need to update both modules so the new helper is used everywhere.", rng, 8, 24
    ):
        out.append(
            ev(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": piece},
                },
            )
        )
    out.append(
        ev(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "c2ln" * 20},
            },
        )
    )
    out.append(ev("content_block_stop", {"type": "content_block_stop", "index": 0}))
    out.append(
        ev(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
        )
    )
    for piece in _fragments("I'll rewrite both files with the helper in place.", rng, 4, 12):
        out.append(
            ev(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": piece},
                },
            )
        )
    out.append(ev("content_block_stop", {"type": "content_block_stop", "index": 1}))
    for k in range(2):
        index = 2 + k
        out.append(
            ev(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": f"toolu_bench_{k}",
                        "name": "write_file",
                        "input": {},
                    },
                },
            )
        )
        out.append(
            ev(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": ""},
                },
            )
        )
        args = orjson.dumps({"path": f"src/module_{k}.py", "content": _file_body(rng)}).decode()
        for piece in _fragments(args, rng):
            out.append(
                ev(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                )
            )
        out.append(ev("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        ev(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 700},
            },
        )
    )
    out.append(ev("message_stop", {"type": "message_stop"}))
    return out


def _openai_turn(rng: random.Random) -> Stream:
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "bench",
        "system_fingerprint": "fp_bench",
    }

    def ev(delta: dict[str, Any], finish: str | None = None) -> Event:
        return None, orjson.dumps(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
        )

    out = [ev({"role": "assistant", "content": ""})]
    for piece in _fragments("I'll rewrite both files with the helper in place.", rng, 4, 12):
        out.append(ev({"content": piece}))
    for k in range(2):
        out.append(
            ev(
                {
                    "tool_calls": [
                        {
                            "index": k,
                            "id": f"call_bench_{k}",
                            "type": "function",
                            "function": {"name": "write_file", "arguments": ""},
                        }
                    ]
                }
            )
        )
        args = orjson.dumps({"path": f"src/module_{k}.py", "content": _file_body(rng)}).decode()
        for piece in _fragments(args, rng):
            out.append(ev({"tool_calls": [{"index": k, "function": {"arguments": piece}}]}))
    out.append(ev({}, "tool_calls"))
    out.append(
        (
            None,
            orjson.dumps(
                {
                    **base,
                    "choices": [],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 700, "total_tokens": 1600},
                }
            ),
        )
    )
    return out


def _fixture_streams(prefix: str) -> list[Stream]:
    streams = []
    for path in sorted(FIXTURES.glob(f"{prefix}-*.sse")):
        # The SDKs skip pings and [DONE] before parsing, so the corpus leaves them out too.
        events = [
            (e, d.encode())
            for e, d in decode_sse(path.read_bytes())
            if d != "[DONE]" and e != "ping"
        ]
        if any(b'"error"' in d for _, d in events):
            continue  # a stream that fails mid-way measures the error path, not ingest
        streams.append(events)
    return streams


def corpus(provider: str, seed: int = 7) -> dict[str, list[Stream]]:
    """``recorded`` (the fixture transcripts) and ``tool_heavy`` (one long synthetic turn)."""
    rng = random.Random(seed)
    synthetic = _anthropic_turn(rng) if provider == "anthropic" else _openai_turn(rng)
    return {"recorded": _fixture_streams(provider), "tool_heavy": [synthetic]}


def event_class(provider: str, data: bytes) -> str:
    """``argument_fragment``, ``text`` (text or thinking delta) or ``other``."""
    obj = orjson.loads(data)
    if provider == "anthropic":
        delta = obj.get("delta") if obj.get("type") == "content_block_delta" else None
        kind = delta.get("type") if isinstance(delta, dict) else None
        if kind == "input_json_delta":
            return "argument_fragment"
        return "text" if kind in ("text_delta", "thinking_delta") else "other"
    choices = obj.get("choices") or [{}]
    delta = choices[0].get("delta") or {}
    items = delta.get("tool_calls")
    if items and list(delta) == ["tool_calls"] and all("id" not in i for i in items):
        return "argument_fragment"
    if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
        return "text"
    return "other"


# --- measurement -------------------------------------------------------------------------


def _sdk_parsers(provider: str) -> tuple[Callable[[bytes], object], Callable[[bytes], object]]:
    """The SDKs' per-event work. Hand-made fixtures are not always schema-complete, so a
    failed validation counts as the work it did rather than aborting the run."""
    from pydantic import ValidationError

    if provider == "anthropic":
        from anthropic._models import construct_type as a_construct
        from anthropic._models import validate_type as a_validate
        from anthropic.types import RawMessageStreamEvent

        def a_cons(data: bytes) -> object:
            return a_construct(type_=RawMessageStreamEvent, value=json.loads(data))

        def a_val(data: bytes) -> object:
            try:
                return a_validate(type_=RawMessageStreamEvent, value=json.loads(data))  # type: ignore[arg-type]
            except ValidationError:
                return None

        return a_cons, a_val
    from openai._models import construct_type as o_construct
    from openai._models import validate_type as o_validate
    from openai.types.chat import ChatCompletionChunk

    def o_cons(data: bytes) -> object:
        return o_construct(type_=ChatCompletionChunk, value=json.loads(data))

    def o_val(data: bytes) -> object:
        try:
            return o_validate(type_=ChatCompletionChunk, value=json.loads(data))
        except ValidationError:
            return None

    return o_cons, o_val


def _time(fn: Callable[[], None]) -> int:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        fn()
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


def measure(provider: str, streams: list[Stream], rounds: int, reps: int) -> dict[str, Any]:
    adapter_cls: Callable[[], Any] = (
        AnthropicStreamAdapter if provider == "anthropic" else OpenAIStreamAdapter
    )
    sdk_construct, sdk_validate = _sdk_parsers(provider)
    loads = orjson.loads

    def run_orjson(events: list[Stream]) -> Callable[[], None]:
        def go() -> None:
            for _ in range(reps):
                for stream in events:
                    for _event, data in stream:
                        loads(data)

        return go

    def run_adapter(events: list[Stream]) -> Callable[[], None]:
        def go() -> None:
            for _ in range(reps):
                for stream in events:
                    feed = adapter_cls().feed
                    for event, data in stream:
                        feed(event, data)

        return go

    def run_sdk(
        parse: Callable[[bytes], object], events: list[Stream], scale: int
    ) -> Callable[[], None]:
        def go() -> None:
            for _ in range(max(1, reps // scale)):
                for stream in events:
                    for _event, data in stream:
                        parse(data)

        return go

    n_events = sum(len(s) for s in streams)
    totals: dict[str, list[float]] = {
        "orjson": [],
        "adapter": [],
        "sdk_construct": [],
        "sdk_validate": [],
    }
    sdk_scale = 4  # the SDK paths are slow; run fewer reps and scale per event
    for _ in range(rounds):
        totals["orjson"].append(_time(run_orjson(streams)) / (reps * n_events))
        totals["adapter"].append(_time(run_adapter(streams)) / (reps * n_events))
        sdk_reps = max(1, reps // sdk_scale)
        totals["sdk_construct"].append(
            _time(run_sdk(sdk_construct, streams, sdk_scale)) / (sdk_reps * n_events)
        )
        totals["sdk_validate"].append(
            _time(run_sdk(sdk_validate, streams, sdk_scale)) / (sdk_reps * n_events)
        )
    best = {k: min(v) for k, v in totals.items()}

    # The same comparison per event class, timed event by event inside whole-stream runs
    # (the adapter keeps per-stream state), minus the cost of the timer calls themselves.
    classes = [[event_class(provider, d) for _, d in stream] for stream in streams]
    clock = time.perf_counter_ns

    def per_class(
        step: Callable[[Any, str | None, bytes], object], fresh: Callable[[], Any]
    ) -> dict[str, int]:
        sums = {"argument_fragment": 0, "text": 0, "other": 0}
        for stream, labels in zip(streams, classes, strict=True):
            state = fresh()
            for (event, data), label in zip(stream, labels, strict=True):
                t0 = clock()
                step(state, event, data)
                sums[label] += clock() - t0
        return sums

    def noop(_state: Any, _event: str | None, _data: bytes) -> None:
        return None

    def parse_only(_state: Any, _event: str | None, data: bytes) -> None:
        loads(data)

    def adapter_step(state: Any, event: str | None, data: bytes) -> None:
        state.feed(event, data)

    best_class: dict[str, dict[str, float]] = {}
    for label_name, step, fresh in (
        ("timer", noop, lambda: None),
        ("orjson", parse_only, lambda: None),
        ("adapter", adapter_step, adapter_cls),
    ):
        runs = []
        for _ in range(rounds):
            gc.disable()
            try:
                runs.append(per_class(step, fresh))
            finally:
                gc.enable()
        best_class[label_name] = {k: float(min(r[k] for r in runs)) for k in runs[0]}
    by_class: dict[str, dict[str, float]] = {}
    for name in ("argument_fragment", "text", "other"):
        count = sum(labels.count(name) for labels in classes)
        if not count:
            continue
        timer = best_class["timer"][name]
        o = (best_class["orjson"][name] - timer) / count
        a = (best_class["adapter"][name] - timer) / count
        by_class[name] = {
            "events": count,
            "orjson_ns": round(o, 1),
            "adapter_ns": round(a, 1),
            "adapter_vs_orjson": round(a / o, 2),
        }

    return {
        "streams": len(streams),
        "events": n_events,
        "ns_per_event": {k: round(v, 1) for k, v in best.items()},
        "adapter_vs_orjson": round(best["adapter"] / best["orjson"], 2),
        "sdk_construct_vs_adapter": round(best["sdk_construct"] / best["adapter"], 2),
        "sdk_validate_vs_adapter": round(best["sdk_validate"] / best["adapter"], 2),
        "within_target": best["adapter"] / best["orjson"] <= TARGET_RATIO,
        "by_event_class": by_class,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7, help="timing rounds; the best is kept")
    parser.add_argument("--reps", type=int, default=40, help="passes over the corpus per round")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "target": f"adapter within {TARGET_RATIO}x of orjson.loads per event",
    }
    for provider in ("anthropic", "openai"):
        parts = corpus(provider)
        result = measure(
            provider, [s for streams in parts.values() for s in streams], args.rounds, args.reps
        )
        result["by_corpus"] = {}
        for name, streams in parts.items():
            if streams:
                sub = measure(provider, streams, args.rounds, args.reps)
                result["by_corpus"][name] = {
                    "events": sub["events"],
                    "ns_per_event": sub["ns_per_event"],
                    "adapter_vs_orjson": sub["adapter_vs_orjson"],
                }
        report[provider] = result
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for provider in ("anthropic", "openai"):
        r = report[provider]
        ns = r["ns_per_event"]
        print(
            f"{provider:<9} {r['events']:>5} events  orjson {ns['orjson']:7.0f} ns  "
            f"adapter {ns['adapter']:7.0f} ns"
            f"  ({r['adapter_vs_orjson']:.2f}x orjson)  sdk construct {ns['sdk_construct']:7.0f} ns"
            f"  ({r['sdk_construct_vs_adapter']:.1f}x adapter)  "
            f"sdk validate {ns['sdk_validate']:7.0f} ns"
            f"  ({r['sdk_validate_vs_adapter']:.1f}x adapter)"
        )
        for name, c in r["by_corpus"].items():
            print(
                f"          corpus {name:<11} {c['events']:>4} events  "
                f"orjson {c['ns_per_event']['orjson']:7.0f} ns"
                f"  adapter {c['ns_per_event']['adapter']:7.0f} ns  ({c['adapter_vs_orjson']:.2f}x)"
            )
        for name, c in r["by_event_class"].items():
            print(
                f"          {name:<18} {c['events']:>4} events  orjson {c['orjson_ns']:7.0f} ns"
                f"  adapter {c['adapter_ns']:7.0f} ns  ({c['adapter_vs_orjson']:.2f}x)"
            )
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
