"""FedCompass's scheduler in a real run's parameter server (`--backend process`).

The server makes the simulated scheduler's decisions (`timing.CompassGroups`: speed
estimates, arrival groups, each task's steps) from the times it measures, seconds since the
run's start: a task is assigned when the server sends it, and arrives at its worker's send
time. A work that arrives alone (a worker's first task) or after its group's latest time (the
general buffer) is committed at once and its worker goes on from the committed row, as an
asynchronous commit. A work that arrives in its group's time is held, and its worker waits;
the group is aggregated when its last member arrives or when its latest time passes (a timer
the server's loop wakes for): its works are committed one after the other in arrival order,
the last closing the group, and its members then take their next tasks, fastest first, each
pulling the version after the aggregation. The trace records each commit's steps, buffer and
group close, so that its replay makes the same commits.
"""

from __future__ import annotations

import heapq
import math
from typing import NamedTuple

import numpy as np

from gemsim import timing


class Held(NamedTuple):
    """A group member's work, waiting in the server for its group's aggregation."""

    worker: int
    work: np.ndarray
    compute: float
    arrived: float


class CompassServer(timing.CompassGroups):
    """The scheduler of a real run of ``n`` persistent workers, with the group timers and
    the works its groups hold."""

    def __init__(self, protocol: timing.Compass, n: int) -> None:
        super().__init__(protocol, n, n)
        self.timers: list[tuple[float, int]] = []  # (latest time, group), soonest first
        self.held: dict[int, list[Held]] = {}  # group -> its members' works, in arrival order

    def next_task(self, w: int, now: float) -> int:
        """Worker ``w`` takes its next task now (its group's timer set if it creates one);
        returns the task's steps."""
        created = self.assign(w, now)
        if created is not None:
            g, latest = created
            heapq.heappush(self.timers, (latest, g))
        return self.steps[w]

    def hold(self, w: int, work: np.ndarray, compute: float, arrived: float) -> None:
        """Worker ``w``'s work arrived in its group's time (`arrival` said GROUP)."""
        self.held.setdefault(self.group[w], []).append(Held(w, work, compute, arrived))

    def take(self, g: int) -> list[Held]:
        """Group ``g`` is aggregated now: its members' works, in arrival order."""
        members = self.take_group(g)
        held = self.held.pop(g)
        if [h.worker for h in held] != members:  # the server's bookkeeping, never the user's
            raise RuntimeError(f"group {g} holds {held!r} for members {members}")
        return held

    def due(self, now: float) -> list[int]:
        """The groups whose latest time has passed by ``now`` with members waiting, in the
        order of their times (their timers are spent)."""
        out = []
        while self.timers and self.timers[0][0] <= now:
            _, g = heapq.heappop(self.timers)
            if self.waiting_in(g):
                out.append(g)
        return out

    def next_timer(self) -> float:
        """When the soonest timer is due (inf: none)."""
        return self.timers[0][0] if self.timers else math.inf
