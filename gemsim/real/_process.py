"""`--backend process`: a real asynchronous run with one process per worker.

This process is the parameter server; its worker processes (one per worker, forked from a
preloaded fork server, each on its own pipe) are gemsim/real/_worker_processes.py.
The server serves the works that have arrived in the order they arrived (FIFO by the
workers' send timestamps, on the system-wide monotonic clock), one at a time, so every
commit is atomic. Parameters travel through shared memory (`_shared.SharedArray`).

A worker's scheduled downs (failures, churn, an availability trace: `timing.life_events`)
kill it (SIGKILL) at their time and, when it is to come back, start a new process at once,
which starts up (import, compile) while the worker is down and goes on when the down
interval ends (or when it is ready, if later): the restarted worker pulls the central
variable of that moment. With `emulate_latency` each worker's compute lasts what
the timing model draws for it, stretched by its slowdowns (`timing.EmulatedCompute`; the
server numbers each worker's computations, lost ones included, as the simulator draws). A
worker that dies by itself is seen at once (its pipe closes) and recorded; the run goes on
with the others. Whatever happens,
every worker process is stopped and the shared memory released before this returns.

A population (`clients:`): the worker processes are K slots, never killed on a schedule
(clients come and go, not slots). A free slot gets a task for a client the server chooses
(`_clients.ClientPool`: the timing model's calendar, speeds and selection): the `go` message
names the client, whose batches the slot reads from the client's own counter, and the emulated
compute is divided by the client's speed. A slot that takes a task right at its own commit
goes on from the committed row (whose rule state the commit made fresh); any other task (after
a loss or a wait) pulls the version of that moment, fresh: the trace's `fresh` flags then say
what the engine's population plan expects. Work whose client went down before the server took
it is lost: not committed, counted per client (`RealRun.clients`).

FedCompass (`optimizer.rule: fedcompass`): the server runs its scheduler
(`_compass.CompassServer`, the timing model's decisions on the measured times), holds the works
that arrive in their group's time and wakes for the groups' timers; each `go` message gives
the task's steps.

Interrupts: the server's compilations and final evaluation run off the main thread
(gemsim/real/_background.py), so a KeyboardInterrupt or SIGTERM's `Terminated` reaches it
within a poll; any exception then kills the workers at once (they hold nothing worth saving)
rather than asking them to stop.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterator
from contextlib import ExitStack

import numpy as np

from gemsim import timing
from gemsim.types import Progress

from ._background import Background, in_background
from ._clients import ClientPool
from ._compass import HELD, CompassServer
from ._job import RealJob, RealRun
from ._server import WorkerEvent, server_book
from ._shared import SharedArray
from ._worker_processes import WorkerProcesses, _worker_context


class ProcessBackend(WorkerProcesses):
    """Runs a RealJob with worker processes; `run()` once per instance."""

    name = "process"

    def __init__(self, job: RealJob, *, progress: Progress | None = None):
        self.job = job
        self.progress = progress
        self._ctx = _worker_context()
        self._workers = {}  # the worker processes (`_worker_processes._Worker`)
        self._pending: list[tuple[float, int, int, float]] = []  # (arrived, seq, worker, compute)
        self._seq = 0
        self._t0 = 0.0
        self._restarting: set[int] = set()
        population = job.spec.population
        self.pool = None if population is None else ClientPool(population, job.seed, job.n_workers)
        self.compass: CompassServer | None = None

    def run(self) -> RealRun:
        job = self.job
        self.book = in_background(server_book, job, name=f"{job.name}-prepare")
        compiled = self.book.compiled
        if job.compass is not None:
            self.compass = CompassServer(job.compass, self.book, self.pool, self._clock)
        started = time.perf_counter()
        with ExitStack() as stack:
            shape_rows = (job.n_workers, compiled.layout.row_size)
            self.rows = stack.enter_context(SharedArray.create(shape_rows))
            self.outbox = stack.enter_context(
                SharedArray.create((job.n_workers, compiled.work_size))
            )
            self.rows.array[:] = self.book.rows
            stack.push(self._stop_all)
            for w, ever in enumerate(timing.ever_up(job.spec, job.seed)):
                if ever:  # a worker an availability trace holds down for good never starts
                    self._spawn(w)
            warm = Background(compiled.warm_up, name=f"{job.name}-warm-up")
            self._await_startup()
            warm.result()
            self._t0 = time.monotonic()
            self._loop()
            duration = self._clock()
            self._reap()
        result = in_background(self.book.result, name=f"{job.name}-evaluate")
        return RealRun(
            result=result,
            trace=self.book.trace(duration),
            events=tuple(self.book.events),
            backend=self.name,
            wall_seconds=time.perf_counter() - started,
            clients=None if self.pool is None else self.pool.report(duration),
        )

    # --- the server loop ---------------------------------------------------------------

    def _loop(self) -> None:
        lives = self._schedule()
        upcoming = next(lives, None)
        while True:
            now = self._clock()
            while upcoming is not None and upcoming.time <= now:
                self._scheduled(upcoming)
                upcoming = next(lives, None)
            for w, x in self._workers.items():
                if x.state == "ready" and w in self._joined and w not in self._down:
                    self._go(w, pull=True)  # a restarted worker, or one that joins late
            if self.book.done(now) or self._finished():
                return
            self._wake_slots(now)
            self._check_stalls(now)
            wake = upcoming.time - now if upcoming is not None else 0.5
            if self.pool is not None and self.pool.waiting:  # when a client may come up
                wake = min(wake, self.pool.wake_at - now)
            if self.compass is not None:  # a group's latest time
                wake = min(wake, self.compass.next_timer() - now)
            self._receive(timeout=min(max(wake, 0.0), 0.5))
            self._serve_pending()
            if self.compass is not None:
                self.compass.aggregate_due(self._clock(), self._compass_go)
                self._progress()

    def _schedule(self) -> Iterator[timing.LifeEvent]:
        """Joins, kills and restarts in time order (ties by worker): each worker's late join,
        failures, churn and availability intervals, drawn as the run goes."""
        spec = self.job.spec
        until = spec.budget.seconds if isinstance(spec.budget, timing.SecondsBudget) else math.inf
        self._joined: set[int] = set()
        self._down: set[int] = set()  # restarted processes that wait for their time
        return timing.life_events(spec, self.job.seed, until=until)

    def _scheduled(self, event: timing.LifeEvent) -> None:
        w, kind, now = event.worker, event.kind, self._clock()
        x = self._workers[w]
        if kind == "join":
            self._joined.add(w)
            late = event.time > 0
            if late:
                self.book.events.append(WorkerEvent(now, w, "joined"))
            if x.state == "ready":
                self._go(w, pull=late)
        elif kind in ("down", "gone"):
            if x.state not in ("stopped", "exited", "dead"):  # a worker done has no failure
                self._kill(w, "killed", "scheduled down")
            if kind == "down" and x.state == "dead" and self.book.wants_more(w, now):
                # The new process starts up while the worker is down, to go on at its end
                # (a spent worker stays down).
                self._spawn(w)
                self._restarting.add(w)
                self._down.add(w)
        elif kind == "up":
            self._down.discard(w)

    def _finished(self) -> bool:
        """No worker can commit any more and none is due to (re)start (a restart's process
        is started when its worker goes down), nor a population's waiting slot to get a
        client (none is due to come up)."""
        busy = any(x.state in ("starting", "ready", "working") for x in self._workers.values())
        waiting = self.pool is not None and bool(self.pool.waiting)
        held = self.compass is not None and bool(self.compass.held)
        return (
            not busy
            and not self._pending
            and not held
            and not (waiting and self.pool.wake_at < math.inf)
        )

    def _go(self, w: int, *, pull: bool) -> None:
        if self.pool is not None:
            self._task(w, pull=pull)
            return
        x = self._workers[w]
        if pull:
            self.rows.array[w] = self.book.pull(w)
        if w in self._restarting:
            self._restarting.discard(w)
            self.book.events.append(WorkerEvent(self._clock(), w, "restarted"))
        if self._stopped_if_done(w, self._clock()):  # e.g. its steps were all committed
            return
        steps = None if self.compass is None else self.compass.steps[w]
        cycle = self.book.next_cycle(w, steps=steps)
        message = ("go", self.book.first_step(w), self._t0, cycle, w, 1.0, steps)
        if self._send(w, message):
            x.state, x.since = "working", self._clock()

    def _stopped_if_done(self, w: int, now: float) -> bool:
        """Tell worker `w` to stop if the run wants no more of it; whether it did."""
        if self.book.wants_more(w, now):
            return False
        if self._send(w, ("stop",)):
            self._workers[w].state = "stopped"
        return True

    # --- a population's slots ----------------------------------------------------------

    def _task(self, w: int, *, pull: bool) -> None:
        """Slot `w` is free: a task for the client the pool chooses, or it waits (`pull`:
        the task does not start at the slot's own commit, so it pulls anew)."""
        x, now = self._workers[w], self._clock()
        if self._stopped_if_done(w, now):
            return
        c = self.pool.take(w, now)
        if c is None:
            x.state, x.since = "waiting", now
            return
        self._send_task(w, c, pull=pull)

    def _send_task(self, w: int, c: int, *, pull: bool) -> None:
        if pull:
            self.rows.array[w] = self.book.start_task(w)
        steps = None
        if self.compass is not None:  # the client's task, from the client's own estimate
            self.compass.who[w] = c
            steps = self.compass.next_task(w, self._clock())
        first, cycle = self.book.client_first_step(c), self.book.next_cycle(w, c, steps)
        speed = float(self.pool.speeds[c])
        if self._send(w, ("go", first, self._t0, cycle, c, speed, steps)):
            self._workers[w].state, self._workers[w].since = "working", self._clock()

    def _wake_slots(self, now: float) -> None:
        """The waiting slots that get a client at the calendar's change start their tasks."""
        if self.pool is None or not self.pool.waiting:
            return
        for w, c in self.pool.woken(now):
            self._send_task(w, c, pull=True)

    def _lose(self, w: int, now: float) -> None:
        """Slot `w`'s client went down before its work was served: the work is dropped and
        the slot takes another task, pulling anew."""
        self.pool.release(w, now, committed=False)
        if self._workers[w].state == "working":
            self._task(w, pull=True)

    def _lost_on_arrival(self, w: int) -> bool:
        """Whether the network loses worker `w`'s push now reaching the server (decided on
        arrival, as the timing model does): the worker then pulls and goes again at once."""
        now = self._clock()
        if self.book.done(now):
            return False
        lost = self.book.lost_push(w)
        if lost is None:
            return False
        self.rows.array[w] = lost
        if not self._stopped_if_done(w, now):
            self._go(w, pull=False)
        return True

    def _serve_pending(self) -> None:
        while self._pending and not self.book.done(self._clock()):
            arrived, _, w, compute = heapq.heappop(self._pending)
            if self.compass is not None:
                self._compass_arrival(w, compute, arrived)
                self._receive(timeout=0)
                continue
            started = self._clock()
            if self.pool is not None and self.pool.lost_by(w, started):
                self._lose(w, started)
                self._receive(timeout=0)
                continue
            work = np.array(self.outbox.array[w])
            client = None if self.pool is None else self.pool.client_of[w]
            row = self.book.commit(
                w,
                work,
                compute=compute,
                arrived=arrived,
                started=started,
                clock=self._clock,
                client=client,
            )
            self._progress()
            if row is None:  # non-finite: the run is over
                return
            self.rows.array[w] = row
            if self.pool is not None:  # released before the slot chooses again
                self.pool.release(w, self._clock(), committed=True)
            if self._workers[w].state == "working" and not self._stopped_if_done(w, self._clock()):
                self._go(w, pull=False)
            self._receive(timeout=0)  # later arrivals queue behind the earlier ones

    # --- FedCompass's groups -------------------------------------------------------------

    def _compass_arrival(self, w: int, compute: float, arrived: float) -> None:
        """Worker `w`'s work arrived (at its send time): committed, its worker going on from
        its commit, or held for its group, its worker waiting (`CompassServer.arrive`)."""
        work = np.array(self.outbox.array[w])
        # Its work is in: it waits for its next task (handed over at once, or at its group's
        # aggregation, which may be now).
        self._workers[w].state, self._workers[w].since = "held", self._clock()
        row = self.compass.arrive(w, work, compute, arrived, self._compass_go)
        self._progress()
        if row is not HELD and row is not None:
            self._compass_go(w, row)

    def _compass_go(self, w: int, row: np.ndarray) -> None:
        """Worker `w`'s next task, from `row` (its committed row, or pulled after its group);
        a population's slot chooses its next client (its last one released)."""
        self.rows.array[w] = row
        self._workers[w].state = "working"
        if self.pool is not None:
            self._task(w, pull=False)
        elif not self._stopped_if_done(w, self._clock()):
            self.compass.next_task(w, self._clock())
            self._go(w, pull=False)

    def _progress(self) -> None:
        if self.progress is not None:
            self.progress(self.book.version, self._total())

    def _total(self) -> int:
        budget = self.job.spec.budget
        if isinstance(budget, timing.CommitBudget):
            return budget.commits
        if isinstance(budget, timing.StepsBudget):
            return sum(self.job.spec.commit_quotas(budget))
        return 0


def run_process(job: RealJob, *, progress: Progress | None = None) -> RealRun:
    """Run the job with real worker processes (see the module docstring)."""
    return ProcessBackend(job, progress=progress).run()
