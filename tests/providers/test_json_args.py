"""Tool-argument parsing and the strict truncation repair."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolprep.runtime.providers.json_args import (
    ArgumentsError,
    parse_arguments,
    repair_truncated_object,
)


@pytest.mark.parametrize(
    ("text", "expected"), [("", {}), ("  ", {}), ("null", {}), ('{"a": 1}', {"a": 1})]
)
def test_parse(text: str, expected: dict[str, Any]) -> None:
    assert parse_arguments(text) == (expected, False)


@pytest.mark.parametrize("text", ["[1]", '"s"', "1", "{", '{"a": 1'])
def test_parse_without_repair_is_strict(text: str) -> None:
    with pytest.raises(ArgumentsError):
        parse_arguments(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": "x', {"a": "x"}),
        ('{"a": "x\\', {"a": "x"}),
        ('{"a": "x\\u00', {"a": "x"}),
        ('{"a": "q\\u0041', {"a": "qA"}),
        ('{"a": "b\\"c', {"a": 'b"c'}),
        ('{"a": [1, 2,', {"a": [1, 2]}),
        ('{"a": {"b": [', {"a": {"b": []}}),
        ('{"a": 12', {"a": 12}),
        ('{"a": 1, ', {"a": 1}),
    ],
)
def test_repairable_truncations(text: str, expected: dict[str, Any]) -> None:
    assert repair_truncated_object(text) == expected
    assert parse_arguments(text, allow_repair=True) == (expected, True)


@pytest.mark.parametrize(
    "text",
    ['{"a":', '{"pa', '{"a": tru', '{"a": 1.', "[1", '{"a": 1}}', '{"a": 1} x', '{"a": 1]', "x{"],
)
def test_ambiguous_or_broken_text_is_not_repaired(text: str) -> None:
    assert repair_truncated_object(text) is None
    with pytest.raises(ArgumentsError):
        parse_arguments(text, allow_repair=True)


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=6), values, min_size=1, max_size=4),
    cut=st.integers(1, 10_000),
)
def test_a_repair_only_closes_what_was_cut(obj: dict[str, Any], cut: int) -> None:
    """A repaired object re-serialises to the truncated text plus closing quotes/brackets."""
    text = json.dumps(obj)
    prefix = text[: cut % len(text) or 1]
    repaired = repair_truncated_object(prefix)
    if repaired is None:
        return
    again = json.dumps(repaired)
    assert text.startswith(again.rstrip('"]}'))
    assert len(again) >= len(prefix) - 8  # at most a partial escape, a comma and a space dropped


def test_repair_needs_something_open() -> None:
    assert repair_truncated_object('{"a": 1}') is None
