"""Retry policy for optimistic (compare-and-swap) loops, with an injectable clock."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from shoal.errors import ConfigError


@dataclass(frozen=True)
class Clock:
    """Time source; tests inject one that does not really sleep."""

    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by attempts and by a deadline."""

    max_attempts: int = 20
    initial_delay: float = 0.01
    max_delay: float = 1.0
    multiplier: float = 2.0
    deadline: float = 30.0
    clock: Clock = field(default_factory=Clock)
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"retry max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_delay < 0 or self.max_delay < self.initial_delay:
            raise ConfigError("retry delays must satisfy 0 <= initial_delay <= max_delay")
        if self.multiplier < 1:
            raise ConfigError(f"retry multiplier must be >= 1, got {self.multiplier}")
        if self.deadline <= 0:
            raise ConfigError(f"retry deadline must be > 0 seconds, got {self.deadline}")

    def attempts(self) -> Iterator[int]:
        """Yield attempt numbers 1, 2, ...; sleeps between them; stops at max_attempts or the deadline."""
        start = self.clock.monotonic()
        delay = self.initial_delay
        for attempt in range(1, self.max_attempts + 1):
            yield attempt
            if attempt == self.max_attempts:
                return
            remaining = self.deadline - (self.clock.monotonic() - start)
            if remaining <= 0:
                return
            self.clock.sleep(min(remaining, self.rng.uniform(0, delay)))
            delay = min(self.max_delay, delay * self.multiplier)


NO_RETRY = RetryPolicy(max_attempts=1)
