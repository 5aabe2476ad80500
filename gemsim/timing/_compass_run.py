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
per client (``who[w]``: the client of slot w's task). The decisions themselves, without a
clock, are `_compass_groups.py`'s, which the real backends' servers make too.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ._compass_groups import ALONE, GROUP, CompassGroups
from ._server_protocols import Compass
from ._state import QUEUED, WAITING, SimState, Timer, schedule_at


class CompassRun(CompassGroups):
    """The protocol object of a `Compass` run (see the module docstring)."""

    rounds = True

    def __init__(self, state: SimState, protocol: Compass, n_clients: int | None = None) -> None:
        n = state.spec.n_workers
        super().__init__(protocol, n, n if n_clients is None else n_clients)
        self.state = state
        state.round_ends = []
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
        full = self.arrival(w, now)
        if self.kind[w] == GROUP:
            state.begin_wait(w, WAITING)
            if full:
                self._aggregate(self.group[w])
            return
        state.arrive(w, last=True)

    def _on_latest(self, timer: Timer) -> None:
        g = timer._value
        if self.waiting_in(g):
            self._aggregate(g)

    def _aggregate(self, g: int) -> None:
        """Group ``g``'s buffer goes to the server now, its members' rows in arrival order."""
        state = self.state
        members = self.take_group(g)
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
            for v in self.fastest_first(flush[0]):
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

    def _assign(self, w: int, now: float) -> None:
        """Worker ``w``'s next task (`CompassGroups.assign`); a new group's timer is set."""
        created = self.assign(w, now)
        if created is not None:
            g, latest = created
            schedule_at(self.state.env, latest, g, self.latest_callbacks)

    # -- the run's end ---------------------------------------------------------------------

    def finish(self, end: float) -> None:
        state = self.state
        for w, phase in enumerate(state.phase):
            if phase == WAITING:
                state.end_wait(w, until=end)

    def columns(self) -> tuple[np.ndarray, np.ndarray]:
        """The trace's ``local_steps`` and ``buffer`` columns."""
        return np.asarray(self.row_steps, np.int64), np.asarray(self.row_buffers, np.int64)
