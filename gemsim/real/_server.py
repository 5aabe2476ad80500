"""The parameter server's bookkeeping, shared by every real backend.

The backends move messages and bytes; this class decides what a commit means: it applies
the work with the engine's commit, records the trace row (order, pulled version, measured
times), tracks each worker's mini-batch counter and pulled version, and says when the
budget is spent. Commits are applied one at a time, in the order the backend serves them.

A population's run (`n_clients` given: the workers are K slots serving N clients) also records
each commit's client, counts mini-batches per client (a client's stream goes on whichever slot
runs its next task) and commits with a fresh rule state in the committed row (`Compiled`).

Under FedCompass's scheduler (`compass`: `gemsim.real._compass`) each task holds the steps
the server gave it: a worker's stream goes on from its committed steps, and the trace records
each commit's steps, its buffer and whether it closed a group (`local_steps`, `buffer`,
`round_end`).

Under `server.pull: before_apply` (`timing.PullAt.BEFORE_APPLY`) the committing worker's new
row holds the version its commit was applied to, and the trace records that version as the
one its next gradient is computed on, as the timing model does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import jax
import numpy as np

from gemsim import timing
from gemsim.engine import EngineResult, MetricsRecorder, final_evaluation
from gemsim.types import Status

from ._compiled import Compiled

if TYPE_CHECKING:
    from ._job import RealJob


@dataclass(frozen=True)
class WorkerEvent:
    """Something that happened to a worker process: `joined`, `killed` (a scheduled
    failure), `died` (unexpectedly), `restarted`."""

    time: float
    worker: int
    event: str
    detail: str = ""


@dataclass
class _Columns:
    time: list[float] = field(default_factory=list)
    worker: list[int] = field(default_factory=list)
    pulled: list[int] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    service: list[float] = field(default_factory=list)
    fresh: list[bool] = field(default_factory=list)
    client: list[int] = field(default_factory=list)  # a population's only
    dropped: list[int] = field(default_factory=list)  # with lost pushes only
    steps: list[int] = field(default_factory=list)  # FedCompass's only: the three columns
    buffer: list[int] = field(default_factory=list)
    round_end: list[bool] = field(default_factory=list)


class ServerBook:
    """The central variable, the rule's server state, and the record of a real run."""

    def __init__(
        self,
        compiled: Compiled,
        budget: timing.Budget,
        n_clients: int | None = None,
        *,
        drops: list | None = None,
        draws: Callable[[int], int] | None = None,
    ):
        if (n_clients is not None) != compiled.population:
            raise ValueError("a population's book needs a population's Compiled, and back")
        self.compiled = compiled
        self.budget = budget
        self.n_clients = n_clients
        self.client_commits = np.zeros(n_clients or 0, np.int64)  # committed tasks per client
        self.client_steps = np.zeros(n_clients or 0, np.int64)  # their mini-batches (FedCompass)
        n = compiled.n_workers
        self.carry = compiled.initial_carry()
        self.rows = compiled.initial_rows()  # the rows workers read (copied into shared memory)
        # A population's slot rows as of their last commit: the engine's rows, which never see
        # the pull of a task that was lost (its plan holds committed tasks only).
        self.committed_rows = self.rows.copy() if n_clients is not None else None
        self.pulled = np.zeros(n, np.int64)  # version each worker's snapshot holds
        self.commits_of = np.zeros(n, np.int64)
        self.steps_of = np.zeros(n, np.int64)  # committed mini-batches (FedCompass's tasks)
        self.cycles_of = np.zeros(n, np.int64)  # compute draws asked for, lost ones included
        # A task's draws, given its FedCompass steps if any (`RealJob.task_draws`).
        self.draws = draws or (lambda owner, steps=None: 1 if steps is None else steps)
        self.new_life = np.ones(n, bool)  # the worker's next commit is the first of its life
        self.events: list[WorkerEvent] = []
        self.diverged_at: int | None = None
        self._cols = _Columns()
        self._outputs: list = []
        self._busy = 0.0
        # Lost pushes: each worker's draws (`timing.drop_draw`, the timing model's), the
        # pushes it lost since its last commit, and the row of that commit (a pull after a
        # loss starts from it, as the engine's host fill does).
        self.drops = drops
        self.pending_drops = np.zeros(n, np.int64)
        self._committed_row: dict[int, np.ndarray] = {}

    # --- the protocol ------------------------------------------------------------------

    @property
    def version(self) -> int:
        return len(self._cols.worker)

    def first_step(self, worker: int) -> int:
        """The worker's next mini-batch in its stream (committed batches only, as the
        engine counts them: work lost in a crash is computed again)."""
        if self.compiled.buffered:  # each task its own steps
            return int(self.steps_of[worker])
        return int(self.commits_of[worker]) * self.compiled.window_of(worker)

    def client_first_step(self, client: int) -> int:
        """A population's client's next mini-batch in its own stream: its committed tasks
        times the window, as the engine's plan counts them (a lost task is computed again);
        under FedCompass, its committed tasks' steps."""
        if self.compiled.buffered:
            return int(self.client_steps[client])
        return int(self.client_commits[client]) * self.compiled.window_of(client)

    def next_cycle(self, worker: int, owner: int | None = None, steps: int | None = None) -> int:
        """The index of the compute draw the worker's computation for `owner` (a population's
        client; else the worker) starts at, over all its lives, the ones lost to a kill
        included: the timing model draws a compute time for each (one per mini-batch where
        clients take their own local steps, or a FedCompass task's `steps`), so
        `timing.EmulatedCompute` takes the draws from `cycle` on as the simulator does after
        a loss."""
        cycle = int(self.cycles_of[worker])
        self.cycles_of[worker] += self.draws(worker if owner is None else owner, steps)
        return cycle

    def lost_push(self, worker: int) -> np.ndarray | None:
        """Whether the network loses the push of `worker` now reaching the server (its next
        draw): the work is then discarded, and the worker pulls the current version from the
        row of its last commit and computes again; returns that row, else None."""
        if self.drops is None or not self.drops[worker]():
            return None
        # The row of the worker's last commit, or of its life's start; a life that has not
        # committed yet pulls fresh, as the engine's host fill of a fresh commit does.
        committed = self._committed_row.setdefault(worker, self.rows[worker].copy())
        fresh = bool(self.new_life[worker])
        self.rows[worker] = self.compiled.pulled_row(self.carry, committed, fresh=fresh)
        self.pulled[worker] = self.version
        self.pending_drops[worker] += 1
        return self.rows[worker]

    def wants_more(self, worker: int, now: float) -> bool:
        """Whether the worker should compute another commit."""
        if self.done(now):
            return False
        if isinstance(self.budget, timing.StepsBudget):
            window = self.compiled.window_of(worker)
            return self.commits_of[worker] < math.ceil(self.budget.steps_per_worker / window)
        return True

    def done(self, now: float) -> bool:
        if self.diverged_at is not None:
            return True
        if isinstance(self.budget, timing.CommitBudget):
            return self.version >= self.budget.commits
        if isinstance(self.budget, timing.SecondsBudget):
            return now >= self.budget.seconds
        return False  # a steps budget ends when every worker has stopped

    def pull_now(self, worker: int) -> np.ndarray:
        """The worker pulls the version of this moment other than at its own commit (a
        FedCompass group's member once the group is aggregated); returns its row."""
        self.rows[worker] = self.compiled.pulled_row(self.carry, self.rows[worker], fresh=False)
        self.pulled[worker] = self.version
        return self.rows[worker]

    def pull(self, worker: int) -> np.ndarray:
        """A new worker process (a late join or a restart) pulls the version of this moment:
        its row gets theta as snapshot and the rule's fresh-pull state; returns the row."""
        self.rows[worker] = self.compiled.pulled_row(self.carry, self.rows[worker], fresh=True)
        self.pulled[worker] = self.version
        self.new_life[worker] = True
        self._committed_row.pop(worker, None)  # a lost push of this life starts from here
        return self.rows[worker]

    def start_task(self, slot: int) -> np.ndarray:
        """A population's slot starts a task other than at its own commit (after a loss or a
        wait): it pulls the version of this moment with a fresh rule state, as the engine's
        host fills of a population do, from the row of the slot's last commit (a lost task's
        pull is not the engine's); returns its row. Version 0 is the initial row (the engine
        fills nothing for it)."""
        base = self.committed_rows[slot]
        if self.version > 0:
            self.rows[slot] = self.compiled.pulled_row(self.carry, base, fresh=True)
        else:
            self.rows[slot] = base
        self.pulled[slot] = self.version
        self.new_life[slot] = True
        return self.rows[slot]

    def commit(
        self,
        worker: int,
        work: np.ndarray,
        *,
        compute: float,
        arrived: float,
        started: float,
        clock,
        client: int | None = None,
        steps: int | None = None,
        buffer: int = 0,
        round_end: bool = True,
    ) -> np.ndarray | None:
        """Apply a worker's work atomically; returns its new row, or None if the commit was
        non-finite (the run then stops: the central variable stays the last finite one).
        Times are seconds since the run started; `clock()` reads that clock. A population's
        commit names the client whose task it ends; FedCompass's, its task's `steps`, its
        `buffer` and whether it closes a group (`round_end`)."""
        if (client is not None) != self.compiled.population:
            raise ValueError("a population's commit names its client, and only a population's")
        k = self.version
        staleness = k - int(self.pulled[worker])
        owner = worker if client is None else client
        # The carry is donated to the commit, which returns the one before it where it was
        # non-finite: the server keeps its last finite state either way.
        carry, out, row = self.compiled.commit(
            self.carry, k, staleness, work, owner, buffer=buffer, round_end=round_end
        )
        self.carry = carry
        finished = clock()
        c = self._cols
        c.time.append(finished)
        c.worker.append(worker)
        c.pulled.append(int(self.pulled[worker]))
        c.compute.append(compute)
        c.queue.append(max(0.0, started - arrived))
        c.service.append(finished - started)
        c.fresh.append(bool(self.new_life[worker]))
        if self.drops is not None:
            c.dropped.append(int(self.pending_drops[worker]))
            self.pending_drops[worker] = 0
            self._committed_row.pop(worker, None)
        if client is not None:
            c.client.append(client)
        if self.compiled.buffered:
            c.steps.append(int(steps))
            c.buffer.append(buffer)
            c.round_end.append(round_end)
        self.new_life[worker] = False
        self._busy += finished - started
        self._outputs.append(out)
        if not bool(out.finite):
            self.diverged_at = k
            return None
        self.rows[worker] = row
        self.pulled[worker] = k if self.compiled.pull_before_apply else k + 1
        self.commits_of[worker] += 1
        if steps is not None:
            self.steps_of[worker] += steps
        if client is not None:
            self.client_commits[client] += 1
            if steps is not None:
                self.client_steps[client] += steps
            self.committed_rows[worker] = row
        return row

    # --- the record --------------------------------------------------------------------

    def trace(self, duration: float) -> timing.CommitTrace:
        c = self._cols
        n = len(c.worker)
        pulled = np.asarray(c.pulled, np.int64)
        commit = np.arange(n, dtype=np.int64)
        return timing.CommitTrace(
            commit=commit,
            time=np.asarray(c.time, float),
            worker=np.asarray(c.worker, np.int64),
            pulled_version=pulled,
            staleness=commit - pulled,
            compute_time=np.asarray(c.compute, float),
            queue_time=np.asarray(c.queue, float),
            service_time=np.asarray(c.service, float),
            n_workers=self.compiled.n_workers,
            duration=max(duration, c.time[-1] if n else 0.0),
            busy_time=self._busy,
            fresh=np.asarray(c.fresh, bool),
            client=None if self.n_clients is None else np.asarray(c.client, np.int64),
            n_clients=self.n_clients,
            local_steps=self._local_steps(),
            dropped=None if self.drops is None else np.asarray(c.dropped, np.int64),
            round_end=np.asarray(c.round_end, bool) if self.compiled.buffered else None,
            buffer=np.asarray(c.buffer, np.int64) if self.compiled.buffered else None,
        )

    def _local_steps(self) -> np.ndarray | None:
        """Each commit's mini-batches where workers hold windows of their own, or
        FedCompass's tasks their steps (else None)."""
        if self.compiled.buffered:
            return np.asarray(self._cols.steps, np.int64)
        windows = self.compiled.windows
        if windows is None:
            return None
        owners = self._cols.worker if self.n_clients is None else self._cols.client
        return np.asarray(windows, np.int64)[np.asarray(owners, np.int64)]

    def result(self) -> EngineResult:
        """The run as the engine reports one (final evaluation of the last finite theta)."""
        recorder = MetricsRecorder()
        if self._outputs:
            recorder.add(jax.tree.map(lambda *xs: np.stack(xs), *self._outputs))
        problem, theta = self.compiled.problem, self.carry.theta
        final, workers = final_evaluation(problem, theta)
        diverged = self.diverged_at is not None
        return EngineResult(
            params=jax.device_get(theta),
            status=Status.DIVERGED if diverged else Status.OK,
            n_commits=self.diverged_at if diverged else self.version,
            diverged_at=self.diverged_at,
            metrics=recorder.columns(),
            evals={},
            final=final,
            server_state=jax.device_get(self.carry.server),
            final_workers=workers,
            worker_facts=problem.worker_facts(),
        )


def server_book(job: RealJob) -> ServerBook:
    """The server's rule, problem, compiled functions and book for `job` (built in the
    server's own process or actor): a population's book counts its clients."""
    rule, problem = job.build()
    before = job.spec.pull_at is timing.PullAt.BEFORE_APPLY
    compiled = Compiled.of(
        rule,
        problem,
        job.n_workers,
        population=job.population,
        pull_before_apply=before,
        windows=job.windows,
        buffered=job.compass is not None,
    )
    population = job.spec.population
    n_clients = None if population is None else population.n_clients
    p = job.spec.drop_push
    drops = [timing.drop_draw(job.seed, w, p) for w in range(job.n_workers)] if p > 0 else None
    return ServerBook(compiled, job.spec.budget, n_clients, drops=drops, draws=job.task_draws)
