"""Retry timing: exponential backoff with jitter, and the provider's retry-after.

A provider may ask for any wait (an hour-long ``retry-after`` is not rare
on a spent quota). Every wait is capped at ``max_delay`` and the user is
told how long the agent will wait and, when it differs, what the provider
asked for, so a turn that looks idle is never a mystery.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Final

from toolprep.messages.frames import agent_thought_chunk

__all__ = ["DEFAULT_MAX_RETRY_WAIT", "RetryPolicy", "RetryWait"]

DEFAULT_MAX_RETRY_WAIT: Final = 60.0
"""Seconds: long enough for a real rate-limit window, short enough to notice a stuck turn."""


@dataclass(frozen=True, slots=True)
class RetryWait:
    """How long one retry waits, and the provider's own request when it gave one."""

    seconds: float
    requested: float | None = None
    capped: bool = False

    def describe(self) -> str:
        """``retrying in 60 s (provider asked for 3600 s; capped)``."""
        text = f"retrying in {_seconds(self.seconds)}"
        if self.requested is not None:
            note = "; capped" if self.capped else ""
            text += f" (provider asked for {_seconds(self.requested)}{note})"
        return text

    def notice(self, error: str) -> dict[str, Any]:
        """The ``session/update`` that tells the user why nothing happens for a while."""
        text = f"\n[model request failed: {error}; {self.describe()}]\n"
        update: dict[str, Any] = agent_thought_chunk(text)
        update["_meta"] = {
            "retry": {
                "waitSeconds": self.seconds,
                "requestedSeconds": self.requested,
                "capped": self.capped,
            }
        }
        return update


def _seconds(value: float) -> str:
    if value >= 10 or value == int(value):
        return f"{value:.0f} s"
    return f"{value:.1f} s" if value >= 0.1 else f"{value:.2f} s"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = DEFAULT_MAX_RETRY_WAIT
    """The longest wait before one retry, including a provider's retry-after."""
    jitter: float = 0.25
    """Fraction of the delay added at random, so many sessions do not retry in lockstep."""

    def wait(
        self, retry_number: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> RetryWait:
        """The wait before retry ``retry_number`` (1-based).

        A provider's ``retry-after`` is a floor: waiting less would only earn
        another rejection. It is capped at ``max_delay`` like the rest, and
        the cap is reported (``capped``) so the user learns about it.
        """
        exponential = self.base_delay * (self.multiplier ** max(0, retry_number - 1))
        spread = (rng or random).uniform(0.0, self.jitter) * exponential
        delay = exponential + spread
        if retry_after is not None and retry_after > delay:
            delay = retry_after
        seconds = min(delay, self.max_delay)
        capped = retry_after is not None and retry_after > self.max_delay
        return RetryWait(seconds, retry_after, capped)
