"""Which event loop runs the provider streams: asyncio's own, or uvloop's.

Every provider stream of a runtime shares one loop, so its cost per socket
read is paid once per provider event. uvloop's reads cost less: libuv reads
in C into one reused buffer, where asyncio runs its selector in Python and
allocates a bytes object per read. Measured with ``benchmarks.load`` on a
2-core machine, it lowered the preparing-card p99 by a third to a half at
300 sessions and by a fifth to a third at 1000, at about the same CPU per
event. uvloop is an optional extra (``pip install 'toolprep[uvloop]'``);
``auto`` uses it when it is installed.
"""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType
from typing import Final, Literal, assert_never

__all__ = [
    "EVENT_LOOPS",
    "EventLoopChoice",
    "check_event_loop",
    "new_stream_loop",
    "uvloop_installed",
]

EventLoopChoice = Literal["auto", "asyncio", "uvloop"]

EVENT_LOOPS: Final[tuple[EventLoopChoice, ...]] = ("auto", "asyncio", "uvloop")

_MISSING_UVLOOP: Final = (
    "event loop 'uvloop' is not installed: pip install 'toolprep[uvloop]' (or choose 'auto')"
)


def new_stream_loop(choice: EventLoopChoice) -> asyncio.AbstractEventLoop:
    """A new, not yet running loop of the chosen kind.

    Raises ``ValueError`` when ``uvloop`` is chosen and not installed.
    """
    match choice:
        case "asyncio":
            return asyncio.new_event_loop()
        case "uvloop":
            uvloop = _uvloop()
            if uvloop is None:
                raise ValueError(_MISSING_UVLOOP)
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
        case "auto":
            uvloop = _uvloop()
            return uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
        case _:
            assert_never(choice)


def check_event_loop(choice: str) -> EventLoopChoice:
    """``choice`` as an ``EventLoopChoice``, or ``ValueError`` if no loop of it can be made."""
    for known in EVENT_LOOPS:
        if choice == known:
            if known == "uvloop" and not uvloop_installed():
                raise ValueError(_MISSING_UVLOOP)
            return known
    raise ValueError(f"unknown event loop {choice!r}: choose one of {', '.join(EVENT_LOOPS)}")


def uvloop_installed() -> bool:
    return _uvloop() is not None


def _uvloop() -> ModuleType | None:
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None
