"""FedCompass's scheduler at run time (`Compass`): arrival groups of workers that finish
together.

Li et al. 2024 (ICLR, https://arxiv.org/abs/2309.14675), as the authors' implementation
(APPFL's Compass scheduler) runs it. The server estimates each worker's seconds per local
step ``s_w`` from its arrivals: ``(arrival - assignment) / steps``, averaged as
``(1 - m) s_w + m * observed`` (``m = speed_momentum``; the first arrival sets it). Each task
is given its steps when it is assigned, and the worker joins an arrival group:

- at t = 0 every worker takes ``q_max`` steps in no group; its first arrival is applied alone
  (the trace's ``buffer`` 0) and it is then assigned;
- assigning worker w at t: with no group, a new one with ``q_max`` steps; else the group
  whose expected arrival ``T`` gives the most steps ``floor((T - t) / s_w)`` within
  ``[q_min, q_max]`` (the later group on a tie); else a new group whose expected arrival
  follows the latest one of an open group by its fastest member's ``q_max`` steps,
  ``floor((T_max + s_fastest q_max - t) / s_w)`` steps (the most of those at most ``q_max``,
  raised to ``q_min``; ``q_max`` if no open group). A new group expects its member at
  ``t + q s_w`` and waits for it until ``t + q s_w * latest``;
- a worker arriving by its group's latest time waits in the group's buffer; the group is
  aggregated when its last member arrives or at its latest time (a timer): its rows are
  written then, consecutively (``buffer`` 2, queued from their arrival), the last closing
  the round, and its members are assigned again, fastest first, and pull;
- a worker arriving after its group's latest time goes into the general buffer (``buffer``
  1: the rule applies it with the next group aggregation), is assigned and pulls at once.

Each task's compute time is the sum of its own steps' draws of its worker's per-batch stream.
The trace's ``local_steps`` column holds each row's steps and ``buffer`` where it went.
Over a population, `_compass_population.py` runs the same scheduler with the estimates kept
per client (``who[w]``: the client of slot w's task).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ._server_protocols import Compass
from ._state import QUEUED, WAITING, SimState, Timer, schedule_at

ALONE, GENERAL, GROUP = 0, 1, 2
"""The trace's ``buffer`` values: applied alone, the general buffer, its group's buffer."""


@dataclass
class _Group:
    pending: list[int]  # assigned members not arrived yet
    expected: float  # T: when its members are expected (0 once aggregated)
    latest: float  # T_max: when it is aggregated at the latest (0 once aggregated)
    arrived: list[int] = field(default_factory=list)  # waiting in its buffer, in order


class CompassRun:
    """The protocol object of a `Compass` run (see the module docstring)."""

    rounds = True

    def __init__(self, state: SimState, protocol: Compass, n_clients: int | None = None) -> None:
        self.state = state
        self.p = protocol
        n = state.spec.n_workers
        state.round_ends = []
        # Seconds per step, estimated for each client (a worker is its own; a population's
        # slot w serves client ``who[w]``, `_compass_population.py`); None: not seen yet.
        self.speed: list[float | None] = [None] * (n if n_clients is None else n_clients)
        self.who = list(range(n))
        self.steps = [protocol.q_max] * n  # the task's local steps
        self.assigned = [0.0] * n  # when the task was assigned
        self.group = [-1] * n
        self.kind = [ALONE] * n  # where the worker's next row goes
        self.groups: dict[int, _Group] = {}  # in creation order
        self.created = 0
        self.flushes: deque[list] = deque()  # aggregations in the server: [members, rows left]
        self.row_steps: list[int] = []
        self.row_buffers: list[int] = []
        self.latest_callbacks = [self._on_latest]
        state.hook_arrivals(self._on_arrival)
        state.arm = self.arm

    def begin(self) -> None:
        """Every worker starts ``q_max`` steps at t = 0, in no group."""
        for w in range(self.state.spec.n_workers):
            self.state.start_life(w)
            self.arm(w, False)

    def arm(self, w: int, pull: bool) -> None:
        """Worker ``w``'s task: pull (when ``pull``), its steps' draws summed in order
        (stretched by its slowdowns), push; its arrival is scheduled."""
        self.state._tracked_arm(w, pull, self.steps[w])  # noqa: SLF001 - same package

    # -- arrivals and aggregations -------------------------------------------------------

    def _on_arrival(self, timer: Timer) -> None:
        state = self.state
        w = timer._value
        if state.waits[w] is not timer:
            return
        now = state.env._now
        state.arrived[w] = now
        state.waits[w] = None
        observed = (now - self.assigned[w]) / self.steps[w]
        c = self.who[w]
        old = self.speed[c]
        m = self.p.speed_momentum
        self.speed[c] = observed if old is None else (1 - m) * old + m * observed
        g = self.group[w]
        if g < 0:
            self.kind[w] = ALONE
        elif now > self.groups[g].latest:
            group = self.groups[g]
            group.pending.remove(w)
            if not group.pending:
                del self.groups[g]
            self.kind[w] = GENERAL
        else:
            group = self.groups[g]
            group.pending.remove(w)
            group.arrived.append(w)
            self.kind[w] = GROUP
            state.begin_wait(w, WAITING)
            if not group.pending:
                self._aggregate(g)
            return
        state.arrive(w, last=True)

    def _on_latest(self, timer: Timer) -> None:
        g = timer._value
        group = self.groups.get(g)
        if group is not None and group.arrived:  # (an aggregated group's arrived is empty)
            self._aggregate(g)

    def _aggregate(self, g: int) -> None:
        """Group ``g``'s buffer goes to the server now, its members' rows in arrival order."""
        state = self.state
        group = self.groups[g]
        members, group.arrived = group.arrived, []
        group.expected = group.latest = 0.0
        if not group.pending:
            del self.groups[g]
        self.flushes.append([members, len(members)])
        for w in members:
            state.end_wait(w)
            state.phase[w] = QUEUED
            state.queue.append(w)
        server = state.server
        if not server.busy:
            server.take(state.pick(), True)

    def committed(self, w: int, k: int, live: bool) -> None:
        """Row ``k - 1`` is worker ``w``'s: a worker applied alone or put in the general
        buffer is assigned and pulls now; a group's members once its last row is in."""
        del live
        kind = self.kind[w]
        self.row_steps.append(self.steps[w])
        self.row_buffers.append(kind)
        self._row(w, k)
        state = self.state
        now = state.env._now
        if kind == GROUP:
            flush = self.flushes[0]
            flush[1] -= 1
            if flush[1]:
                return
            self.flushes.popleft()
            state.close_round()
            speed, who = self.speed, self.who
            members = sorted(flush[0], key=lambda v: speed[who[v]])  # stable: arrival order
            for v in members:
                self._next(v, now)
            return
        if kind == ALONE:
            state.close_round()
        self._next(w, now)

    def _row(self, w: int, k: int) -> None:
        """Row ``k - 1`` is worker ``w``'s (a population notes its client)."""

    def _next(self, w: int, now: float) -> None:
        """Worker ``w`` takes its next task now and pulls."""
        self._assign(w, now)
        self.arm(w, True)

    # -- groups ----------------------------------------------------------------------------

    def _assign(self, w: int, now: float) -> None:
        """Worker ``w``'s next task: its steps and its arrival group (a client not seen yet:
        ``q_max`` steps in no group, as every worker's first task)."""
        p, speed, who = self.p, self.speed, self.who
        s = speed[who[w]]
        if s is None:
            self._task(w, now, -1, p.q_max)
            return
        if not self.groups:
            self._create(w, now, p.q_max)
            return
        best, best_q = -1, -1
        for g, group in self.groups.items():
            q = math.floor((group.expected - now) / s)
            if q < p.q_min or q < best_q or q > p.q_max:
                continue
            best, best_q = g, q
        if best >= 0:
            self.groups[best].pending.append(w)
            self._task(w, now, best, best_q)
            return
        best_q = -1
        for group in self.groups.values():
            if now < group.latest:
                fastest = min(speed[who[v]] for v in (*group.pending, *group.arrived))
                q = math.floor((group.latest + fastest * p.q_max - now) / s)
                if q <= p.q_max:
                    best_q = max(best_q, q)
        if 0 <= best_q < p.q_min:
            best_q = p.q_min
        elif best_q < 0:
            best_q = p.q_max
        self._create(w, now, best_q)

    def _create(self, w: int, now: float, q: int) -> None:
        s = self.speed[self.who[w]]
        g = self.created
        self.created += 1
        latest = now + q * s * self.p.latest
        self.groups[g] = _Group([w], now + q * s, latest)
        schedule_at(self.state.env, latest, g, self.latest_callbacks)
        self._task(w, now, g, q)

    def _task(self, w: int, now: float, g: int, q: int) -> None:
        self.group[w] = g
        self.steps[w] = q
        self.assigned[w] = now

    # -- the run's end ---------------------------------------------------------------------

    def finish(self, end: float) -> None:
        state = self.state
        for w, phase in enumerate(state.phase):
            if phase == WAITING:
                state.end_wait(w, until=end)

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """The trace's ``local_steps`` and ``buffer`` columns."""
        return np.asarray(self.row_steps, np.int64), np.asarray(self.row_buffers, np.int64)
