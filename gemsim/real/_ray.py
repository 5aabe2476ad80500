"""`--backend ray` (extra `gemsim[ray]`): the same protocol with actors, for runs across
machines.

The parameter server is an actor holding the `ServerBook`; each worker is an actor (both
classes: gemsim/real/_ray_actors.py) that loops: compute the work on its row, call
`server.commit`, get its next row back. An actor runs one call at a time, in the order the
calls arrive, so the server's mailbox is the FIFO commit queue and every commit is atomic.
Rows and works travel through Ray's object store. Clocks are wall clocks (`time.time`): on
several machines they are only as close as NTP keeps them, which affects the recorded queue
times, not the order of commits.

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

FedCompass (`optimizer.rule: fedcompass`): the server actor runs its scheduler
(`_compass.CompassServer`, as the process backend's server). A worker whose work arrives in its
group's time is answered `("held", seconds)` and asks again (`poll`) every `HELD_POLL_S`, or
at its group's latest time if sooner; each call first aggregates the groups whose latest time
has passed. At a group's aggregation its members' next tasks are prepared, fastest first, and
each is handed over at the member's next call, which counts as its assignment (the moment a
process backend's server sends it). Every task reply carries the task's steps.

Interrupts: the driver waits in `ray.get`/`ray.wait`, which let signal handlers run, so
KeyboardInterrupt (or SIGTERM's `Terminated`, gemsim/app/_signals.py) reaches it within a
poll; the actors are then killed and a Ray instance this run started is shut down. A local
instance is started and stopped through gemsim/_ray_local.py, which keeps the signals as they
were (Ray changes SIGTERM's handling) and abandons a start that a signal interrupts.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress

from gemsim import _ray_local as ray_local
from gemsim import timing
from gemsim.types import Progress

from ._job import RealJob, RealRun
from ._ray_actors import POLL_S, _Server, _Worker
from ._server import WorkerEvent
from ._worker import worker_xla_flags


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
