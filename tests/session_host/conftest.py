from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.session_host.hosts import IMPLEMENTATIONS, HostUnderTest


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def hosted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HostUnderTest]:
    with IMPLEMENTATIONS[request.param](tmp_path) as under_test:
        yield under_test
