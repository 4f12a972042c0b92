"""A runtime option is declared once (``hosting.options``) and the command line, the options
value and the worker codec all follow from that declaration: each declared option has its
``acp`` and ``serve`` flag, is read back from a parsed command line, and crosses to a worker
with every other field, whatever its value."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from typing import Any, Literal, get_args, get_origin

import pytest

from toolprep.messages.codec import CodecError
from toolprep.runtime.cli.main import build_parser
from toolprep.runtime.cli.options import runtime_arguments
from toolprep.runtime.hosting.options import RuntimeField, RuntimeOptions, runtime_fields
from toolprep.runtime.mcp.policy import McpPolicy
from toolprep.runtime.workers import codec

CLI_ONLY = {"help", "max_line_bytes", "no_persist"}
"""The flags ``runtime_arguments`` adds that are the command line's own, not runtime options."""


def _other_value(declared: RuntimeField) -> Any:
    """A value of the field's type that is not its default, so a field left behind shows."""
    kind = declared.kind
    if get_origin(kind) is Literal or declared.choices is not None:
        choices = declared.choices or ()
        return next(choice for choice in choices if choice != declared.default)
    if kind is bool:
        return not declared.default
    if kind is int:
        return (declared.default or 0) + 7
    if kind is float:
        return (declared.default or 0.0) + 0.25
    if kind is str:
        return f"chosen {declared.name}"
    if declared.is_list:
        return (f"{declared.name}-1", f"{declared.name}-2")
    if kind is McpPolicy:
        return McpPolicy(any_command=True, commands=frozenset({"npx"}), any_address=True)
    raise AssertionError(f"no sample value for {declared.name}: {kind!r}; add one here")


def _chosen() -> RuntimeOptions:
    """Options with every field at a value other than its default."""
    return RuntimeOptions(**{f.name: _other_value(f) for f in runtime_fields()})


def _command_line(options: RuntimeOptions) -> list[str]:
    """The flags that choose ``options`` (its flagged fields)."""
    line: list[str] = []
    for declared in runtime_fields():
        if declared.flag is None:
            continue
        value = getattr(options, declared.name)
        if declared.kind is bool:
            line += [declared.cli_name] if value else []
        elif declared.is_list:
            for item in value:
                line += [declared.cli_name, item]
        else:
            line += [declared.cli_name, str(value)]
    return line


def test_the_fields_are_runtime_options_fields_in_order() -> None:
    assert [f.name for f in runtime_fields()] == [f.name for f in fields(RuntimeOptions)]


def test_every_field_crosses_to_a_worker_at_a_value_other_than_its_default() -> None:
    options = _chosen()
    for declared in runtime_fields():
        assert getattr(options, declared.name) != declared.default, declared.name
    raw = json.loads(json.dumps(codec.dump_options(options)))
    assert set(raw) == {f.name for f in runtime_fields()}
    assert codec.load_options(raw) == options


def test_the_defaults_cross_to_a_worker_too() -> None:
    raw = json.loads(json.dumps(codec.dump_options(RuntimeOptions())))
    assert codec.load_options(raw) == RuntimeOptions()


@pytest.mark.parametrize("command", ["acp", "serve"])
def test_every_declared_option_is_read_back_from_its_flags(command: str) -> None:
    chosen = _chosen()
    args = build_parser().parse_args([command, *_command_line(chosen)])
    assert isinstance(args, argparse.Namespace)
    front_set = {f.name: getattr(chosen, f.name) for f in runtime_fields() if f.flag is None}
    assert front_set, "the front sets some fields for its workers"
    read = RuntimeOptions.from_arguments(args)
    assert read.with_front(**front_set) == chosen


@pytest.mark.parametrize("command", ["acp", "serve"])
def test_no_flag_given_reads_as_the_declared_defaults(command: str) -> None:
    args = build_parser().parse_args([command])
    assert isinstance(args, argparse.Namespace)
    assert RuntimeOptions.from_arguments(args) == RuntimeOptions()


def test_the_runtime_flags_are_the_declared_options_and_the_command_lines_own() -> None:
    parser = argparse.ArgumentParser()
    runtime_arguments(parser)
    by_name = {action.dest: action for action in parser._actions}
    flagged = {f.name: f for f in runtime_fields() if f.flag is not None}
    assert set(by_name) == set(flagged) | CLI_ONLY
    for name, declared in flagged.items():
        action = by_name[name]
        assert action.option_strings[0] == declared.cli_name
        assert declared.flag is not None and action.help == declared.flag.help
        choices = declared.choices
        assert (tuple(action.choices) if action.choices else None) == choices, name
        if declared.is_list:
            assert action.default == []
        else:
            assert action.default == declared.default, name


@pytest.mark.parametrize(
    "kind", [f for f in runtime_fields() if get_origin(f.kind) is Literal], ids=lambda f: f.name
)
def test_a_literal_option_refuses_other_text_on_the_wire(kind: RuntimeField) -> None:
    raw = {
        **codec.dump_options(RuntimeOptions()),
        kind.name: "none of " + "|".join(get_args(kind.kind)),
    }
    with pytest.raises(CodecError, match=f"runtime option {kind.name} cannot be"):
        codec.load_options(raw)
