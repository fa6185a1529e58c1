"""A clock tests move by hand, for code that takes ``clock`` and ``sleep`` callables."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ManualClock:
    """Time that moves only when told: call it (or ``time()``) to read it; ``sleep`` advances it
    and is recorded in ``sleeps``; ``advance`` moves it without a record."""

    now: float = 1_800_000_000.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds
