"""Every ``SessionHost`` implementation the conformance suite runs against.

Each entry builds a host whose sessions call the loopback fake provider, so
the suite drives real sessions end to end. A new implementation (worker
processes behind a routing front, a cluster) joins the suite by adding an
entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.fake_provider import FakeProviderServer
from tests.support.runtime_harness import harness
from toolprep.runtime.session_host import SessionHost

KIND = "anthropic"


@dataclass
class HostUnderTest:
    host: SessionHost
    server: FakeProviderServer
    cwd: Path
    kind: str = KIND


@contextmanager
def local_host(cwd: Path) -> Iterator[HostUnderTest]:
    """The in-process ``Runtime``: role actors in this process."""
    with harness(KIND, cwd) as h:
        yield HostUnderTest(h.runtime, h.server, cwd)


IMPLEMENTATIONS: dict[str, Callable[[Path], AbstractContextManager[HostUnderTest]]] = {
    "local": local_host,
}
