"""FedCompass's scheduler as the authors' implementation defines it (APPFL's
CompassScheduler), an event loop sharing no code with gemsim, and the trace comparison of
the tests of `gemsim.timing.Compass` (test_timing_compass.py: persistent workers;
test_timing_compass_population.py: a population's clients).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

ALONE, GENERAL, GROUP = 0, 1, 2  # the trace's `buffer` codes


@dataclass(eq=False)  # identity: a timer refers to its group, even after an equal one exists
class Group:
    pending: list[int]
    t_exp: float
    t_max: float
    arrived: list[tuple[int, float]] = field(default_factory=list)  # (worker, arrival time)
    alive: bool = True


@dataclass
class Row:
    time: float
    worker: int
    pulled_version: int
    local_steps: int
    buffer: int
    round_end: bool
    queue_time: float
    compute_time: float


class Budget(Exception):
    """Raised when the budget's last row is written: nothing later can change a row."""


class CompassReference:
    """FedCompass's scheduler on N persistent clients whose task durations ``duration(w, j,
    q)`` (client w's j-th task of q steps) are given."""

    def __init__(self, n, *, q_max, q_min, latest, momentum, commits, duration):
        self.n, self.q_max, self.q_min = n, q_max, q_min
        self.latest, self.momentum, self.commits = latest, momentum, commits
        self.duration = duration
        self.speed: list[float | None] = [None] * n
        self.q, self.start = [0] * n, [0.0] * n
        self.group: list[Group | None] = [None] * n
        self.pulled, self.compute, self.tasks = [0] * n, [0.0] * n, [0] * n
        self.groups: list[Group] = []  # creation order
        self.rows: list[Row] = []
        self.events: list = []  # (time, sequence, kind, payload)
        # Ties (none expected with distinct speeds) in the order the events were made.
        self.sequence = itertools.count()
        self.late = self.timer_rounds = 0  # what a test checks the run exercised

    # events ---------------------------------------------------------------------------

    def run(self) -> list[Row]:
        self._begin()
        try:
            while self.events:
                t, _, kind, payload = heapq.heappop(self.events)
                if kind == "arrive":
                    self._arrive(payload, t)
                else:
                    self._timer(payload, t)
        except Budget:
            pass
        return self.rows

    def _begin(self):
        for w in range(self.n):  # t = 0: Q_max steps each, no group yet
            self._start_task(w, 0.0, self.q_max, None)

    def _start_task(self, w, t, q, group):
        self.q[w], self.start[w], self.group[w] = q, t, group
        self.pulled[w] = len(self.rows)  # the model after every row written so far
        self.compute[w] = self.duration(w, self.tasks[w], q)
        self.tasks[w] += 1
        if math.isfinite(self.compute[w]):
            heapq.heappush(self.events, (t + self.compute[w], next(self.sequence), "arrive", w))

    def _write(self, t, w, buffer, round_end, arrival):
        row = Row(t, w, self.pulled[w], self.q[w], buffer, round_end, t - arrival, self.compute[w])
        self.rows.append(row)
        if len(self.rows) == self.commits:
            raise Budget

    def _arrive(self, w, t):
        observed = (t - self.start[w]) / self.q[w]
        old = self.speed[w]
        self.speed[w] = (
            observed if old is None else (1 - self.momentum) * old + self.momentum * observed
        )
        g = self.group[w]
        if g is None:  # a first arrival: applied alone
            self._write(t, w, ALONE, True, t)
            self._assign(w, t)
        elif t > g.t_max:  # late: to the general buffer, and off its group
            g.pending.remove(w)
            if not g.pending:
                self._delete(g)
            self.late += 1
            self._write(t, w, GENERAL, False, t)
            self._assign(w, t)
        else:  # on time: waits for its group
            g.pending.remove(w)
            g.arrived.append((w, t))
            if not g.pending:
                self._aggregate(g, t)

    def _timer(self, g, t):
        if g.alive and g.arrived:
            self.timer_rounds += 1
            self._aggregate(g, t)

    def _aggregate(self, g, t):
        members = list(g.arrived)
        for i, (w, arrival) in enumerate(members):
            self._write(t, w, GROUP, i == len(members) - 1, arrival)
        g.t_exp = g.t_max = 0.0
        g.arrived = []
        # Fastest first (sorted is stable: ties keep their arrival order).
        for w in sorted((w for w, _ in members), key=lambda c: self.speed[c]):
            self._assign(w, t)
        if not g.pending:
            self._delete(g)

    def _delete(self, g):
        g.alive = False
        self.groups.remove(g)

    # assignment -----------------------------------------------------------------------

    def _assign(self, w, t):
        s = self.speed
        if not self.groups:
            self._new_group(w, t, self.q_max)
            return
        best, best_q = None, -1
        for g in self.groups:
            q = math.floor((g.t_exp - t) / s[w])
            if q < self.q_min or q < best_q or q > self.q_max:
                continue
            best, best_q = g, q  # an equal count in a later group wins
        if best is not None:
            best.pending.append(w)
            self._start_task(w, t, best_q, best)
            return
        best_q = -1
        for g in self.groups:
            if t < g.t_max:
                fastest = min(s[c] for c in g.pending + [c for c, _ in g.arrived])
                estimate = g.t_max + fastest * self.q_max
                q = math.floor((estimate - t) / s[w])
                if q <= self.q_max:
                    best_q = max(best_q, q)
        if 0 <= best_q < self.q_min:
            best_q = self.q_min
        if best_q < 0:
            best_q = self.q_max
        self._new_group(w, t, best_q)

    def _new_group(self, w, t, q):
        s = self.speed[w]
        g = Group([w], t_exp=t + q * s, t_max=t + q * s * self.latest)
        self.groups.append(g)
        heapq.heappush(self.events, (g.t_max, next(self.sequence), "timer", g))
        self._start_task(w, t, q, g)


def assert_trace_is(trace, rows):
    """Row for row: the discrete columns exactly, times to 1e-12 relative; the first
    differing row is named."""
    assert len(trace) == len(rows), f"{len(trace)} rows, the reference has {len(rows)}"
    got = list(
        zip(
            trace.worker.tolist(),
            trace.local_steps.tolist(),
            trace.buffer.tolist(),
            trace.round_end.tolist(),
            trace.pulled_version.tolist(),
            strict=True,
        )
    )
    want = [(r.worker, r.local_steps, r.buffer, r.round_end, r.pulled_version) for r in rows]
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, (
            f"row {k}: (worker, local_steps, buffer, round_end, pulled_version) = {a}, "
            f"reference {b} (time {trace.time[k]!r}, reference {rows[k].time!r})"
        )
    for name in ("time", "queue_time", "compute_time"):
        np.testing.assert_allclose(
            getattr(trace, name),
            [getattr(r, name) for r in rows],
            rtol=1e-12,
            atol=1e-15,
            err_msg=name,
        )
