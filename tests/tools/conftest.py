"""Fixtures for the tool tests: a project dir with a neighbour outside it, and the ACP schema."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.acp_schema import validate
from toolprep.runtime.tools.base import PermissionOutcome, PermissionRequest, ToolContext

Validate = Callable[[str, Any], None]


@pytest.fixture(scope="session")
def acp_validate() -> Validate:
    """``acp_validate("ToolCallContent", item)`` raises if ``item`` is not valid ACP."""
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
