"""FedCompass's scheduler in a real run's parameter server (both backends).

The server makes the simulated scheduler's decisions (`timing.CompassGroups`: speed
estimates, arrival groups, each task's steps) from the times it measures, seconds since the
run's start: a task is assigned when the server hands it to its worker, and arrives at its
worker's send time. A work that arrives alone (an owner's first task) or after its group's
latest time (the general buffer) is committed at once and its worker goes on from the
committed row, as an asynchronous commit. A work that arrives in its group's time is held,
and its worker waits; the group is aggregated when its last member arrives or when its latest
time passes (a timer the backend wakes for, or polls): its works are committed one after the
other in arrival order, the last closing the group, and its members then take their next
tasks, fastest first, each pulling the version after the aggregation (a population's slot
releases its client and chooses its next one before the next slot is freed). The trace
records each commit's steps, buffer and group close, so that its replay makes the same
commits.

`CompassServer` holds the decisions, the timers and the held works, and commits through the
server's book; a backend says how a worker is handed its next task (`then`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gemsim import timing

if TYPE_CHECKING:
    from ._clients import ClientPool
    from ._server import ServerBook

HELD = "held"
"""`CompassServer.arrive`'s answer for a work held for its group."""

Then = Callable[[int, np.ndarray], None]
"""How the backend hands worker ``w`` its next task, from its row (pulled after a group)."""


class Held(NamedTuple):
    """A group member's work, waiting in the server for its group's aggregation."""

    worker: int
    work: np.ndarray
    compute: float
    arrived: float


class CompassServer(timing.CompassGroups):
    """The scheduler of a real run's ``book`` (its workers, or a population's slots serving
    ``pool``'s clients, whose estimates are then the clients'), with the group timers and
    the works its groups hold; ``clock()``: the run's seconds."""

    def __init__(
        self,
        protocol: timing.Compass,
        book: ServerBook,
        pool: ClientPool | None,
        clock: Callable[[], float],
    ) -> None:
        n = book.compiled.n_workers
        super().__init__(protocol, n, n if pool is None else pool.population.n_clients)
        self.book, self.pool, self.clock = book, pool, clock
        self.timers: list[tuple[float, int]] = []  # (latest time, group), soonest first
        self.held: dict[int, list[Held]] = {}  # group -> its members' works, in arrival order

    def next_task(self, w: int, now: float) -> int:
        """Worker ``w`` takes its next task now (a population's slot: for client ``who[w]``;
        its group's timer set if it creates one); returns the task's steps."""
        created = self.assign(w, now)
        if created is not None:
            g, latest = created
            heapq.heappush(self.timers, (latest, g))
        return self.steps[w]

    def next_timer(self) -> float:
        """When the soonest timer is due (inf: none)."""
        return self.timers[0][0] if self.timers else math.inf

    def arrive(
        self, w: int, work: np.ndarray, compute: float, arrived: float, then: Then
    ) -> np.ndarray | str | None:
        """Worker ``w``'s work arrived (at its send time ``arrived``), after the groups whose
        latest time came before it are aggregated: committed now (its new row; a population's
        client released), held for its group (`HELD`; the group aggregated now if it was
        the last member), or None (the run is over: the budget spent, or non-finite)."""
        self.aggregate_due(arrived, then)
        if self.book.done(self.clock()):
            return None
        full = self.arrival(w, arrived)
        kind = self.kind[w]
        if kind == self.GROUP:
            self.held.setdefault(self.group[w], []).append(Held(w, work, compute, arrived))
            if full:
                self.aggregate(self.group[w], then)
            return HELD
        row = self._commit(w, work, compute, arrived, kind, kind == self.ALONE)
        if row is not None and self.pool is not None:
            self.pool.release(w, self.clock(), committed=True)
        return row

    def aggregate_due(self, now: float, then: Then) -> None:
        """Aggregate the groups whose latest time has passed by ``now`` with members waiting,
        in the order of their times (their timers are spent)."""
        while self.timers and self.timers[0][0] <= now:
            _, g = heapq.heappop(self.timers)
            if self.waiting_in(g) and not self.book.done(self.clock()):
                self.aggregate(g, then)

    def aggregate(self, g: int, then: Then) -> None:
        """Group ``g``'s works are committed in arrival order, the last closing the group;
        its members are handed their next tasks fastest first (`then`), each from the version
        after it (a population's slot released first, so that it chooses anew)."""
        members = self.take_group(g)
        held = self.held.pop(g)
        if [h.worker for h in held] != members:  # the server's bookkeeping, never the user's
            raise RuntimeError(f"group {g} holds {held!r} for members {members}")
        book, rows = self.book, {}
        for i, h in enumerate(held):
            if book.done(self.clock()):
                return
            rows[h.worker] = book.version
            closes = i == len(held) - 1
            if self._commit(h.worker, h.work, h.compute, h.arrived, self.GROUP, closes) is None:
                return
        now = self.clock()
        for v in self.fastest_first(members):
            if self.pool is not None:
                self.pool.release(v, now, committed=True, row=rows[v])
                then(v, book.start_task(v))
            else:
                then(v, book.pull_now(v))

    def _commit(
        self, w: int, work: np.ndarray, compute: float, arrived: float, kind: int, closes: bool
    ) -> np.ndarray | None:
        return self.book.commit(
            w,
            work,
            compute=compute,
            arrived=arrived,
            started=self.clock(),
            clock=self.clock,
            client=None if self.pool is None else self.pool.client_of[w],
            steps=self.steps[w],
            buffer=kind,
            round_end=closes,
        )
