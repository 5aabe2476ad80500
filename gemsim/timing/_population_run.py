"""A population's run: K slots serving tasks of N clients, under the async protocol.

The run's events. There is no process per client, nor per slot: a slot's task is armed when
it starts (its pull, compute and push drawn at once, as a persistent worker's cycle is,
`_state.py`), and one `Timer` ends it: at its arrival at the server, or, when the client goes
down before (`Calendar.next_down`, known when the task starts), at that instant, where the
work is lost. A task whose gradient waits in the server's queue gets one more Timer, at its
client's next down, that drops it from the queue if it is still there (a gradient in service
is committed, as for persistent workers). A slot is free at the start, at its commit and at
a loss; it then chooses a client among those up and not in another slot's task
(`_selection.py`) and starts its task at once: under `Async`, at its commit, the new client
pulls the version the commit created. When no client is acceptable, the slot waits (the
report counts the time, `WorkerReport.waited_seconds`) until the earliest time a client may
come up (`Calendar.next_change`): one Timer shared by every waiting slot, moved earlier when
a client released while down comes up sooner; waiting slots take clients in the order they
began waiting. Nothing polls: each wake-up is a client's calendar changing.

A task is the first of a slot's "life" (the trace's ``fresh``) when its pull is not part of
the slot's own commit: each slot's first task, and a task after a lost one or after a wait.
The first tasks, at t = 0, start on version 0 without a pull, as persistent workers do; so a
population of N = K clients that are never down gives the persistent workers' trace.

Tie order. At t = 0 the slots choose their clients in index order ``0..K-1``. A commit
releases its client before its slot chooses again (the client may be chosen again); a slot
freed at a commit or a loss chooses before the waiting slots are woken. A client going down
at the instant its gradient arrives loses it; otherwise events at one instant run in SimPy's
order (`_processes.py`).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from heapq import heappush

import numpy as np
from simpy.events import NORMAL

from ._calendar import Calendar, client_speeds, client_up_seconds
from ._draws import check_compute, draw_sum
from ._local_steps import speed_windows
from ._outcome import TASK_COMMITTED, TASK_IN_FLIGHT, TASK_LOST, ClientReport, ClientTasks
from ._population import Population
from ._population_stats import client_report
from ._selection import Selector
from ._state import CYCLE, OFF, QUEUED, WAITING, SimState, Timer, schedule_at


class PopulationRun:
    """The protocol object of a population's run (`Async` only; see the module docstring)."""

    rounds = False

    def __init__(self, state: SimState, population: Population, seed: int, schedule: int) -> None:
        self.state, self.population, self.schedule = state, population, schedule
        n, k = population.n_clients, state.spec.n_workers
        self.speeds = client_speeds(population, seed)
        self.speed = None
        if population.draws_speeds:
            self.speed = memoryview(self.speeds)  # indexing gives Python floats, fast
            check_slowest(state.spec.workers, self.speeds, state.spec.window)
        # DyLU's own local steps per client (`ClusterSpec.dynamic_window`), else None: the
        # slot's stream gives a whole task's compute time per draw.
        self.windows = None
        if state.spec.dynamic_window is not None:
            self.windows = speed_windows(self.speeds, state.spec.dynamic_window).tolist()
        self.calendar = Calendar(population, schedule)
        self.busy = bytearray(n)
        self.selector = Selector(population, self.calendar, self.busy, seed)
        self.tasks = TaskLog()
        self.task_of = [-1] * k  # the slot's task in flight (its entry in `tasks`)
        self.client_of = [-1] * k
        self.down_at = [math.inf] * k  # when the client of the slot's task next goes down
        self.queued_down: list[Timer | None] = [None] * k
        self.clients: list[int] = []  # the trace's client column, one per commit
        self.waiting: deque[int] = deque()
        self.wake: Timer | None = None
        self.wake_at = math.inf
        self.lose_callbacks = [self._on_lost]
        self.queued_callbacks = [self._on_queued_down]
        self.wake_callbacks = [self._on_wake]
        state.hook_arrivals(self._on_arrival)
        state.arm = self.arm

    def begin(self) -> None:
        """Every slot chooses its first client at t = 0, in index order."""
        for w in range(self.state.spec.n_workers):
            self.state.start_life(w)
            self._assign(w, False)

    # -- a slot's tasks -----------------------------------------------------------------

    def _assign(self, w: int, pull: bool) -> None:
        """Slot ``w`` is free now: start a task on a chosen client, or wait for one."""
        state = self.state
        now = state.env._now
        if now > state.horizon:  # past a SecondsBudget's end: nothing more is started
            state.phase[w] = OFF
            return
        pick = self.selector.select(now)
        if pick is None:
            self._wait(w)
        else:
            self._start(w, pick, pull)

    def _start(self, w: int, pick: tuple[int, float], pull: bool) -> None:
        """Slot ``w`` takes the client of ``pick`` for a task."""
        c, self.down_at[w] = pick
        self.busy[c] = 1
        self.task_of[w] = self.tasks.start(c, w, self.state.env._now)
        self.client_of[w] = c
        self.arm(w, pull)

    def arm(self, w: int, pull: bool) -> None:
        """Slot ``w``'s task on its client: pull (when ``pull``), ``window`` batches (the
        client's own count under DyLU) of the slot's compute divided by the client's speed,
        push; ends at the arrival or at the client's next down, whichever comes first."""
        state = self.state
        env = state.env
        compute, push, pull_draw = state.draws[w]
        p = pull_draw() if pull else 0.0
        if self.windows is None:
            c = compute()
        else:  # the client's own batches, one draw each
            c = draw_sum(compute, self.windows[self.client_of[w]])
        if self.speed is not None:
            c = c / self.speed[self.client_of[w]]
        now = env._now
        state.computed[w] = c
        state.compute_from[w] = now + p
        delay = p + c + push()
        state.phase[w] = CYCLE
        state.pulled[w] = state.version
        arrival = now + delay
        down = self.down_at[w]
        timer = Timer()
        timer._value = w
        if down <= arrival:
            timer.callbacks = self.lose_callbacks
            at = down
        else:
            timer.callbacks = state.arrivals
            at = arrival
        state.waits[w] = timer
        heappush(env._queue, (at, NORMAL, next(env._eid), timer))

    def _on_arrival(self, timer: Timer) -> None:
        """Slot ``w``'s gradient reaches the server: it queues (with a Timer at its client's
        next down) or an idle server takes it."""
        state = self.state
        w = timer._value
        if state.waits[w] is not timer:
            return
        state.arrived[w] = state.env._now
        state.waits[w] = None
        server = state.server
        if server.busy:
            state.phase[w] = QUEUED
            state.queue.append(w)
            down = self.down_at[w]
            if not math.isinf(down):
                self.queued_down[w] = schedule_at(state.env, down, w, self.queued_callbacks)
        else:
            server.take(w, True)

    def _on_queued_down(self, timer: Timer) -> None:
        state = self.state
        w = timer._value
        if self.queued_down[w] is timer and state.phase[w] == QUEUED:
            state.queue.remove(w)
            self._lose(w)

    def _on_lost(self, timer: Timer) -> None:
        w = timer._value
        if self.state.waits[w] is timer:
            self._lose(w)

    def _lose(self, w: int) -> None:
        """Slot ``w``'s client went down now: the work is lost and the slot chooses again."""
        state = self.state
        now = state.env._now
        c = self.client_of[w]
        if now <= state.horizon:
            state.lost[w] += 1
            state.lost_compute[w] += state.compute_done(w, now)
            self.tasks.end(self.task_of[w], now, TASK_LOST)
        state.waits[w] = None
        state.phase[w] = OFF
        self._release(c, now)
        state.start_life(w)
        self._assign(w, True)

    def committed(self, w: int, k: int, live: bool) -> None:
        """The server committed slot ``w``'s gradient as version ``k``: the slot chooses its
        next client now, which pulls version ``k`` (a slot is always live)."""
        del live
        c = self.client_of[w]
        self.clients.append(c)
        now = self.state.env._now
        self.tasks.end(self.task_of[w], now, TASK_COMMITTED, k - 1)
        self._release(c, now)
        self._assign(w, True)

    def local_steps(self) -> np.ndarray | None:
        """Each commit's mini-batches under DyLU (its client's count), else None."""
        if self.windows is None:
            return None
        return np.asarray(self.windows, np.int64)[np.asarray(self.clients, np.int64)]

    def _release(self, c: int, now: float) -> None:
        """Client ``c``'s task is over. If it is down and slots wait, the shared wake-up moves
        to when it comes up, if that is sooner (it was busy when the wake-up was set)."""
        self.busy[c] = 0
        if self.waiting and self.calendar.next_down(c, now) < 0.0:
            up = self.calendar.up_time(c, now)
            if up < self.wake_at:
                self._schedule_wake(up)

    # -- waiting for a client ------------------------------------------------------------

    def _wait(self, w: int) -> None:
        state = self.state
        state.begin_wait(w, WAITING)
        state.start_life(w)
        self.waiting.append(w)
        if self.wake is None:
            self._schedule_wake(self.calendar.next_change(state.env._now))

    def _schedule_wake(self, t: float) -> None:
        """The waiting slots wake at ``t`` (none is set past the horizon or at inf: the
        waiting slots then wait to the end)."""
        self.wake = None
        self.wake_at = t
        if t <= self.state.horizon and not math.isinf(t):
            self.wake = schedule_at(self.state.env, t, None, self.wake_callbacks)

    def _on_wake(self, timer: Timer) -> None:
        if timer is not self.wake:
            return
        self.wake, self.wake_at = None, math.inf
        state = self.state
        now = state.env._now
        waiting = self.waiting
        while waiting:
            pick = self.selector.select(now)
            if pick is None:
                self._schedule_wake(self.calendar.next_change(now))
                return
            w = waiting.popleft()
            state.end_wait(w)
            self._start(w, pick, True)

    def finish(self, end: float) -> None:
        """The run is over at ``end``: the waits still open count up to it."""
        state = self.state
        for w in self.waiting:
            if state.phase[w] == WAITING:
                state.end_wait(w, until=end)

    def report(self, duration: float) -> ClientReport:
        """Per-client speed and tasks started, completed and lost (the per-client sums of
        the run's tasks, which come with them), and each client's time up within the run's
        ``duration`` on the calendar it ran on."""
        return tasks_report(self.population, self.schedule, self.speeds, self.tasks, duration)


def check_slowest(slots, speeds: np.ndarray, window: int) -> None:
    """Refuse compute laws whose tasks of ``window`` batches on the slowest client would not
    fit the clock (`check_compute`)."""
    slowest = float(speeds.min())
    for law, speed in dict.fromkeys((ws.compute, ws.speed) for ws in slots):
        check_compute(law, speed * slowest, window)


def tasks_report(
    population: Population, schedule: int, speeds: np.ndarray, tasks: TaskLog, duration: float
) -> ClientReport:
    """The per-client report of a run's tasks (`client_report`), each client's time up
    within ``duration`` on the calendar of ``schedule``."""
    up = client_up_seconds(population, schedule, duration)
    return client_report(speeds, tasks.columns(), up)


class TaskLog:
    """A population's tasks as they start and end, in columns (`ClientTasks`); a task not
    ended is in flight (the timing model's run keeps one, and so does a real run's server).
    Typed arrays rather than a tuple a task, which the garbage collector would walk (a third
    more time for fedbuff.yaml's run, against a tenth)."""

    def __init__(self) -> None:
        self.client, self.slot, self.commit = array("q"), array("q"), array("q")
        self.start_time, self.end_time = array("d"), array("d")
        self.outcome = array("b")

    def start(self, client: int, slot: int, now: float) -> int:
        """A task of ``client`` on ``slot`` starts at ``now``; returns its index."""
        self.client.append(client)
        self.slot.append(slot)
        self.start_time.append(now)
        self.end_time.append(math.nan)
        self.outcome.append(TASK_IN_FLIGHT)
        self.commit.append(-1)
        return len(self.outcome) - 1

    def end(self, i: int, now: float, outcome: int, commit: int = -1) -> None:
        """Task ``i`` ends at ``now``: committed (as trace row ``commit``) or lost."""
        self.end_time[i] = now
        self.outcome[i] = outcome
        self.commit[i] = commit

    def columns(self) -> ClientTasks:
        """The tasks so far as numpy arrays (copies: the log may go on)."""

        def column(values: array, dtype) -> np.ndarray:
            return np.frombuffer(values, dtype=dtype).copy()

        return ClientTasks(
            client=column(self.client, np.int64),
            slot=column(self.slot, np.int64),
            start=column(self.start_time, np.float64),
            end=column(self.end_time, np.float64),
            outcome=column(self.outcome, np.int8),
            commit=column(self.commit, np.int64),
        )
