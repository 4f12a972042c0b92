"""Retry timing: exponential backoff with jitter, and the provider's retry-after."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 20.0
    jitter: float = 0.25
    """Fraction of the delay added at random, so many sessions do not retry in lockstep."""

    def delay(
        self, retry_number: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry ``retry_number`` (1-based).

        A provider's ``retry-after`` is a floor: waiting less would only earn
        another rejection. It is capped at ``max_delay`` like the rest.
        """
        exponential = self.base_delay * (self.multiplier ** max(0, retry_number - 1))
        spread = (rng or random).uniform(0.0, self.jitter) * exponential
        delay = exponential + spread
        if retry_after is not None and retry_after > delay:
            delay = retry_after
        return min(delay, self.max_delay)
