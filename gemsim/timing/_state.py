"""Mutable state shared by the processes of one simulation run.

A `SimState` lives inside one `simulate` call: the parameter server's queue, version
counter and gradient in service, each worker's phase and in-flight gradient, the trace
columns being recorded and what the report counts (time waiting, work lost or cancelled).
The processes in `_processes.py` and the protocol in `_protocol_runs.py` drive it; nothing
outside the run ever sees it.

Speed matters here (docs/design.md §9), so a commit costs two SimPy events: the worker's
arrival at the PS and the end of its service. That is possible because the time of a
worker's next arrival is known the moment its pull starts (pull, compute and push follow
each other with nothing observable in between), and the end of a service is known the
moment it starts. An arrival is an `Arrival` event scheduled when the cycle starts; a
cycle that is abandoned (a crash, a cancelled k_sync straggler) is not unscheduled: its
arrival fires later and is ignored, because the worker no longer waits on it. A shared PS
link (`_link.py`) adds one event per commit: the push reaching the server's link.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from collections.abc import Callable
from heapq import heappush
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL, PENDING, Event

from gemsim.trace import CommitTrace

from ._cluster import ClusterSpec, CommitBudget, Discipline, SecondsBudget, StepsBudget
from ._draws import Draw, WorkerDraws, service_draw, uniform_draw, worker_draws
from ._lives import SlowdownClock
from ._server_protocols import KSync

# Phases of a worker. Its gradient is "in flight" in CYCLE (pull, compute, push) and
# QUEUED; once SERVING it will be committed even if the worker crashes. READY: waiting for
# a barrier round to start; WAITING: held by the protocol (an SSP block, a k_async round).
OFF, CYCLE, QUEUED, SERVING, READY, WAITING, DONE = range(7)

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


class Arrival(Event):
    """Worker ``value``'s work reaching a stage ``delay`` seconds from now; ``callback`` runs
    then (a `simpy.Timeout` with its one callback, built in one step)."""

    def __init__(self, env: simpy.Environment, delay: float, value: int, callback) -> None:
        self.env = env
        self.callbacks = [callback]
        self._value = value
        self._ok = True
        env.schedule(self, NORMAL, delay)


class At(Event):
    """Fires at the virtual time ``t`` itself (a `simpy.Timeout` given the time, not the
    delay): ``now + (t - now)`` can miss ``t`` by an ulp whatever delay is passed (when the
    exact sums on either side of ``t`` are ties), and down intervals end exactly when given.
    Scheduled as `simpy.Environment.schedule` does, so ties keep SimPy's order."""

    def __init__(self, env: simpy.Environment, t: float) -> None:
        if t < env.now:
            raise ValueError(f"cannot schedule at {t!r}, before now ({env.now!r})")
        self.env = env
        self.callbacks = []
        self._value = None
        self._ok = True
        heappush(env._queue, (t, NORMAL, next(env._eid), self))


class SimState:
    """Everything one run mutates; built by `simulate`, driven by the processes."""

    def __init__(
        self, env: simpy.Environment, spec: ClusterSpec, seed: int, schedule_seed: int
    ) -> None:
        n = spec.n_workers
        self.env = env
        self.spec = spec
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
        self.waits: list[Event | None] = [None] * n  # the arrival each worker's cycle awaits
        self.pulled = [0] * n  # version the in-flight gradient is computed on
        self.computed = [0.0] * n  # compute time of the in-flight gradient
        self.compute_from = [0.0] * n  # when its compute started (for lost work)
        self.arrived = [0.0] * n  # arrival time of the gradient at the PS
        self.new_life = [False] * n  # the worker's next commit is the first of its life
        self.slow = [
            SlowdownClock(ws, schedule_seed, w) if ws.slowdowns is not None else None
            for w, ws in enumerate(spec.workers)
        ]
        # The plain cycle is the fastest; work that can be lost or cancelled needs to know
        # when its compute started.
        tracked = (
            any(s is not None for s in self.slow)
            or any(ws.has_downtime for ws in spec.workers)
            or isinstance(spec.protocol, KSync)
        )
        self.cycle: Callable[[int, bool], float] = self._tracked_cycle if tracked else self._cycle
        self.queue: deque[int] | list[int]
        self.pick: Callable[[], int]
        if spec.discipline is Discipline.FIFO:
            self.queue = deque()
            self.pick = self.queue.popleft
        else:
            self.queue = []
            self.pick = _random_pick(self.queue, uniform_draw(seed))
        self.on_arrival = self._on_arrival  # a protocol may hook arrivals (k_sync)
        self.arm: Callable[[int, bool], None] = self._arm
        # Trace columns (commit index and staleness are derived at the end).
        self.times: list[float] = []
        self.workers: list[int] = []
        self.pulled_versions: list[int] = []
        self.compute_times: list[float] = []
        self.queue_times: list[float] = []
        self.service_times: list[float] = []
        self.fresh: list[bool] = []
        self.round_end: list[bool] = []
        # What the report counts per worker (see `_outcome.py`).
        self.waited = [0.0] * n
        self.wait_since = [0.0] * n
        self.lost = [0] * n
        self.lost_compute = [0.0] * n
        self.cancelled = [0] * n
        self.cancelled_compute = [0.0] * n
        self.downs: list[list[tuple[float, float]]] = [[] for _ in range(n)]

    # -- worker side -------------------------------------------------------------------

    def _cycle(self, w: int, pull: bool) -> float:
        """Draw worker ``w``'s next (pull,) compute and push; return their total time."""
        compute, push, pull_draw = self.draws[w]
        c = compute()
        self.computed[w] = c
        if pull:
            return pull_draw() + c + push()
        return c + push()

    def _tracked_cycle(self, w: int, pull: bool) -> float:
        """`_cycle` that also notes when the compute starts and stretches it by slowdowns."""
        compute, push, pull_draw = self.draws[w]
        p = pull_draw() if pull else 0.0
        c = compute()
        start = self.env.now + p
        slow = self.slow[w]
        if slow is not None:
            c = slow.stretch(start, c)
        self.computed[w] = c
        self.compute_from[w] = start
        return p + c + push()

    def _arm(self, w: int, pull: bool) -> None:
        """Worker ``w`` starts a cycle on the current version (pulling it when ``pull``)."""
        self.phase[w] = CYCLE
        self.pulled[w] = self.version
        self.waits[w] = Arrival(self.env, self.cycle(w, pull), w, self.on_arrival)

    def _on_arrival(self, event: Event) -> None:
        w = event._value
        if self.waits[w] is event:  # else the cycle was abandoned (crash, cancel)
            self.arrive(w)

    def arrive(self, w: int) -> None:
        """Worker ``w``'s gradient reaches the PS: it queues, or an idle server takes it."""
        self.arrived[w] = self.env.now
        self.waits[w] = None
        idle = self.idle
        if idle is None:
            self.phase[w] = QUEUED
            self.queue.append(w)
        else:  # an idle server takes the gradient at once and wakes when it is served
            self.idle = None
            idle.succeed_after(self.begin_service(w))

    def start_life(self, w: int) -> None:
        """Worker ``w`` comes up: its next commit is the first of a life."""
        self.new_life[w] = True

    def crash(self, w: int) -> int:
        """Worker ``w`` goes down: an in-flight gradient not yet in service is lost (and
        counted); returns the phase it was in."""
        phase = self.phase[w]
        now = self.env.now
        if phase in (CYCLE, QUEUED) and now <= self.horizon:
            self.lost[w] += 1
            self.lost_compute[w] += self.compute_done(w, now)
        elif phase in (READY, WAITING):
            self.end_wait(w)
        self.phase[w] = OFF
        self.waits[w] = None
        if phase == QUEUED:
            self.queue.remove(w)
        return phase

    def compute_done(self, w: int, now: float) -> float:
        """Seconds of its in-flight gradient's compute worker ``w`` had done by ``now``."""
        if self.phase[w] == QUEUED:
            return self.computed[w]
        return min(self.computed[w], max(0.0, now - self.compute_from[w]))

    def begin_wait(self, w: int, phase: int) -> None:
        """Worker ``w`` waits on the protocol (``phase`` READY or WAITING) from now."""
        self.phase[w] = phase
        self.wait_since[w] = self.env.now

    def end_wait(self, w: int, until: float | None = None) -> None:
        """Worker ``w`` stops waiting now (or at ``until``); the time counts up to the
        horizon."""
        end = min(self.env.now if until is None else until, self.horizon)
        if end > self.wait_since[w]:
            self.waited[w] += end - self.wait_since[w]

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

    # -- result ------------------------------------------------------------------------

    def duration(self) -> float:
        """The horizon of a SecondsBudget, else the time of the last commit."""
        if math.isfinite(self.horizon):
            return self.horizon
        return self.times[-1] if self.times else 0.0

    def to_trace(self) -> CommitTrace:
        """The recorded commits as a validated `CommitTrace`."""
        times = np.asarray(self.times, dtype=np.float64)
        service = np.asarray(self.service_times, dtype=np.float64)
        busy = math.fsum(service) + self.partial_busy
        return CommitTrace.from_columns(
            time=times,
            worker=np.asarray(self.workers, dtype=np.int64),
            pulled_version=np.asarray(self.pulled_versions, dtype=np.int64),
            compute_time=np.asarray(self.compute_times, dtype=np.float64),
            queue_time=np.asarray(self.queue_times, dtype=np.float64),
            service_time=service,
            n_workers=self.spec.n_workers,
            duration=self.duration(),
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
