"""A tiny JSON-schema subset validator for tool arguments.

Models send arguments that are almost right: a missing field, a number as a
string, a status the tool does not know. The model can only fix that if the
error names the field, so every tool checks its arguments against its own
``parameters`` schema before running. jsonschema is deliberately not a runtime
dependency; this covers the keywords the built-in schemas use: ``type``,
``required``, ``properties``, ``additionalProperties: false``, ``items``,
``enum``, ``minimum``, ``exclusiveMinimum``, ``maximum``, ``minLength``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolprep.runtime.tools.base import ToolError

_TYPE_NAMES = {
    dict: "object",
    list: "array",
    tuple: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def json_type_name(value: Any) -> str:
    """The JSON type name of a Python value, for error messages."""
    if isinstance(value, Mapping):
        return "object"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _matches_type(value: Any, expected: str) -> bool:
    if expected == "object":
        return isinstance(value, Mapping)
    if expected == "array":
        return isinstance(value, Sequence) and not isinstance(value, str | bytes)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == "null":
        return value is None
    return True


def _label(where: str) -> str:
    return f"argument {where!r}" if where else "arguments"


def _child(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _check(schema: Mapping[str, Any], value: Any, where: str) -> None:
    expected = schema.get("type")
    if expected is not None:
        options = [expected] if isinstance(expected, str) else list(expected)
        if not any(_matches_type(value, option) for option in options):
            wanted = " or ".join(options)
            raise ToolError(f"{_label(where)} must be {wanted}, got {json_type_name(value)}")
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        allowed = ", ".join(repr(option) for option in enum)
        raise ToolError(f"{_label(where)} must be one of {allowed}, got {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_bounds(schema, value, where)
    if isinstance(value, str):
        min_length = schema.get("minLength")
        if min_length is not None and len(value) < min_length:
            if min_length == 1:
                raise ToolError(f"{_label(where)} must not be empty")
            raise ToolError(f"{_label(where)} must be at least {min_length} characters")
    if isinstance(value, Mapping):
        _check_object(schema, value, where)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                _check(items, item, f"{where}[{index}]")


def _check_bounds(schema: Mapping[str, Any], value: float, where: str) -> None:
    minimum = schema.get("minimum")
    if minimum is not None and value < minimum:
        raise ToolError(f"{_label(where)} must be at least {minimum}, got {value!r}")
    exclusive = schema.get("exclusiveMinimum")
    if exclusive is not None and value <= exclusive:
        raise ToolError(f"{_label(where)} must be greater than {exclusive}, got {value!r}")
    maximum = schema.get("maximum")
    if maximum is not None and value > maximum:
        raise ToolError(f"{_label(where)} must be at most {maximum}, got {value!r}")


def _check_object(schema: Mapping[str, Any], value: Mapping[str, Any], where: str) -> None:
    for key in schema.get("required", ()):
        if key not in value or value[key] is None:
            raise ToolError(f"missing required {_label(_child(where, key))}")
    properties: Mapping[str, Any] = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        unknown = sorted(str(key) for key in value if key not in properties)
        if unknown:
            raise ToolError(f"unknown {_label(_child(where, unknown[0]))}")
    for key, sub in properties.items():
        if key in value and not (value[key] is None and key not in schema.get("required", ())):
            _check(sub, value[key], _child(where, key))


def validate_args(tool_name: str, schema: Mapping[str, Any], args: Any) -> None:
    """Raise ToolError ``"<tool>: <what is wrong with which field>"`` if args don't fit.

    An optional property given as ``null`` counts as absent, because several
    models send ``null`` for "not set" rather than omitting the key.
    """
    try:
        _check(schema, args, "")
    except ToolError as exc:
        raise ToolError(f"{tool_name}: {exc}") from None
