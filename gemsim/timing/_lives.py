"""A worker's lives and speed over time: its down intervals, and its slowdown episodes.

Both are functions of the scenario seed and the worker's own spec alone (never of the
commits), so the simulator and a real backend that follows the scenario see the same ones:
`down_intervals` is what `gemsim.timing.simulate` crashes and restarts workers on and what
the process backend kills and restarts processes on; `SlowdownClock` stretches the compute
times of both.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from ._cluster import ClusterSpec
from ._draws import (
    CHURN_DOWN,
    CHURN_UP,
    SLOW_DURATION,
    SLOW_EVERY,
    SLOW_FACTOR,
    WORKER_KEY,
    Draw,
    draw_stream,
    draw_sum,
    worker_draws,
)
from ._worker_spec import WorkerSpec


class Down(NamedTuple):
    """A down interval ``[start, end)`` (``end = inf``: gone for good).

    Both ends are kept as given (an availability file's ``up_at`` exactly, a failure's
    ``at + restart_after`` rounded once), never recomputed from a length: ``start +
    (up_at - start)`` can differ from ``up_at`` by an ulp.
    """

    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start


def _churn(worker: WorkerSpec, seed: int, w: int) -> Iterator[Down]:
    churn = worker.churn
    up = draw_stream(churn.uptime, (seed, WORKER_KEY, w, CHURN_UP))
    down = draw_stream(churn.downtime, (seed, WORKER_KEY, w, CHURN_DOWN))
    t = 0.0
    while True:
        start = t + up()
        t = start + down()
        yield Down(start, t)


def _sources(worker: WorkerSpec, seed: int, w: int) -> list[Iterable[Down]]:
    sources: list[Iterable[Down]] = []
    if worker.join_at > 0:
        sources.append([Down(0.0, worker.join_at)])
    if worker.failures:
        sources.append(
            [
                Down(f.at, math.inf if f.restart_after is None else f.at + f.restart_after)
                for f in worker.failures
            ]
        )
    if worker.availability:
        sources.append([Down(a, b) for a, b in worker.availability])
    if worker.churn is not None:
        sources.append(_churn(worker, seed, w))
    return sources


def down_intervals(
    worker: WorkerSpec, seed: int, w: int, *, until: float = math.inf
) -> Iterator[Down]:
    """Worker ``w``'s down intervals in time order, disjoint, those starting before ``until``.

    The union of its late join (``[0, join_at)``), failures, availability intervals and churn
    periods: overlapping or touching intervals merge into one. The churn periods are drawn
    lazily from the worker's own streams, so the sequence may be endless.
    """
    return merge_downs(_sources(worker, seed, w), until)


def merge_downs(sources: list[Iterable[Down]], until: float = math.inf) -> Iterator[Down]:
    """The union of down intervals from ``sources`` (each in start order), disjoint and in
    time order, those starting before ``until``: overlapping or touching intervals merge."""
    merged = heapq.merge(*sources, key=lambda d: d.start)
    current = next(merged, None)
    for item in merged:
        if current.start > until or math.isinf(current.end):
            break
        if item.start <= current.end:  # overlap: extend to the later end
            if item.end > current.end:
                current = Down(current.start, item.end)
            continue
        yield current
        current = item
    if current is not None and current.start <= until:
        yield current


class SlowdownClock:
    """Stretches compute times by worker ``w``'s slowdown episodes (`gemsim.timing.Slowdowns`).

    Calls must come in non-decreasing start time; a computation may start before the
    previous one would have ended (a cancelled or lost one), so episodes are dropped only
    once they end before a start.
    """

    def __init__(self, spec: WorkerSpec, seed: int, w: int) -> None:
        slow = spec.slowdowns
        self._every = draw_stream(slow.every, (seed, WORKER_KEY, w, SLOW_EVERY))
        self._factor = draw_stream(slow.factor, (seed, WORKER_KEY, w, SLOW_FACTOR))
        self._duration: Draw = draw_stream(slow.duration, (seed, WORKER_KEY, w, SLOW_DURATION))
        self._episodes: deque[tuple[float, float, float]] = deque()  # (start, end, factor)
        self._last_end = 0.0

    def _episode(self, i: int) -> tuple[float, float, float]:
        """The i-th episode not yet dropped, drawn when first needed."""
        episodes = self._episodes
        while len(episodes) <= i:
            start = self._last_end + self._every()
            self._last_end = start + self._duration()
            episodes.append((start, self._last_end, self._factor()))
        return episodes[i]

    def stretch(self, t0: float, work: float) -> float:
        """Seconds that ``work`` seconds of normal-speed compute started at ``t0`` take."""
        episodes = self._episodes
        while True:
            start, end, _ = episodes[0] if episodes else self._episode(0)
            if end > t0:
                break
            episodes.popleft()
        if t0 < start and work <= start - t0:  # done before the next episode (most computes)
            return 0.0 + work  # as the loop below returns it (-0.0 becomes 0.0)
        t, elapsed, i = t0, 0.0, 0
        while True:
            start, end, factor = self._episode(i)
            if t < start:
                normal = start - t
                if work <= normal:
                    return elapsed + work
                work -= normal
                elapsed += normal
                t = start
            slow = end - t
            if work * factor <= slow:
                return elapsed + work * factor
            work -= slow / factor
            elapsed += slow
            t = end
            i += 1


class EmulatedCompute:
    """How long worker ``w``'s compute lasts in a real run that follows the scenario
    (``workers.emulate_latency``): its c-th compute cycle takes draw c of the timing model's
    own compute stream, stretched by its slowdowns at the time the compute starts (seconds
    since the run's start).

    Cycles are counted as the timing model counts its draws: every computation the worker
    was asked for, over all its lives, the ones lost to a kill included (the server counts
    them, `gemsim.real`), so after a loss the real run and the simulator use the same draw.
    A new process (a restart) skips the draws of the cycles before it.
    """

    def __init__(self, spec: ClusterSpec, seed: int, w: int) -> None:
        self._draw = worker_draws(spec, seed, w).compute
        self._drawn = 0
        worker = spec.workers[w]
        self._slow = SlowdownClock(worker, seed, w) if worker.slowdowns is not None else None

    def __call__(self, cycle: int, start: float, draws: int = 1) -> float:
        """Seconds the computation from draw ``cycle`` (non-decreasing over calls) lasts,
        started at ``start``: the sum of ``draws`` draws (a population's task of its client's
        own local steps, one per mini-batch, summed in order as the timing model does)."""
        if cycle < self._drawn:
            raise ValueError(f"cycle {cycle} comes after cycle {self._drawn - 1}")
        while self._drawn < cycle:
            self._draw()
            self._drawn += 1
        value = draw_sum(self._draw, draws)
        self._drawn += draws
        return value if self._slow is None else self._slow.stretch(start, value)


class LifeEvent(NamedTuple):
    """What happens to worker ``worker`` at ``time``: ``kind`` is ``join`` (its first time
    up), ``down`` (it goes down and will come back), ``gone`` (down for good) or ``up``."""

    time: float
    worker: int
    kind: str


def _worker_events(worker: WorkerSpec, seed: int, w: int, until: float) -> Iterator[LifeEvent]:
    downs = down_intervals(worker, seed, w, until=until)
    down = next(downs, None)
    if down is not None and down.start == 0.0:
        if math.isinf(down.end):
            return
        yield LifeEvent(down.end, w, "join")
        down = next(downs, None)
    else:
        yield LifeEvent(0.0, w, "join")
    while down is not None:
        if math.isinf(down.end):
            yield LifeEvent(down.start, w, "gone")
            return
        yield LifeEvent(down.start, w, "down")
        yield LifeEvent(down.end, w, "up")
        down = next(downs, None)


def life_events(spec: ClusterSpec, seed: int, *, until: float = math.inf) -> Iterator[LifeEvent]:
    """Every worker's join, downs and comings back up in time order (ties by worker), drawn
    lazily: what a real backend starts, kills and restarts worker processes on. A worker
    that is never up has no event at all."""
    streams = [_worker_events(ws, seed, w, until) for w, ws in enumerate(spec.workers)]
    return heapq.merge(*streams, key=lambda e: (e.time, e.worker))


def ever_up(spec: ClusterSpec, seed: int) -> list[bool]:
    """Whether each worker is ever up (an availability trace may hold one down for good)."""
    out = []
    for w, ws in enumerate(spec.workers):
        first = next(down_intervals(ws, seed, w), None)
        out.append(first is None or first.start > 0.0 or not math.isinf(first.end))
    return out
