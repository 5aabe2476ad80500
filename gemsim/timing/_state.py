"""Mutable state shared by the processes of one simulation run.

A `SimState` lives inside one `simulate` call: the parameter server's queue, version
counter and gradient in service, each worker's phase and in-flight gradient, the
synchronous round, and the trace columns being recorded. The processes in
`processes.py` drive it; nothing outside the run ever sees it.

Speed matters here (docs/design.md §9), so a commit costs two SimPy events: the
worker's arrival at the PS and the end of its service. That is possible because the
time of a worker's next arrival is known the moment its pull starts (pull, compute and
push follow each other with nothing observable in between), and the end of a service
is known the moment it starts. Both are `Signal` events armed with a delay.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL, PENDING, Event

from gemsim.trace import CommitTrace

from ._cluster import ClusterSpec, CommitBudget, Discipline, SecondsBudget, StepsBudget
from ._draws import Draw, WorkerDraws, service_draw, uniform_draw, worker_draws

# Phases of a worker. Its gradient is "in flight" in CYCLE (pull, compute, push) and
# QUEUED; once SERVING it will be committed even if the worker crashes.
OFF, CYCLE, QUEUED, SERVING, READY, DONE = range(6)

STOP = True
"""Value of the event that tells a worker its budget is spent."""

_UNLIMITED = sys.maxsize


class Signal(Event):
    """An event that is triggered now or later: a `simpy.Timeout` armed after creation.

    A process can wait on a Signal before anyone knows when it will fire; the side that
    learns the time arms it with `succeed_after`. This saves the second event that
    "succeed now, then wait on a Timeout" would cost.
    """

    def succeed_after(self, delay: float, value: Any = None) -> Signal:
        """Trigger the event ``delay`` seconds from now (``Event.succeed`` with a delay)."""
        if self._value is not PENDING:
            raise RuntimeError(f"{self} has already been triggered")
        self._ok = True
        self._value = value
        self.env.schedule(self, NORMAL, delay)
        return self


class SimState:
    """Everything one run mutates; built by `simulate`, driven by the processes."""

    def __init__(self, env: simpy.Environment, spec: ClusterSpec, seed: int) -> None:
        n = spec.n_workers
        self.env = env
        self.spec = spec
        self.synchronous = spec.synchronous
        self.draws: list[WorkerDraws] = [worker_draws(spec, seed, w) for w in range(n)]
        self.service: Draw | None = service_draw(spec, seed)
        budget = spec.budget
        self.horizon = budget.seconds if isinstance(budget, SecondsBudget) else math.inf
        self.max_commits = budget.commits if isinstance(budget, CommitBudget) else _UNLIMITED
        quota = budget.commits_per_worker(spec.window) if isinstance(budget, StepsBudget) else 0
        # Commits each worker may still start (StepsBudget). Reserved when service
        # begins, because a commit in service always completes.
        self.quota = [quota or _UNLIMITED] * n
        self.version = 0
        self.idle: Signal | None = None  # the server's wake-up while it has nothing to do
        self.partial_busy = 0.0  # service cut short by a SecondsBudget's horizon
        # (worker, start, pulled_version, compute_time, queue_time, service_time, fresh)
        self.in_service: tuple[int, float, int, float, float, float, bool] | None = None
        self.phase = [OFF] * n
        self.waits: list[Signal | None] = [None] * n  # what each worker waits on
        self.pulled = [0] * n  # version the in-flight gradient is computed on
        self.computed = [0.0] * n  # compute time of the in-flight gradient
        self.arrived = [0.0] * n  # arrival time of the gradient at the PS
        self.needs_pull = [False] * n  # synchronous mode: next cycle starts with a pull
        self.new_life = [False] * n  # the worker's next commit is the first of its life
        self.queue: deque[int] | list[int]
        self.pick: Callable[[], int]
        if spec.discipline is Discipline.FIFO:
            self.queue = deque()
            self.pick = self.queue.popleft
        else:
            self.queue = []
            self.pick = _random_pick(self.queue, uniform_draw(seed))
        self.outstanding = 0  # synchronous: gradients of this round not committed or lost
        self.round_pending = False
        self.round_commits = 0  # synchronous: commits recorded in the current round
        # Trace columns (commit index and staleness are derived at the end).
        self.times: list[float] = []
        self.workers: list[int] = []
        self.pulled_versions: list[int] = []
        self.compute_times: list[float] = []
        self.queue_times: list[float] = []
        self.service_times: list[float] = []
        self.fresh: list[bool] = []
        self.round_end: list[bool] = []

    # -- worker side -------------------------------------------------------------------

    def cycle(self, w: int, pull: bool) -> float:
        """Draw worker ``w``'s next (pull,) compute and push; return their total time."""
        compute, push, pull_draw = self.draws[w]
        c = compute()
        self.computed[w] = c
        if pull:
            return pull_draw() + c + push()
        return c + push()

    def start(self, w: int, pull: bool) -> Signal:
        """Worker ``w`` starts a life; returns the event of its first arrival at the PS.

        Asynchronous: it pulls the current version now. Synchronous: it waits for the next
        round, which arms the event with the version current then.
        """
        signal = self.waits[w] = Signal(self.env)
        self.new_life[w] = True
        if not self.synchronous:
            self.pulled[w] = self.version
            self.phase[w] = CYCLE
            return signal.succeed_after(self.cycle(w, pull))
        self.phase[w] = READY
        self.needs_pull[w] = pull
        if self.outstanding == 0 and not self.round_pending:
            self._schedule_round()
        return signal

    def arrive(self, w: int) -> Signal:
        """Worker ``w``'s gradient reaches the PS; returns the event of its next arrival.

        That event carries `STOP` instead when the worker's budget is spent.
        """
        self.arrived[w] = self.env.now
        signal = self.waits[w] = Signal(self.env)
        idle = self.idle
        if idle is None:
            self.phase[w] = QUEUED
            self.queue.append(w)
        else:  # an idle server takes the gradient at once and wakes when it is served
            self.idle = None
            idle.succeed_after(self.begin_service(w))
        return signal

    def crash(self, w: int) -> None:
        """Worker ``w`` crashes: an in-flight gradient not yet in service is lost."""
        phase = self.phase[w]
        self.phase[w] = OFF
        self.waits[w] = None
        if phase == QUEUED:
            self.queue.remove(w)
        if self.synchronous and phase in (CYCLE, QUEUED):
            self._round_member_done()

    def has_quota(self, w: int) -> bool:
        """Whether worker ``w`` may still start a commit (StepsBudget)."""
        return self.quota[w] > 0

    # -- server side -------------------------------------------------------------------

    def new_signal(self) -> Signal:
        """A fresh, untriggered `Signal` in this run's environment."""
        return Signal(self.env)

    def begin_service(self, w: int) -> float:
        """Start serving worker ``w``'s gradient; returns the service time.

        The gradient's facts are read now: a crash during service may restart the worker
        and overwrite them before the commit completes.
        """
        now = self.env.now
        self.phase[w] = SERVING
        self.quota[w] -= 1
        s = 0.0 if self.service is None else self.service()
        fresh, self.new_life[w] = self.new_life[w], False
        self.in_service = (
            w,
            now,
            self.pulled[w],
            self.computed[w],
            now - self.arrived[w],
            s,
            fresh,
        )
        return s

    def after_commit(self, w: int, version: int) -> None:
        """Worker ``w``'s live gradient was committed as ``version``: it pulls it at once."""
        if self.quota[w] == 0:
            self.phase[w] = DONE
            self.waits[w].succeed(STOP)
            return
        self.phase[w] = CYCLE
        self.pulled[w] = version
        self.waits[w].succeed_after(self.cycle(w, True))

    def after_round_commit(self, w: int, live: bool) -> None:
        """Synchronous mode: worker ``w`` committed; it waits for the barrier."""
        if live:
            if self.quota[w] == 0:
                self.phase[w] = DONE
                self.waits[w].succeed(STOP)
            else:
                self.phase[w] = READY
                self.needs_pull[w] = True
        self._round_member_done()

    # -- synchronous rounds ------------------------------------------------------------

    def _round_member_done(self) -> None:
        self.outstanding -= 1
        if self.outstanding == 0:
            if self.round_commits:  # the round's last commit closes it (a crash may end it)
                self.round_end[-1] = True
            self._schedule_round()

    def _schedule_round(self) -> None:
        # A zero delay lets every worker that becomes ready at this instant join the round.
        self.round_pending = True
        self.env.timeout(0).callbacks.append(self._start_round)

    def _start_round(self, _event: Event) -> None:
        self.round_pending = False
        self.round_commits = 0
        version = self.version
        members = [w for w, phase in enumerate(self.phase) if phase == READY]
        for w in members:
            self.pulled[w] = version
            self.phase[w] = CYCLE
            self.waits[w].succeed_after(self.cycle(w, self.needs_pull[w]))
        self.outstanding = len(members)

    # -- result ------------------------------------------------------------------------

    def to_trace(self) -> CommitTrace:
        """The recorded commits as a validated `CommitTrace`."""
        times = np.asarray(self.times, dtype=np.float64)
        service = np.asarray(self.service_times, dtype=np.float64)
        busy = math.fsum(service) + self.partial_busy
        if math.isfinite(self.horizon):
            duration = self.horizon
        else:
            duration = float(times[-1]) if len(times) else 0.0
        return CommitTrace.from_columns(
            time=times,
            worker=np.asarray(self.workers, dtype=np.int64),
            pulled_version=np.asarray(self.pulled_versions, dtype=np.int64),
            compute_time=np.asarray(self.compute_times, dtype=np.float64),
            queue_time=np.asarray(self.queue_times, dtype=np.float64),
            service_time=service,
            n_workers=self.spec.n_workers,
            duration=duration,
            busy_time=busy,
            fresh=np.asarray(self.fresh, dtype=bool),
            round_end=np.asarray(self.round_end, dtype=bool),
        )


def _random_pick(waiting: list[int], uniform: Draw) -> Callable[[], int]:
    """Uniform choice among the waiting commits, removing the chosen one."""

    def pick() -> int:
        last = len(waiting) - 1
        if last:
            i = int(uniform() * (last + 1))
            # Swap-remove: O(1), and order in the list carries no meaning for RANDOM.
            waiting[i], waiting[last] = waiting[last], waiting[i]
        return waiting.pop()

    return pick
