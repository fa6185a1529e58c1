"""How a watch tells time and waits: the real clock, or a test's fake one."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.core.proc import StopToken


@dataclass(frozen=True)
class Pacing:
    """``clock`` reads seconds; ``sleep`` waits (a stop token's wait ends early on a stop)."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], object] | None = None

    def pause(self, stop: StopToken | None) -> Callable[[float], None]:
        """The wait to use: ``sleep`` if given, else the stop token's, else ``time.sleep``."""
        wait: Callable[[float], object] = self.sleep or (
            stop.wait if stop is not None else time.sleep
        )

        def pause(seconds: float) -> None:
            wait(seconds)

        return pause
