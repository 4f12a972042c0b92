"""Fixtures of the agent tests; the agent helpers are in ``tests.support.agent_process``."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from tests.support.agent_process import SharedAgents, SharedSdkAgents
from tests.support.processes import alive


@pytest.fixture
def pids() -> Iterator[list[int]]:
    """Pids a test started; any still alive at the end are killed so none leak."""
    started: list[int] = []
    yield started
    for pid in started:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def shared_agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedAgents]:
    """The module's shared agents (``SharedAgents``), stopped when its last test is done."""
    agents = SharedAgents(tmp_path_factory.mktemp("shared-agents"))
    try:
        yield agents
    finally:
        agents.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_sdk_agents() -> AsyncIterator[SharedSdkAgents]:
    """The module's shared agents under the ACP SDK (``SharedSdkAgents``); its tests run on the
    module's event loop (``pytest.mark.asyncio(loop_scope="module")``)."""
    agents = SharedSdkAgents()
    try:
        yield agents
    finally:
        await agents.aclose()
