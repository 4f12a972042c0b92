"""Wait for a state, never for a time: the suite's one way to poll.

A test that waits for something another thread or process does (a message to
arrive, a process to end, a file to be written) checks the state again and again
until it holds, and fails with what it last saw once a generous deadline passes.
It never sleeps a fixed time as its logic: a slow machine only makes it slower,
never wrong, and a fast one returns as soon as the state holds.

``check`` holds when it returns a true value (which ``eventually`` returns); it
has not held yet while it returns a false one (``None``, ``False``, an empty list)
or raises ``AssertionError``. An assertion-style check therefore ends with
``return True``: one that forgets to fails at the deadline, it never passes
silently. ``eventually_async`` is the same for a check made on an event loop,
which must keep running meanwhile (it awaits instead of sleeping).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["DEFAULT_TIMEOUT_S", "POLL_INTERVAL_S", "eventually", "eventually_async"]

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0  # generous: a loaded two-core machine, never a measure of speed
POLL_INTERVAL_S = 0.02


class _Attempts:
    """One poll's deadline and what its last attempt saw."""

    def __init__(self, timeout: float, what: str | None) -> None:
        self._deadline = time.monotonic() + timeout
        self._timeout = timeout
        self._what = what
        self._error: AssertionError | None = None
        self._value: object = None

    def attempt(self, check: Callable[[], T]) -> T | None:
        """``check``'s value if it held, else None (after noting what it saw)."""
        try:
            value = check()
        except AssertionError as error:
            self._error, self._value = error, None
            return None
        if value:
            return value
        self._error, self._value = None, value
        return None

    def remaining(self) -> float:
        return self._deadline - time.monotonic()

    def failure(self) -> AssertionError:
        what = f"{self._what}: " if self._what else ""
        if self._error is not None:
            failure = AssertionError(
                f"{what}did not hold within {self._timeout} s; last: {self._error}"
            )
            failure.__cause__ = self._error
            return failure
        return AssertionError(
            f"{what}did not hold within {self._timeout} s; last value: {self._value!r}"
        )


def eventually(
    check: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = POLL_INTERVAL_S,
    what: str | None = None,
) -> T:
    """``check()``'s first true value, checked every ``interval`` s; AssertionError with the
    last failure or value (prefixed with ``what``) if none came within ``timeout`` s."""
    attempts = _Attempts(timeout, what)
    while True:
        value = attempts.attempt(check)
        if value is not None:
            return value
        remaining = attempts.remaining()
        if remaining <= 0:
            raise attempts.failure()
        time.sleep(min(interval, remaining))


async def eventually_async(
    check: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = POLL_INTERVAL_S,
    what: str | None = None,
) -> T:
    """``eventually`` on an event loop: the loop runs (and can change the state) between
    checks."""
    attempts = _Attempts(timeout, what)
    while True:
        value = attempts.attempt(check)
        if value is not None:
            return value
        remaining = attempts.remaining()
        if remaining <= 0:
            raise attempts.failure()
        await asyncio.sleep(min(interval, remaining))
