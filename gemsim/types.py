"""Small types shared by every stage (the bottom of the import graph)."""

from collections.abc import Callable
from enum import StrEnum
from typing import Any

PyTree = Any

Progress = Callable[[int, int], None]
"""`progress(done, total)`: commits done of a run (or of the runs under way), as they go."""


class Status(StrEnum):
    """How a run ended: a diverged run is a result, a failed one is an error we recorded."""

    OK = "ok"
    DIVERGED = "diverged"
    FAILED = "failed"


class RunKind(StrEnum):
    """What produced a run's trace (part of its identity)."""

    SIM = "sim"  # the timing model
    REPLAY = "replay"  # a saved trace, replayed by the engine
    PROCESS = "process"  # real worker processes
    RAY = "ray"  # real Ray actors

    @property
    def backend(self) -> str:
        """Where the run's workers ran: ``sim`` for the simulator and replays, else the real
        backend."""
        return self.value if self in (RunKind.PROCESS, RunKind.RAY) else "sim"


REAL_BACKENDS = (RunKind.PROCESS.value, RunKind.RAY.value)
"""The real backends (gemsim.real), by name."""
BACKENDS = ("sim", *REAL_BACKENDS)
"""What runs a scenario: the simulator or a real backend (`gemsim run --backend`)."""
