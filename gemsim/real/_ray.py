"""`--backend ray` (extra `gemsim[ray]`): the same protocol with actors, for runs across
machines.

The parameter server is an actor holding the `ServerBook`; each worker is an actor that
loops: compute the work on its row, call `server.commit`, get its next row back. An actor
runs one call at a time, in the order the calls arrive, so the server's mailbox is the FIFO
commit queue and every commit is atomic. Rows and works travel through Ray's object store.
Clocks are wall clocks (`time.time`): on several machines they are only as close as NTP
keeps them, which affects the recorded queue times, not the order of commits.

A worker killed by a scheduled down (failures, churn, an availability trace:
`timing.life_events`) is replaced by a new actor when the down interval ends;
each (re)start is a new incarnation at the server, which ignores commits still in flight
from an older one. An actor that dies by itself is recorded and the run goes on.

Interrupts: the driver waits in `ray.get`/`ray.wait`, which let signal handlers run, so
KeyboardInterrupt (or SIGTERM's `Terminated`, gemsim/app/_signals.py) reaches it within a
poll; the actors are then killed and a Ray instance this run started is shut down. `ray.init`
and `ray.shutdown` change SIGTERM's handling, and a Ctrl-C during `ray.init` can abort it:
both are started and stopped through gemsim/_ray_local.py, which keeps the signals as they were.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress

import numpy as np

from gemsim import _ray_local as ray_local
from gemsim import timing
from gemsim.types import Progress

from ._compiled import Compiled
from ._job import RealJob, RealRun
from ._server import ServerBook, WorkerEvent
from ._worker import worker_xla_flags

POLL_S = 0.2


class _Server:
    """The parameter-server actor's class (wrapped with `ray.remote` at run time)."""

    def __init__(self, job: RealJob):
        rule, problem = job.build()
        self.compiled = Compiled.of(rule, problem, job.n_workers)
        self.compiled.warm_up()
        self.book = ServerBook(self.compiled, job.spec.budget)
        self.incarnation = np.zeros(job.n_workers, np.int64)
        self.t0 = time.time()

    def start_clock(self) -> float:
        self.t0 = time.time()
        return self.t0

    def clock(self) -> float:
        return time.time() - self.t0

    def pull(self, w: int):
        """A (re)started worker's first row: the central variable of now, and its
        incarnation; None when the run is over, or the worker's steps are all committed."""
        if not self.book.wants_more(w, self.clock()):
            return None
        self.incarnation[w] += 1
        row = self.book.pull(w).copy()
        first, cycle = self.book.first_step(w), self.book.next_cycle(w)
        return row, first, cycle, int(self.incarnation[w]), self.t0

    def forget(self, w: int) -> None:
        """The worker was killed: commits still in flight from it are void."""
        self.incarnation[w] += 1

    def commit(self, w: int, incarnation: int, work, compute: float, sent: float):
        """Apply the work; the worker's next `(row, first_step, cycle)`, or None: stop."""
        started = self.clock()
        if incarnation != self.incarnation[w] or self.book.done(started):
            return None
        row = self.book.commit(
            w, work, compute=compute, arrived=sent - self.t0, started=started, clock=self.clock
        )
        if row is None or not self.book.wants_more(w, self.clock()):
            return None
        return row.copy(), self.book.first_step(w), self.book.next_cycle(w)

    def progress(self) -> int:
        return self.book.version

    def done(self) -> bool:
        return self.book.done(self.clock())

    def finish(self, events: list[WorkerEvent]):
        self.book.events.extend(events)
        duration = self.clock()
        return self.book.result(), self.book.trace(duration), tuple(self.book.events)


class _Worker:
    """A worker actor's class."""

    def __init__(self, w: int, job: RealJob):
        from gemsim.timing import EmulatedCompute

        rule, problem = job.build()
        self.w, self.job = w, job
        self.compiled = Compiled.of(rule, problem, job.n_workers)
        row = self.compiled.initial_rows()[w]
        self.compiled.gradient(row, w, 0)  # compile before the clock starts
        self.emulated = EmulatedCompute(job.spec, job.seed, w)

    def ready(self) -> bool:
        return True

    def run(self, server) -> int:
        import ray

        start = ray.get(server.pull.remote(self.w))
        if start is None:
            return 0
        row, first_step, cycle, incarnation, t0 = start
        commits = 0
        while True:
            started = time.time()
            work = self.compiled.gradient(row, self.w, first_step)
            if self.job.emulate_latency:
                # The timing model's draw, stretched by slowdowns at this moment of the run.
                target = self.emulated(cycle, started - t0)
                time.sleep(max(0.0, target - (time.time() - started)))
            compute = time.time() - started
            reply = ray.get(server.commit.remote(self.w, incarnation, work, compute, time.time()))
            commits += 1
            if reply is None:
                return commits
            row, first_step, cycle = reply


def run_ray(job: RealJob, *, progress: Progress | None = None, address: str | None = None):
    """Run the job with Ray actors; a local Ray instance is started unless `address` names
    a running cluster."""
    try:
        import ray
    except ImportError:  # pragma: no cover - depends on the extra
        raise RuntimeError("the ray backend needs the extra: pip install 'gemsim[ray]'") from None

    if address is None:
        init = {"num_cpus": job.n_workers + 1, "include_dashboard": False}
    else:
        init = {"address": address}
    with ray_local.running(ray, log_to_driver=False, **init):  # signals kept as they were
        return _Driver(job, ray, progress).run()


class _Driver:
    """Starts the actors, fires the scheduled failures and restarts, watches for deaths."""

    def __init__(self, job: RealJob, ray, progress: Progress | None):
        self.job, self.ray, self.progress = job, ray, progress
        options = {"runtime_env": {"env_vars": {"XLA_FLAGS": worker_xla_flags(os.environ)}}}
        self.Server = ray.remote(_Server)
        self.Worker = ray.remote(**options)(_Worker)
        self.events: list[WorkerEvent] = []

    def run(self) -> RealRun:
        ray, job = self.ray, self.job
        wall = time.perf_counter()
        self.server = self.Server.remote(job)
        self.actors = {w: self.Worker.remote(w, job) for w in range(job.n_workers)}
        try:
            ray.get(
                [a.ready.remote() for a in self.actors.values()] + [self.server.progress.remote()]
            )
            self._loop(ray.get(self.server.start_clock.remote()))
            result, trace, events = ray.get(self.server.finish.remote(self.events))
        finally:
            for actor in [*self.actors.values(), self.server]:
                if actor is not None:
                    with suppress(Exception):  # already dead, or the cluster is going away
                        ray.kill(actor)
        return RealRun(
            result=result,
            trace=trace,
            events=events,
            backend="ray",
            wall_seconds=time.perf_counter() - wall,
        )

    def _loop(self, t0: float) -> None:
        """Fire the schedule and watch the workers' `run` calls until all have returned."""
        ray, job, actors = self.ray, self.job, self.actors
        lives = self._schedule()
        upcoming = next(lives, None)
        running = {}  # ObjectRef of a worker's run() -> worker id
        killed_by_us: set[int] = set()
        ever = timing.ever_up(job.spec, job.seed)
        coming = {w for w in actors if ever[w]}  # workers due to (re)start
        while True:
            now = time.time() - t0
            while upcoming is not None and upcoming.time <= now:
                w, kind = upcoming.worker, upcoming.kind
                upcoming = next(lives, None)
                if kind == "join":
                    coming.discard(w)
                    running[actors[w].run.remote(self.server)] = w
                elif kind in ("down", "gone"):
                    if actors.get(w) is not None:
                        ray.kill(actors[w])
                        killed_by_us.add(w)
                        self.server.forget.remote(w)
                        self.events.append(WorkerEvent(now, w, "killed", "scheduled down"))
                    actors[w] = None
                    if kind == "down" and not ray.get(self.server.done.remote()):
                        # The new actor starts up while the worker is down.
                        actors[w] = self.Worker.remote(w, job)
                        coming.add(w)
                elif kind == "up" and actors.get(w) is not None and w in coming:
                    coming.discard(w)
                    ray.get(actors[w].ready.remote())
                    running[actors[w].run.remote(self.server)] = w
                    restarted = time.time() - t0
                    self.events.append(WorkerEvent(restarted, w, "restarted"))
            if self.progress is not None:
                self.progress(ray.get(self.server.progress.remote()), self._total())
            if not running and (not coming or ray.get(self.server.done.remote())):
                return
            if running:
                done, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
                for ref in done:
                    w = running.pop(ref)
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayActorError as exc:
                        if w in killed_by_us:
                            killed_by_us.discard(w)
                        else:
                            self.events.append(
                                WorkerEvent(time.time() - t0, w, "died", type(exc).__name__)
                            )
            else:
                time.sleep(POLL_S)

    def _schedule(self):
        """Each worker's join, downs and comings back (`timing.life_events`), lazily."""
        spec = self.job.spec
        budget = spec.budget
        until = budget.seconds if isinstance(budget, timing.SecondsBudget) else float("inf")
        return timing.life_events(spec, self.job.seed, until=until)

    def _total(self) -> int:
        budget = self.job.spec.budget
        if isinstance(budget, timing.CommitBudget):
            return budget.commits
        return 0
