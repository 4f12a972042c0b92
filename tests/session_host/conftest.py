"""The ``hosted`` fixture: each conformance test once per ``SessionHost`` implementation.

An implementation whose set-up starts processes (``hosts.SHARED``) is started once per
test module and shared by its tests: sessions are independent, each test opens its own
(with fresh ids) in a directory of its own, and the provider's script and log are cleared
before each test. A test that ends the host itself gets one of its own by saying
``@pytest.mark.own_host``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.session_host.hosts import IMPLEMENTATIONS, SHARED, STARTS_PROCESSES, HostUnderTest


class SharedHosts:
    """Hosts started when a test first asks for them, all stopped when the module ends."""

    def __init__(self, stack: contextlib.ExitStack, scratch: pytest.TempPathFactory) -> None:
        self._stack = stack
        self._scratch = scratch
        self._started: dict[str, HostUnderTest] = {}

    def get(self, name: str) -> HostUnderTest:
        if name not in self._started:
            cwd = self._scratch.mktemp(f"shared-{name}")
            self._started[name] = self._stack.enter_context(IMPLEMENTATIONS[name](cwd))
        return self._started[name]


@pytest.fixture(scope="module")
def shared_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedHosts]:
    with contextlib.ExitStack() as stack:
        yield SharedHosts(stack, tmp_path_factory)


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.process] if name in STARTS_PROCESSES else [])
        for name in sorted(IMPLEMENTATIONS)
    ]
)
def hosted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HostUnderTest]:
    name: str = request.param
    if name in SHARED and request.node.get_closest_marker("own_host") is None:
        shared: SharedHosts = request.getfixturevalue("shared_hosts")
        under_test = shared.get(name)
        under_test.server.reset()
        yield dataclasses.replace(under_test, cwd=tmp_path)
        return
    with IMPLEMENTATIONS[name](tmp_path) as under_test:
        yield under_test
