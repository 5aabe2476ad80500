"""A population's clients as the parameter server of a real run sees them.

The K worker processes are slots: each task is for a client the server chooses when the slot
is free, among those up at that moment (seconds since the run's start) and not in another
slot's task. Availability, speeds and choices are the timing model's own: its per-client
`timing.Calendar` (churn drawn from the same seeded per-client streams, the availability
file), `timing.client_speeds` and its `timing.Selector` (the server's selection stream of the
scenario seed). So a real run draws what a simulation of the same scenario draws; only the
times at which it asks differ.

A task whose client goes down before the server takes its work is lost (the timing model's
rule: a gradient in service is committed). Unlike the simulation, the slot only learns it when
the work arrives: a process computing is not interrupted. The pool keeps each task
(`timing.TaskLog`): its start, its end (a committed one in commit order, the trace's rows; a
lost one when its client went down, or when its slot's process was lost) and its outcome.

Waiting follows the timing model (`gemsim.timing._population_run`): a free slot that finds no
client waits, and the waiting slots try again, in the order they began waiting, at the
calendar's next change (when a client down comes up), moved earlier when a client released
while down comes up sooner. Nothing polls.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from gemsim import timing


class ClientPool:
    """Which client each slot serves, which clients are busy, and the per-client counts.

    Every method takes the run's time ``now``, which must never decrease from one call to the
    next (the calendar only moves forward); the pool keeps the latest and uses it for an
    earlier one, so that two clock readings taken out of order cannot break it.
    """

    def __init__(self, population: timing.Population, seed: int, n_slots: int) -> None:
        n = population.n_clients
        self.population, self.seed = population, seed
        self.calendar = timing.Calendar(population, seed)
        self.busy = bytearray(n)  # 1 while the client is in a slot's task (read by the selector)
        self.selector = timing.Selector(population, self.calendar, self.busy, seed)
        self.speeds = timing.client_speeds(population, seed)
        self.client_of = [-1] * n_slots  # the client of the slot's task in flight
        self.down_at = [math.inf] * n_slots  # when that client next goes down
        self.started = np.zeros(n, np.int64)
        self.completed = np.zeros(n, np.int64)
        self.lost = np.zeros(n, np.int64)
        self.tasks = timing.TaskLog()
        self.task_of = [-1] * n_slots  # the slot's task in flight (its entry in `tasks`)
        self.commits = 0  # tasks committed so far: the next one's row in the trace
        self.waiting: deque[int] = deque()  # slots with no client, in the order they waited
        self.wake_at = math.inf  # when the waiting slots try again
        self._now = 0.0

    def _time(self, now: float) -> float:
        self._now = max(self._now, now)
        return self._now

    def take(self, slot: int, now: float) -> int | None:
        """A client for the slot's next task (chosen by the scenario's rule among those up
        and idle), or None: the slot joins the waiting ones."""
        now = self._time(now)
        pick = self.selector.select(now)
        if pick is None:
            self._wait(slot, now)
            return None
        return self._assign(slot, pick)

    def _assign(self, slot: int, pick: tuple[int, float]) -> int:
        c, self.down_at[slot] = pick
        self.busy[c] = 1
        self.client_of[slot] = c
        self.started[c] += 1
        self.task_of[slot] = self.tasks.start(c, slot, self._now)
        return c

    def lost_by(self, slot: int, now: float) -> bool:
        """Whether the slot's client has gone down by ``now``, when its work is served."""
        return self.down_at[slot] <= now

    def release(self, slot: int, now: float, *, committed: bool, row: int | None = None) -> int:
        """The slot's task is over (committed, or lost); returns its client. A client released
        while down brings the waiting slots' wake-up forward to when it comes up, if sooner
        (it was busy when the wake-up was set). `row`: a committed task's row in the trace,
        where tasks are not released in commit order (FedCompass frees a group's slots
        fastest first); else the next one."""
        now = self._time(now)
        c = self.client_of[slot]
        task = self.task_of[slot]
        if committed:
            self.completed[c] += 1
            self.tasks.end(task, now, timing.TASK_COMMITTED, self.commits if row is None else row)
            self.commits += 1
        else:
            self.lost[c] += 1
            self.tasks.end(task, min(now, self.down_at[slot]), timing.TASK_LOST)
        self.client_of[slot], self.down_at[slot] = -1, math.inf
        self.busy[c] = 0
        if self.waiting and self.calendar.next_down(c, now) < 0.0:
            self.wake_at = min(self.wake_at, self.calendar.up_time(c, now))
        return c

    def drop(self, slot: int, now: float) -> None:
        """The slot's process is gone: its task, if any, is lost, and it waits no more."""
        if slot in self.waiting:
            self.waiting.remove(slot)
            if not self.waiting:
                self.wake_at = math.inf
        if self.client_of[slot] >= 0:
            self.release(slot, now, committed=False)

    def _wait(self, slot: int, now: float) -> None:
        self.waiting.append(slot)
        if math.isinf(self.wake_at):
            self.wake_at = self.calendar.next_change(now)

    def woken(self, now: float) -> list[tuple[int, int]]:
        """At the wake-up: ``(slot, client)`` for each waiting slot that gets a client now, in
        waiting order; the others wait for the calendar's next change."""
        now = self._time(now)
        if now < self.wake_at:
            return []
        self.wake_at = math.inf
        out = []
        while self.waiting:
            pick = self.selector.select(now)
            if pick is None:
                self.wake_at = self.calendar.next_change(now)
                break
            slot = self.waiting.popleft()
            out.append((slot, self._assign(slot, pick)))
        return out

    def report(self, duration: float) -> timing.ClientReport:
        """Per-client speed and tasks started, completed and lost, each client's time up
        within the run's ``duration``, and the tasks (as the timing model's)."""
        return timing.ClientReport(
            speed=self.speeds,
            started=self.started,
            completed=self.completed,
            lost=self.lost,
            up_seconds=timing.client_up_seconds(self.population, self.seed, duration),
            tasks=self.tasks.columns(),
        )
