"""Fixtures for the tool tests: a project dir with a neighbour outside it, and the ACP schema.

The official ACP schema lives in the ``shared/`` directory next to the repository
checkout; it is located relative to this file so the tests run wherever the
checkout is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO_ROOT.parent / "shared" / "acp-schema" / "v1" / "schema.json"

# The package is not installed into the venv; make ``import runtime`` work however pytest is run.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from runtime.tools.base import PermissionOutcome, PermissionRequest, ToolContext

Validate = Callable[[str, Any], None]


@pytest.fixture(scope="session")
def acp_schema() -> dict[str, Any]:
    if not SCHEMA_PATH.is_file():
        pytest.skip(f"ACP schema not found at {SCHEMA_PATH}")
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


@pytest.fixture(scope="session")
def acp_validate(acp_schema: dict[str, Any]) -> Validate:
    """``acp_validate("ToolCallContent", item)`` raises if ``item`` is not valid ACP."""
    from jsonschema import Draft202012Validator

    validators: dict[str, Draft202012Validator] = {}

    def validate(definition: str, instance: Any) -> None:
        assert definition in acp_schema["$defs"], definition
        if definition not in validators:
            wrapper = {"$defs": acp_schema["$defs"], "$ref": f"#/$defs/{definition}"}
            validators[definition] = Draft202012Validator(wrapper)
        validators[definition].validate(instance)

    return validate


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """The session directory; ``tmp_path/outside`` next to it must stay unreachable."""
    project = tmp_path / "project"
    project.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    return project


@pytest.fixture
def outside(cwd: Path) -> Path:
    return cwd.parent / "outside"


class PermissionRecorder:
    """A ``request_permission`` callback that answers a fixed outcome and records requests."""

    def __init__(self, outcome: PermissionOutcome) -> None:
        self.outcome = outcome
        self.requests: list[PermissionRequest] = []

    def __call__(self, request: PermissionRequest) -> PermissionOutcome:
        self.requests.append(request)
        return self.outcome


MakeCtx = Callable[..., ToolContext]


@pytest.fixture
def make_ctx(cwd: Path) -> MakeCtx:
    def make(**overrides: Any) -> ToolContext:
        values: dict[str, Any] = {"session_id": "s1", "cwd": cwd, "tool_call_id": "call-1"}
        values.update(overrides)
        return ToolContext(**values)

    return make


@pytest.fixture
def ctx(make_ctx: MakeCtx) -> ToolContext:
    return make_ctx()


@pytest.fixture
def answer() -> type[PermissionRecorder]:
    """``answer("allow_once")`` builds a recording permission callback."""
    return PermissionRecorder
