"""Mutable state shared by the parts of one simulation run.

A `SimState` lives inside one `simulate` call: each worker's phase and in-flight gradient,
the parameter server's queue and version counter, the trace columns being recorded and what
the report counts (time waiting, work lost or cancelled). The processes in `_processes.py`,
the server in `_server.py` and the protocol in `_protocol_runs.py` drive it; nothing outside
the run ever sees it.

Speed matters here (docs/design.md §9), so a commit costs one SimPy event when nothing else
happens at its time: the worker's gradient reaching the PS. That is possible because the time
of a worker's next arrival is known the moment its pull starts (pull, compute and push follow
each other with nothing observable in between), and the end of a service is known the moment
it starts (see `_server.Server`). An arrival is a `Timer` scheduled when the cycle starts; a
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
from typing import TYPE_CHECKING

import numpy as np
import simpy
from simpy.events import NORMAL, Event

from gemsim.trace import CommitTrace

from ._budget import CommitBudget, SecondsBudget, StepsBudget
from ._cluster import ClusterSpec
from ._draws import (
    Draw,
    WorkerDraws,
    draw_sum,
    drop_draw,
    service_draw,
    uniform_draw,
    worker_draws,
)
from ._lives import SlowdownClock
from ._server_options import Discipline, Ties
from ._server_protocols import KSync

if TYPE_CHECKING:
    from ._server import Server

# Phases of a worker. Its gradient is "in flight" in CYCLE (pull, compute, push) and
# QUEUED; once SERVING it will be committed even if the worker crashes. READY: waiting for
# a barrier round to start; WAITING: held by the protocol (an SSP block, a k_async round).
OFF, CYCLE, QUEUED, SERVING, READY, WAITING, DONE = range(7)

_UNLIMITED = sys.maxsize

Callbacks = list[Callable[["Timer"], None]]


class Timer:
    """The end of a delay as SimPy's event loop sees it: scheduled with `schedule_at` (or
    pushed on the queue directly in the hot paths), it runs its ``callbacks`` then.

    `simpy.Environment.step` reads only an event's ``callbacks`` and ``_ok``, and no process
    ever waits on a Timer (it is a `simpy.Timeout` that only callbacks follow), so it is kept
    to two slots, cheaper to make than a Timeout. ``callbacks`` is a list shared by every
    Timer of one kind and never appended to; ``_value`` says whose work it is (a worker).
    """

    __slots__ = ("_value", "callbacks")
    _ok = True

    def __repr__(self) -> str:
        return f"<Timer of {self._value!r}>"


def schedule_at(
    env: simpy.Environment, t: float, value: object, callbacks: Callbacks, priority: int = NORMAL
) -> Timer:
    """A `Timer` at virtual time ``t`` (>= now) carrying ``value``, scheduled as
    `simpy.Environment.schedule` schedules (priority NORMAL unless given, ties in scheduling
    order)."""
    timer = Timer()
    timer.callbacks = callbacks
    timer._value = value
    heappush(env._queue, (t, priority, next(env._eid), timer))
    return timer


def arrival_ranks(n: int, ties: Ties) -> list[int]:
    """The SimPy priority of each worker's arrivals at the server. ``BY_START``: NORMAL for
    all, so that simultaneous arrivals run in scheduling order (their cycles' starts).
    ``BY_WORKER``: ``NORMAL + 1 + w``, so that they run in worker order, after every other
    event of that instant (nothing else in SimPy has a priority above NORMAL)."""
    if ties is Ties.BY_WORKER:
        return [NORMAL + 1 + w for w in range(n)]
    return [NORMAL] * n


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
        # Commits each worker may still start (StepsBudget: `limited`; other budgets leave
        # it unlimited and never count it down). Reserved when service begins, because a
        # commit in service always completes.
        self.limited = isinstance(budget, StepsBudget)
        self.quota = spec.commit_quotas(budget) if self.limited else [_UNLIMITED] * n
        self.version = 0  # commits so far
        self.server: Server  # set by the Server itself
        self.phase = [OFF] * n
        self.waits: list[Timer | None] = [None] * n  # the arrival each worker's cycle awaits
        self.pulled = [0] * n  # version the in-flight gradient is computed on
        self.computed = [0.0] * n  # compute time of the in-flight gradient
        self.compute_from = [0.0] * n  # when its compute started (for lost work)
        self.arrived = [0.0] * n  # arrival time of the gradient at the PS
        self.new_life = [False] * n  # the worker's next commit is the first of its life
        self.rank = arrival_ranks(n, spec.ties)  # the priority of each worker's arrivals
        self.slow = [
            SlowdownClock(ws, schedule_seed, w) if ws.slowdowns is not None else None
            for w, ws in enumerate(spec.workers)
        ]
        # The plain cycle (`_arm`) is the fastest; work that can be lost or cancelled needs to
        # know when its compute started (`_tracked_arm`).
        tracked = (
            any(s is not None for s in self.slow)
            or any(ws.has_downtime for ws in spec.workers)
            or isinstance(spec.protocol, KSync)
            or spec.stops is not None
        )
        self.queue: deque[int] | list[int]
        self.pick: Callable[[], int]
        if spec.discipline is Discipline.FIFO:
            self.queue = deque()
            self.pick = self.queue.popleft
        else:
            self.queue = []
            self.pick = _random_pick(self.queue, uniform_draw(seed))
        # What an arrival runs (a protocol may hook it: k_sync); every arrival's Timer shares
        # this list.
        self.arrivals: Callbacks = [self._on_arrival]
        # Lost pushes (`ClusterSpec.drop_push`): each push reaching the server is lost with
        # its worker's draw; the worker then pulls and computes again.
        self.drops: list[Callable[[], bool]] | None = None
        self.dropped = [0] * n  # pushes lost, per worker (the report)
        self.pending_drops = [0] * n  # lost since the worker's last commit
        self.dropped_rows: list[int] = []  # per commit row: the pushes lost before it
        # What a worker whose push was lost does (a protocol of rounds sets its own).
        self.on_drop: Callable[[int], None] = self._pull_again
        if spec.drop_push > 0:
            self.drops = [drop_draw(seed, w, spec.drop_push) for w in range(n)]
            self.arrivals[0] = self._on_arrival_or_drop
        self.arm: Callable[[int, bool], None] = self._tracked_arm if tracked else self._arm
        # Trace columns, one row per commit, written when its service begins (commit index
        # and staleness are derived at the end; see `_server.Server.begin`).
        self.times: list[float] = []
        self.workers: list[int] = []
        self.pulled_versions: list[int] = []
        self.compute_times: list[float] = []
        self.queue_times: list[float] = []
        self.service_times: list[float] = []  # empty when service takes no time
        self.fresh_rows: list[int] = []  # the commits that are the first of a life
        # The commits that close a round, or None: every commit closes its own round (a
        # protocol of rounds sets a list and closes its rounds with `close_round`).
        self.round_ends: list[int] | None = None
        self.partial_busy = 0.0  # service cut short by a SecondsBudget's horizon
        # What the report counts per worker (see `_outcome.py`).
        self.waited = [0.0] * n
        self.wait_since = [0.0] * n
        self.lost = [0] * n
        self.lost_compute = [0.0] * n
        self.cancelled = [0] * n
        self.cancelled_compute = [0.0] * n
        self.downs: list[list[tuple[float, float]]] = [[] for _ in range(n)]

    # -- worker side -------------------------------------------------------------------

    def _arm(self, w: int, pull: bool) -> None:
        """Worker ``w`` starts a cycle on the current version (pulling it when ``pull``): its
        pull, compute and push are drawn now, and its arrival at the PS is scheduled."""
        env = self.env
        compute, push, pull_draw = self.draws[w]
        c = compute()
        self.computed[w] = c
        delay = pull_draw() + c + push() if pull else c + push()
        self.phase[w] = CYCLE
        self.pulled[w] = self.version
        # `schedule_at(env, env._now + delay, w, self.arrivals)`, inlined.
        timer = Timer()
        timer.callbacks = self.arrivals
        timer._value = w
        self.waits[w] = timer
        heappush(env._queue, (env._now + delay, self.rank[w], next(env._eid), timer))

    def _tracked_arm(self, w: int, pull: bool, steps: int = 1, speed: float = 1.0) -> None:
        """`_arm` that also notes when the compute starts and stretches it by slowdowns;
        ``steps``: the task's own mini-batches, one draw each (FedCompass's tasks), their
        sum divided by ``speed`` (a population's client's)."""
        env = self.env
        compute, push, pull_draw = self.draws[w]
        p = pull_draw() if pull else 0.0
        c = compute() if steps == 1 else draw_sum(compute, steps)
        if speed != 1.0:
            c = c / speed
        now = env._now
        start = now + p
        slow = self.slow[w]
        if slow is not None:
            c = slow.stretch(start, c)
        self.computed[w] = c
        self.compute_from[w] = start
        delay = p + c + push()
        self.phase[w] = CYCLE
        self.pulled[w] = self.version
        # `schedule_at(env, now + delay, w, self.arrivals)`, inlined.
        timer = Timer()
        timer.callbacks = self.arrivals
        timer._value = w
        self.waits[w] = timer
        heappush(env._queue, (now + delay, self.rank[w], next(env._eid), timer))

    def hook_arrivals(self, callback: Callable[[Timer], None]) -> None:
        """Make every arrival (scheduled or to come) run ``callback`` instead of the default,
        which checks that the cycle is current and calls `arrive`."""
        self.arrivals[0] = callback

    def _on_arrival(self, timer: Timer) -> None:
        """`arrive` when ``timer`` is the arrival worker ``w``'s cycle waits for (else the
        cycle was abandoned: a crash, a cancel); the event does nothing else."""
        w = timer._value
        if self.waits[w] is not timer:
            return
        # `self.arrive(w, last=True)`, inlined.
        self.arrived[w] = self.env._now
        self.waits[w] = None
        server = self.server
        if server.busy:
            self.phase[w] = QUEUED
            self.queue.append(w)
        else:
            server.take(w, True)

    def _on_arrival_or_drop(self, timer: Timer) -> None:
        """`_on_arrival`, unless the network loses the push: then the server never sees it,
        and the worker pulls the current version and starts another computation."""
        w = timer._value
        if self.waits[w] is not timer:
            return
        if self.drops[w]():
            self.waits[w] = None
            if self.env._now <= self.horizon:
                self.dropped[w] += 1
                self.pending_drops[w] += 1
            self.on_drop(w)
            return
        self._on_arrival(timer)

    def _pull_again(self, w: int) -> None:
        """After a lost push (asynchronous protocol): pull the current version and compute
        again."""
        self.arm(w, True)

    def arrive(self, w: int, *, last: bool = False) -> None:
        """Worker ``w``'s gradient reaches the PS: it queues, or an idle server takes it.

        ``last``: nothing else happens in the current event after this call, so the server
        may complete the service at once when no other event comes first (`Server.take`).
        """
        self.arrived[w] = self.env._now
        self.waits[w] = None
        server = self.server
        if server.busy:
            self.phase[w] = QUEUED
            self.queue.append(w)
        else:
            server.take(w, last)

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

    def close_round(self) -> None:
        """The last commit so far closes a round (protocols of rounds)."""
        self.round_ends.append(self.version - 1)

    # -- result ------------------------------------------------------------------------

    def duration(self) -> float:
        """The horizon of a SecondsBudget, else the time of the last commit."""
        if math.isfinite(self.horizon):
            return self.horizon
        return self.times[-1] if self.times else 0.0

    def to_trace(
        self,
        client: list[int] | None = None,
        n_clients: int | None = None,
        local_steps: np.ndarray | None = None,
        buffer: np.ndarray | None = None,
    ) -> CommitTrace:
        """The recorded commits as a validated `CommitTrace` (with a population's ``client``
        column and ``n_clients`` when given, its clients' own ``local_steps``, and a
        FedCompass run's ``buffer`` column)."""
        times = np.asarray(self.times, dtype=np.float64)
        n = len(times)
        if self.service is None:
            service = np.zeros(n, dtype=np.float64)
        else:
            service = np.asarray(self.service_times, dtype=np.float64)
        busy = math.fsum(service) + self.partial_busy
        fresh = np.zeros(n, dtype=bool)
        fresh[self.fresh_rows] = True
        if self.round_ends is None:
            round_end = np.ones(n, dtype=bool)
        else:
            round_end = np.zeros(n, dtype=bool)
            round_end[self.round_ends] = True
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
            fresh=fresh,
            round_end=round_end,
            client=None if client is None else np.asarray(client, dtype=np.int64),
            n_clients=n_clients,
            local_steps=self._local_steps() if local_steps is None else local_steps,
            dropped=None if self.drops is None else np.asarray(self.dropped_rows, np.int64),
            buffer=buffer,
        )

    def _local_steps(self) -> np.ndarray | None:
        """Each commit's mini-batches where workers hold windows of their own (else None)."""
        windows = self.spec.windows
        if windows is None:
            return None
        return np.asarray(windows, dtype=np.int64)[np.asarray(self.workers, dtype=np.int64)]


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
