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

A population (`clients:`): the actors are K slots, never killed on a schedule. The server
actor chooses each task's client (`_clients.ClientPool`, as the process backend does) and
answers a slot's `task` or `commit` with its next task (the client, its first mini-batch, its
speed) or with a wait: a slot that finds no client up sleeps until the calendar's next change,
at most `POLL_S` (a slot asleep in its own actor cannot be woken when a client released
while down brings the wake-up forward), then asks again; woken slots get their clients in the
order they began waiting.

Interrupts: the driver waits in `ray.get`/`ray.wait`, which let signal handlers run, so
KeyboardInterrupt (or SIGTERM's `Terminated`, gemsim/app/_signals.py) reaches it within a
poll; the actors are then killed and a Ray instance this run started is shut down. A local
instance is started and stopped through gemsim/_ray_local.py, which keeps the signals as they
were (Ray changes SIGTERM's handling) and abandons a start that a signal interrupts.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import suppress

import numpy as np

from gemsim import _ray_local as ray_local
from gemsim import timing
from gemsim.types import Progress

from ._clients import ClientPool
from ._compiled import Compiled
from ._job import RealJob, RealRun
from ._server import WorkerEvent, server_book
from ._worker import worker_xla_flags

POLL_S = 0.2


class _Server:
    """The parameter-server actor's class (wrapped with `ray.remote` at run time)."""

    def __init__(self, job: RealJob):
        self.book = server_book(job)
        self.compiled = self.book.compiled
        self.compiled.warm_up()
        population = job.spec.population
        self.pool = None if population is None else ClientPool(population, job.seed, job.n_workers)
        self.assigned: dict[int, int] = {}  # woken waiting slot -> its client, until it asks
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
        """Apply the work; the worker's next `(row, first_step, cycle)`, or None: stop (a
        population's slot: its next `task` reply)."""
        started = self.clock()
        if incarnation != self.incarnation[w] or self.book.done(started):
            return None
        if self.pool is not None:
            return self._commit_task(w, work, compute, sent, started)
        lost = self.book.lost_push(w)
        if lost is not None:  # the network lost it: the worker pulls and goes again
            if not self.book.wants_more(w, self.clock()):
                return None
            return lost.copy(), self.book.first_step(w), self.book.next_cycle(w)
        row = self.book.commit(
            w, work, compute=compute, arrived=sent - self.t0, started=started, clock=self.clock
        )
        if row is None or not self.book.wants_more(w, self.clock()):
            return None
        return row.copy(), self.book.first_step(w), self.book.next_cycle(w)

    # --- a population's slots ----------------------------------------------------------

    def task(self, w: int):
        """A population's slot asks for a task (at its start, after a wait): `("go", row,
        first_step, cycle, client, speed, t0)`, its row pulled anew; `("wait", seconds)`; or
        None: stop (the run is over, or no client can come up)."""
        now = self.clock()
        if not self.book.wants_more(w, now):
            return None
        pool = self.pool
        for slot, c in pool.woken(now):  # in the order they began waiting
            self.assigned[slot] = c
        c = self.assigned.pop(w, None)
        if c is None and w not in pool.waiting:
            c = pool.take(w, now)
        if c is not None:
            return self._go(w, c, self.book.start_task(w))
        if math.isinf(pool.wake_at) and not self.assigned and max(pool.client_of) < 0:
            pool.drop(w, now)  # no slot in a task and no client to come up: nothing will
            return None
        return self._wait(now)

    def _wait(self, now: float) -> tuple[str, float]:
        """Sleep until the calendar's next change, at most POLL_S (see the module docstring)."""
        return ("wait", min(max(self.pool.wake_at - now, 0.0), POLL_S))

    def _commit_task(self, w: int, work, compute: float, sent: float, started: float):
        pool = self.pool
        if pool.lost_by(w, started):  # its client went down: the work is dropped
            pool.release(w, started, committed=False)
            return self.task(w)
        client = pool.client_of[w]
        row = self.book.commit(
            w,
            work,
            compute=compute,
            arrived=sent - self.t0,
            started=started,
            clock=self.clock,
            client=client,
        )
        if row is None:
            return None
        now = self.clock()
        pool.release(w, now, committed=True)  # before the slot chooses again
        if not self.book.wants_more(w, now):
            return None
        c = pool.take(w, now)
        if c is None:
            return self._wait(now)
        return self._go(w, c, row)  # from the committed row: no pull

    def _go(self, w: int, c: int, row):
        first, cycle = self.book.client_first_step(c), self.book.next_cycle(w, c)
        return ("go", row.copy(), first, cycle, c, float(self.pool.speeds[c]), self.t0)

    def progress(self) -> int:
        return self.book.version

    def done(self) -> bool:
        return self.book.done(self.clock())

    def finish(self, events: list[WorkerEvent]):
        self.book.events.extend(events)
        duration = self.clock()
        clients = None if self.pool is None else self.pool.report(duration)
        return self.book.result(), self.book.trace(duration), tuple(self.book.events), clients


class _Worker:
    """A worker actor's class."""

    def __init__(self, w: int, job: RealJob):
        from gemsim.timing import EmulatedCompute

        rule, problem = job.build()
        self.w, self.job = w, job
        self.compiled = Compiled.of(rule, problem, job.n_workers, windows=job.windows)
        row = self.compiled.initial_rows()[w]
        self.compiled.gradient(row, w, 0)  # compile before the clock starts
        self.emulated = EmulatedCompute(job.spec, job.seed, w)

    def ready(self) -> bool:
        return True

    def run(self, server) -> int:
        import ray

        if self.job.population:
            return self._serve_tasks(server)
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

    def _serve_tasks(self, server) -> int:
        """A population's slot: tasks for the clients the server gives it, waits between."""
        import ray

        reply = ray.get(server.task.remote(self.w))
        commits = 0
        while reply is not None:
            if reply[0] == "wait":
                time.sleep(reply[1])
                reply = ray.get(server.task.remote(self.w))
                continue
            _, row, first_step, cycle, client, speed, t0 = reply
            started = time.time()
            work = self.compiled.gradient(row, client, first_step)
            if self.job.emulate_latency:
                # The slot's draw divided by its client's speed factor, as the timing model's.
                target = self.emulated(cycle, started - t0, self.job.task_draws(client)) / speed
                time.sleep(max(0.0, target - (time.time() - started)))
            compute = time.time() - started
            reply = ray.get(server.commit.remote(self.w, 0, work, compute, time.time()))
            commits += 1
        return commits


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
            result, trace, events, clients = ray.get(self.server.finish.remote(self.events))
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
            clients=clients,
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
