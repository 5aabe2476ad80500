"""What a real backend runs, and what it gives back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from gemsim import timing
from gemsim.engine import EngineResult

from ._server import WorkerEvent


@dataclass(frozen=True)
class RealJob:
    """One scenario for a real backend, as picklable values.

    Attributes:
        build: called in every process (server and workers) to get `(rule, problem)`;
            must be picklable (a module-level function or a partial of one), since
            worker processes share nothing with the server but what is sent to them.
        spec: the cluster: worker count, compute laws (used with `emulate_latency`),
            joins, failures, budget and window, or a population (its workers are then the
            slots). Network and service laws are not emulated: the real run has its own.
        seed: the scenario seed; the emulated delays are drawn from the timing model's
            own per-worker streams, so that worker w sleeps what the simulator draws.
        emulate_latency: each computation lasts at least the compute time the timing
            model draws for it (the worker sleeps the rest); computations lost to a kill
            use up their draws, as in the simulator. A population's slot draws from its own
            stream, divided by its task's client's speed factor.
        name: for process titles and messages.
    """

    build: Callable[[], tuple[Any, Any]]
    spec: timing.ClusterSpec
    seed: int
    emulate_latency: bool = False
    name: str = "gemsim"

    @property
    def n_workers(self) -> int:
        """The worker processes: persistent workers, or a population's slots (K)."""
        return len(self.spec.workers)

    @property
    def population(self) -> bool:
        """Whether the workers are slots serving a population's clients."""
        return self.spec.population is not None

    @property
    def compass(self) -> timing.Compass | None:
        """FedCompass's scheduler, where the server runs it (`gemsim.real._compass`)."""
        protocol = self.spec.protocol
        return protocol if isinstance(protocol, timing.Compass) else None

    @cached_property
    def windows(self) -> tuple[int, ...] | np.ndarray | None:
        """Each data owner's local steps where they differ (`timing.owner_windows`)."""
        return timing.owner_windows(self.spec, self.seed)

    def task_draws(self, owner: int, steps: int | None = None) -> int:
        """Compute draws a task of `owner` takes from its slot's stream: one per mini-batch
        where a population's clients take their own local steps or FedCompass's server gives
        the task its `steps`, else one per task."""
        if steps is not None:
            return steps
        if not self.spec.batch_draws or self.windows is None:
            return 1
        return int(self.windows[owner])


@dataclass(frozen=True)
class RealRun:
    """A finished real run: the engine-shaped result, the recorded trace and what
    happened to the worker processes."""

    result: EngineResult
    trace: timing.CommitTrace
    events: tuple[WorkerEvent, ...]
    backend: str
    wall_seconds: float
    clients: timing.ClientReport | None = None  # a population's per-client counts
