"""The actors of `--backend ray`: the parameter server's (`_Server`) and a worker's
(`_Worker`), wrapped with `ray.remote` at run time by the driver (gemsim/real/_ray.py, whose
docstring tells the protocol).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ._clients import ClientPool
from ._compass import HELD, CompassServer
from ._compiled import Compiled
from ._job import RealJob
from ._server import WorkerEvent, server_book

POLL_S = 0.2
HELD_POLL_S = 0.005  # a held FedCompass member's polls: its next task is handed over this late


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
        self.compass = None
        if job.compass is not None:
            self.compass = CompassServer(job.compass, self.book, self.pool, self.clock)
        self.prepared: dict[int, tuple | None] = {}  # a held member's next reply, once ready
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
        steps = None if self.compass is None else self.compass.steps[w]
        first, cycle = self.book.first_step(w), self.book.next_cycle(w, steps=steps)
        return row, first, cycle, steps, int(self.incarnation[w]), self.t0

    def forget(self, w: int) -> None:
        """The worker was killed: commits still in flight from it are void."""
        self.incarnation[w] += 1

    def commit(self, w: int, incarnation: int, work, compute: float, sent: float):
        """Apply the work; the worker's next `(row, first_step, cycle, steps)` (steps:
        FedCompass's, else None), or None: stop (a population's slot: its next `task`
        reply; a FedCompass group member's work held: `("held", seconds)`)."""
        started = self.clock()
        if incarnation != self.incarnation[w] or self.book.done(started):
            return None
        if self.compass is not None:
            return self._compass_arrival(w, work, compute, sent - self.t0)
        if self.pool is not None:
            return self._commit_task(w, work, compute, sent, started)
        lost = self.book.lost_push(w)
        if lost is not None:  # the network lost it: the worker pulls and goes again
            if not self.book.wants_more(w, self.clock()):
                return None
            return lost.copy(), self.book.first_step(w), self.book.next_cycle(w), None
        row = self.book.commit(
            w, work, compute=compute, arrived=sent - self.t0, started=started, clock=self.clock
        )
        if row is None or not self.book.wants_more(w, self.clock()):
            return None
        return row.copy(), self.book.first_step(w), self.book.next_cycle(w), None

    # --- FedCompass's groups -------------------------------------------------------------

    def poll(self, w: int):
        """A held group member asks for its next task: the reply its commit would have had,
        or `("held", seconds)` again."""
        now = self.clock()
        self.compass.aggregate_due(now, self._prepare)
        if self.book.done(now):
            return None
        if w not in self.prepared:
            return self._held(now)
        reply = self.prepared.pop(w)
        if reply is not None and not _is_a(reply, "wait"):
            self.compass.assigned[w] = self.clock()  # handed over now: its assignment
        return reply

    def _held(self, now: float) -> tuple[str, float]:
        return (HELD, min(max(self.compass.next_timer() - now, 0.0), HELD_POLL_S))

    def _compass_arrival(self, w: int, work, compute: float, arrived: float):
        """A work arrives (at its send time): committed now and the worker's next task
        replied, or held for its group (`("held", seconds)`, or its next task if the group
        was aggregated now)."""
        row = self.compass.arrive(w, np.asarray(work), compute, arrived, self._prepare)
        if row is HELD:
            return self.poll(w)
        return None if row is None else self._compass_next(w, row)

    def _prepare(self, w: int, row) -> None:
        """A group member's next task, from its pulled row, for its next call (`poll`)."""
        self.prepared[w] = self._compass_next(w, row)

    def _compass_next(self, w: int, row):
        """Worker `w`'s next task from `row` (its committed or pulled row), or None: stop;
        a population's slot chooses its next client (a wait if none is free)."""
        now = self.clock()
        if not self.book.wants_more(w, now):
            return None
        if self.pool is None:
            steps = self.compass.next_task(w, now)
            return row.copy(), self.book.first_step(w), self.book.next_cycle(w, steps=steps), steps
        c = self.pool.take(w, now)
        return self._wait(now) if c is None else self._go(w, c, row)

    # --- a population's slots ----------------------------------------------------------

    def task(self, w: int):
        """A population's slot asks for a task (at its start, after a wait): `("go", row,
        first_step, cycle, client, speed, t0, steps)` (steps: FedCompass's, else None), its
        row pulled anew; `("wait", seconds)`; or None: stop (the run is over, or no client can
        come up)."""
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
        steps = None
        if self.compass is not None:  # the client's task, from the client's own estimate
            self.compass.who[w] = c
            steps = self.compass.next_task(w, self.clock())
        first, cycle = self.book.client_first_step(c), self.book.next_cycle(w, c, steps)
        return ("go", row.copy(), first, cycle, c, float(self.pool.speeds[c]), self.t0, steps)

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
        buffered = job.compass is not None
        self.compiled = Compiled.of(
            rule, problem, job.n_workers, windows=job.windows, buffered=buffered
        )
        row = self.compiled.initial_rows()[w]
        # Compiled before the clock starts (a task's steps are a run-time value).
        self.compiled.gradient(row, w, 0, 1 if buffered else None)
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
        row, first_step, cycle, steps, incarnation, t0 = start
        commits = 0
        while True:
            started = time.time()
            work = self.compiled.gradient(row, self.w, first_step, steps)
            if self.job.emulate_latency:
                # The timing model's draw, stretched by slowdowns at this moment of the run
                # (FedCompass's task: one draw a step).
                target = self.emulated(cycle, started - t0, self.job.task_draws(self.w, steps))
                time.sleep(max(0.0, target - (time.time() - started)))
            compute = time.time() - started
            reply = ray.get(server.commit.remote(self.w, incarnation, work, compute, time.time()))
            commits += 1
            reply = _held_until_ready(ray, server, self.w, reply)
            if reply is None:
                return commits
            row, first_step, cycle, steps = reply

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
            _, row, first_step, cycle, client, speed, t0, steps = reply
            started = time.time()
            work = self.compiled.gradient(row, client, first_step, steps)
            if self.job.emulate_latency:
                # The slot's draw divided by its client's speed factor, as the timing model's.
                target = self.emulated(cycle, started - t0, self.job.task_draws(client, steps))
                target /= speed
                time.sleep(max(0.0, target - (time.time() - started)))
            compute = time.time() - started
            reply = ray.get(server.commit.remote(self.w, 0, work, compute, time.time()))
            reply = _held_until_ready(ray, server, self.w, reply)
            commits += 1
        return commits


def _is_a(reply: tuple, kind: str) -> bool:
    """Whether a reply is `(kind, ...)` (a persistent worker's task reply starts with its row)."""
    return isinstance(reply[0], str) and reply[0] == kind


def _held_until_ready(ray, server, w: int, reply):
    """The reply once it is no longer `("held", seconds)` (a FedCompass group member waits
    for its group's aggregation, asking again)."""
    while reply is not None and _is_a(reply, HELD):
        time.sleep(reply[1])
        reply = ray.get(server.poll.remote(w))
    return reply
