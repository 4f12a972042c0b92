from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.session_host.hosts import IMPLEMENTATIONS, STARTS_PROCESSES, HostUnderTest


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.process] if name in STARTS_PROCESSES else [])
        for name in sorted(IMPLEMENTATIONS)
    ]
)
def hosted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HostUnderTest]:
    with IMPLEMENTATIONS[request.param](tmp_path) as under_test:
        yield under_test
