"""From a commit trace to an execution plan: what each scan step needs, and where the host
must step in (evaluations, and snapshot fills that are not the committer's own pull).

Snapshot slots: worker w's slot must hold the PS parameters of the version its next commit
was computed on. With pull-at-commit that is the version its own commit creates, written in
the same scan step ("self fill"); with a pull before apply (`server.pull: before_apply`: the
server sends the worker the version it held before applying the worker's gradient) it is the
version its own commit was applied to, also written in that step, with the rule's pull hook
applied to its state as at any plain pull ("pre fill", `fill_pre`). Any other pull (a late
join, a restart, the barrier of a synchronous round) is a "host fill": after the step that
creates version v, the host copies theta into the slots of the workers that pulled v and
applies the rule's pull hook to their state (`rules.pull_state`), with ``fresh`` when the
pull starts a new worker life (the trace's `fresh` column: a join or a restart). A fresh life
is always a host fill, even when it pulls the version its worker's own last commit created.
Version 0 is the initial slot content, which is the state of a fresh life. A trace one slot
per worker cannot replay (a gradient computed on a version older than the one its worker's
previous commit was applied to, or on that one in a new life) is refused with
`UnreplayableTrace`, which names the commit and says why.

A population's trace (slots serving a population's clients: the trace's `client` column,
`gemsim.timing.Population`) has one row per slot, never per client. Its plan keeps the client
of each commit (`client`, the data owner whose batches the gradient reads) and counts each
client's mini-batches in the client's own stream (`first_step`: the client's earlier commits
times `window`), so a client's stream is a pure function of (seed, client, step) whichever
slot runs its tasks. Every task belongs to its own client, so its rule state starts anew: a
self fill gets the fresh state inside the compiled step (`_step.commit_math`, static on the
inputs' `client`), and every host fill is fresh.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gemsim.trace import default_fresh


class UnreplayableTrace(ValueError):
    """A trace the engine cannot execute; the message says which commit and why."""


@dataclass(frozen=True)
class ExecutionPlan:
    """Per-commit scan inputs and the commits after which the host acts."""

    worker: np.ndarray  # int32[K]
    staleness: np.ndarray  # int32[K]
    fill_self: np.ndarray  # bool[K]: the committer's next gradient is taken at version k+1
    # (the engine writes theta into the committer's slot at every commit; where fill_self is
    # False a host fill overwrites it before it is read)
    first_step: (
        np.ndarray
    )  # int32[K]: index of the commit's first mini-batch in its worker's stream
    host_fills: dict[int, np.ndarray]  # commit k -> workers whose slot takes version k+1
    host_fresh: dict[int, np.ndarray]  # commit k -> bool per host-filled worker: a new life
    evals: np.ndarray  # sorted commit indices after which the central variable is evaluated
    n_workers: int
    round_end: np.ndarray  # bool[K]: the protocol closes a round at commit k
    # A population's plan (None for persistent workers): int32[K] (one per commit), the client
    # whose task commit k ends (the data owner its batches come from; `worker` is then the
    # slot), and the population's size N.
    client: np.ndarray | None = None
    n_clients: int | None = None
    # bool[K], or None where no commit has one: the committer's next gradient is taken at
    # version k, the one its commit was applied to (a pull before apply); its row then gets
    # that version and the rule's pull hook instead of theta after the commit.
    fill_pre: np.ndarray | None = None
    # int32[K], or None where every commit holds the rule's window: the mini-batches commit k
    # holds (workers with local steps of their own; the trace's `local_steps` column).
    local_steps: np.ndarray | None = None
    # int32[K], or None but for FedCompass's scheduler: where the server put commit k (the
    # trace's `buffer` column: 0 alone, 1 the general buffer, 2 its group's).
    buffer: np.ndarray | None = None
    # int32[K], or None where a rule keeps every client's row: commit k's row among the rows
    # kept for only the clients the plan names (`client_rows`).
    client_row: np.ndarray | None = None

    @property
    def population(self) -> bool:
        """Whether the plan is a population's: rows are slots, data and rule state by task."""
        return self.client is not None

    def check_data_owners(self, problem) -> None:
        """A population's plan reads the data of clients up to N - 1: refuse a problem that
        says it holds fewer data owners (`Problem.worker_facts`; an index past a JAX array's
        end is clamped, so a problem built for the slots would read another client's data
        without an error). Persistent plans are not checked."""
        if not self.population:
            return
        for name, values in problem.worker_facts().items():
            if name == "eval_owners":  # the sample of owners evaluated, not one per owner
                continue
            if len(values) < self.n_clients:
                raise ValueError(
                    f"the problem holds data for {len(values)} data owners ({name}), the plan's "
                    f"population has {self.n_clients} clients: build the problem with one "
                    f"data owner per client (n_workers={self.n_clients})"
                )

    @cached_property
    def eval_set(self) -> frozenset[int]:
        return frozenset(int(k) for k in self.evals)

    @cached_property
    def pulled_version(self) -> np.ndarray:
        """The version each commit's gradient was computed on."""
        return np.arange(len(self)) - self.staleness

    def truncated(self, stop: int) -> ExecutionPlan:
        """The plan of the first `stop` commits only."""
        return ExecutionPlan(
            worker=self.worker[:stop],
            staleness=self.staleness[:stop],
            fill_self=self.fill_self[:stop],
            first_step=self.first_step[:stop],
            host_fills={k: v for k, v in self.host_fills.items() if k < stop},
            host_fresh={k: v for k, v in self.host_fresh.items() if k < stop},
            evals=self.evals[self.evals < stop],
            n_workers=self.n_workers,
            round_end=self.round_end[:stop],
            client=None if self.client is None else self.client[:stop],
            n_clients=self.n_clients,
            fill_pre=None if self.fill_pre is None else self.fill_pre[:stop],
            local_steps=None if self.local_steps is None else self.local_steps[:stop],
            buffer=None if self.buffer is None else self.buffer[:stop],
            client_row=None if self.client_row is None else self.client_row[:stop],
        )

    def waves(self, start: int, stop: int, max_width: int) -> list[tuple[int, int]]:
        """Split commits [start, stop) into waves [a, b): runs of commits whose gradients can
        all be computed at once because each was taken on a version <= a (its snapshot exists
        when the wave starts) and no worker appears twice (its state is not changed inside)."""
        pulled = self.pulled_version
        out, a = [], start
        while a < stop:
            seen, b = set(), a
            while b < stop and b - a < max_width and pulled[b] <= a:
                w = int(self.worker[b])
                if w in seen:
                    break
                seen.add(w)
                b += 1
            out.append((a, b))
            a = b
        return out

    def __len__(self) -> int:
        return int(self.worker.shape[0])

    def segments(self, max_len: int) -> list[tuple[int, int]]:
        """[start, stop) ranges of commits that run in one compiled loop, split where the host
        acts."""
        return split_at({*self.host_fills, *self.evals.tolist(), len(self) - 1}, max_len)


def split_at(cuts: set[int], max_len: int) -> list[tuple[int, int]]:
    """[start, stop) ranges covering commits 0 to max(cuts), each ending at a cut or earlier,
    none longer than ``max_len``."""
    bounds, start = [], 0
    for k in sorted(cuts):
        stop = k + 1
        while start < stop:
            end = min(stop, start + max_len)
            bounds.append((start, end))
            start = end
    return bounds


def make_plan(
    worker: np.ndarray,
    pulled_version: np.ndarray,
    n_workers: int,
    *,
    window: int = 1,
    eval_every: int | None = None,
    fresh: np.ndarray | None = None,
    round_end: np.ndarray | None = None,
    client: np.ndarray | None = None,
    n_clients: int | None = None,
    local_steps: np.ndarray | None = None,
    dropped: np.ndarray | None = None,
    buffer: np.ndarray | None = None,
) -> ExecutionPlan:
    """Build the plan for a trace given as its `worker` and `pulled_version` columns, and its
    `fresh` and `round_end` flags (None: their defaults, see `gemsim.trace`).

    `local_steps` (None: every commit holds `window` mini-batches): each commit's own count,
    where workers take local steps of their own; a commit's batches then follow the owner's
    earlier commits' in its stream. `dropped` (None: no push was lost): the pushes each
    commit's worker lost since its previous commit; after one it pulled anew (a plain pull,
    with the rule's pull hook), so its next gradient is a host fill even where no other
    commit came between. `buffer` (None but for FedCompass's scheduler): where the server
    put each commit, for the rule (`CommitContext.buffer`).

    A population's trace also gives its `client` column and `n_clients` (N): `worker` is then
    the slot (`n_workers` = K), batches are counted per client and every host fill is fresh
    (see the module docstring)."""
    worker = np.asarray(worker, dtype=np.int64)
    pulled = np.asarray(pulled_version, dtype=np.int64)
    n = len(worker)
    fresh = default_fresh(worker) if fresh is None else np.asarray(fresh, dtype=bool)
    round_end = np.ones(n, dtype=bool) if round_end is None else np.asarray(round_end, bool)
    if len(fresh) != n or len(round_end) != n:
        raise ValueError("fresh and round_end must have one entry per commit")
    commit = np.arange(n)
    if np.any(pulled > commit) or np.any(pulled < 0):
        raise UnreplayableTrace("pulled_version must satisfy 0 <= pulled_version[k] <= k")
    if np.any(worker < 0) or np.any(worker >= n_workers):
        raise UnreplayableTrace(f"worker ids must lie in [0, {n_workers})")
    owner, n_owners = _data_owners(worker, n_workers, client, n_clients)

    population = client is not None
    # Vectorised (a sweep builds one plan per run, and a loop over the commits cost
    # milliseconds per run); it gives what one pass over the commits in order would.
    by_worker = _sorted_runs(worker, n_workers)
    by_owner = _sorted_runs(owner, n_owners) if population else by_worker
    if local_steps is None:
        first_step = _rank_in_run(*by_owner) * window  # the owner's earlier commits, in batches
    else:
        local_steps = np.asarray(local_steps, dtype=np.int64)
        if local_steps.shape != worker.shape or np.any(local_steps < 1):
            raise UnreplayableTrace("local_steps must hold one count >= 1 per commit")
        first_step = _earlier_in_run(local_steps, *by_owner)
    prev = _previous_in_run(*by_worker)  # the worker's previous commit, or -1
    _check_pulls(worker, pulled, prev, fresh, population)
    own = (pulled > 0) & (prev >= 0) & (pulled == prev + 1) & ~fresh
    if dropped is not None:
        own &= np.asarray(dropped, dtype=np.int64) == 0
    fill_self = np.zeros(n, dtype=bool)
    fill_self[prev[own]] = True
    before = (prev >= 0) & (pulled == prev)  # pulled before its previous commit was applied
    fill_pre = None
    if before.any():
        fill_pre = np.zeros(n, dtype=bool)
        fill_pre[prev[before]] = True
    hosted = np.flatnonzero((pulled > 0) & ~own & ~before)
    host_fills, host_fresh = _host_fills(  # a population's task always starts a fresh state
        pulled[hosted] - 1, worker[hosted], fresh[hosted] | population
    )
    evals = _eval_points(n, eval_every)
    return ExecutionPlan(
        worker=worker.astype(np.int32),
        staleness=(commit - pulled).astype(np.int32),
        fill_self=fill_self,
        first_step=first_step.astype(np.int32),
        host_fills=host_fills,
        host_fresh=host_fresh,
        evals=evals,
        n_workers=int(n_workers),
        round_end=round_end,
        client=owner.astype(np.int32) if population else None,
        n_clients=n_owners if population else None,
        fill_pre=fill_pre,
        local_steps=None if local_steps is None else local_steps.astype(np.int32),
        buffer=_buffer_column(buffer, n),
    )


def _buffer_column(buffer: np.ndarray | None, n: int) -> np.ndarray | None:
    if buffer is None:
        return None
    buffer = np.asarray(buffer, dtype=np.int64)
    if buffer.shape != (n,) or np.any((buffer < 0) | (buffer > 2)):
        raise UnreplayableTrace("buffer must hold one of 0, 1, 2 per commit")
    return buffer.astype(np.int32)


def _check_pulls(
    worker: np.ndarray, pulled: np.ndarray, prev: np.ndarray, fresh: np.ndarray, population: bool
) -> None:
    """Refuse pulls one snapshot slot per worker cannot hold (UnreplayableTrace, naming the
    first such commit): a version older than the one the worker's previous commit was applied
    to (the slot was overwritten since), that very version in a new life (a new process
    cannot have pulled before the commit it follows), or any pull before apply in a
    population's trace (a slot's next task is another client's)."""
    older = (prev >= 0) & (pulled < prev)
    before = (prev >= 0) & (pulled == prev)
    bad = np.flatnonzero(older | (before & (fresh | population)))
    if bad.size:
        k = int(bad[0])
        what = "older than the one" if older[k] else "the one"
        where = "" if older[k] else (", in a new life" if fresh[k] else ", in a population")
        raise UnreplayableTrace(
            f"commit {k}: worker {int(worker[k])} computed on version {int(pulled[k])}, "
            f"{what} its previous commit {int(prev[k])} was applied to{where}; one snapshot "
            f"slot per worker cannot replay that"
        )


def _data_owners(
    worker: np.ndarray, n_workers: int, client: np.ndarray | None, n_clients: int | None
) -> tuple[np.ndarray, int]:
    """Whose data each commit reads, and how many data owners there are: the workers
    themselves, or a population's clients."""
    if client is None:
        if n_clients is not None:
            raise ValueError("n_clients is a population's: it needs the client column")
        return worker, int(n_workers)
    if n_clients is None:
        raise ValueError("a client column needs n_clients, the population's size")
    client = np.asarray(client)
    if client.shape != worker.shape or (client.size and client.dtype.kind not in "iu"):
        raise ValueError(
            f"client must be one integer per commit ({worker.size}), got {client.dtype} "
            f"{client.shape}"
        )
    client = client.astype(np.int64)
    if np.any(client < 0) or np.any(client >= n_clients):
        raise ValueError(f"client ids must lie in [0, {n_clients})")
    return client, int(n_clients)


def _sorted_runs(keys: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """A stable argsort of `keys` (integers in [0, bound)), and in that order which entries
    start a run of equal keys. Keys that fit 16 bits are sorted as such (numpy's stable sort
    is then a radix sort, several times faster)."""
    order = np.argsort(keys.astype(np.uint16) if bound <= 1 << 16 else keys, kind="stable")
    ordered = keys[order]
    starts = np.ones(len(keys), dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return order, starts


def _rank_in_run(order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries have its key (`_sorted_runs`' output)."""
    position = np.arange(len(order))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = position - np.maximum.accumulate(np.where(starts, position, 0))
    return rank


def _earlier_in_run(values: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each entry, the sum of `values` over the earlier entries with its key."""
    ordered = values[order]
    total = np.cumsum(ordered) - ordered  # over every earlier entry in key order
    base = np.maximum.accumulate(np.where(starts, total, 0))  # the key's first entry's
    earlier = np.empty(len(order), dtype=np.int64)
    earlier[order] = total - base
    return earlier


def _previous_in_run(order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each entry, the index of the latest earlier entry with its key, or -1."""
    previous = np.empty(len(order), dtype=np.int64)
    previous[order] = np.where(starts, -1, np.roll(order, 1))
    return previous


def _host_fills(
    after: np.ndarray, worker: np.ndarray, fresh: np.ndarray
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """The host fills of pulls given in commit order: the commit each pull follows (`after`),
    the worker and its `fresh` flag. Keys come in the order of their first pull, and each
    key's workers in commit order (slices of one array: the executors only read them)."""
    order, starts = _sorted_runs(after, int(after.max(initial=-1)) + 1)
    first = np.flatnonzero(starts)
    by_first_pull = np.argsort(order[first])
    keys = after[order[first]][by_first_pull].tolist()
    begin = first[by_first_pull].tolist()
    end = np.append(first[1:], len(order))[by_first_pull].tolist()
    workers, flags = worker[order].astype(np.int32), fresh[order]
    runs = list(zip(keys, begin, end, strict=True))
    return {k: workers[i:j] for k, i, j in runs}, {k: flags[i:j] for k, i, j in runs}


def _eval_points(n: int, every: int | None) -> np.ndarray:
    if n == 0 or every is None:
        return np.zeros(0, dtype=np.int64)
    points = np.arange(every - 1, n, every)
    if points.size == 0 or points[-1] != n - 1:
        points = np.append(points, n - 1)
    return points


def eval_points_in_time(times: np.ndarray, every_seconds: float) -> np.ndarray:
    """The commits after which to evaluate every `every_seconds` of virtual time: for each
    multiple t of it up to the last commit's time, the last commit made by t (the central
    variable as it stood at t; none where no commit was made yet), and the last commit."""
    times = np.asarray(times, dtype=np.float64)
    if times.size == 0:
        return np.zeros(0, dtype=np.int64)
    marks = every_seconds * np.arange(1, int(times[-1] // every_seconds) + 1)
    points = np.searchsorted(times, marks, side="right") - 1
    points = np.unique(np.append(points[points >= 0], times.size - 1))
    return points.astype(np.int64)


def plan_of(
    trace,
    *,
    window: int = 1,
    eval_every: int | None = None,
    eval_every_seconds: float | None = None,
) -> ExecutionPlan:
    """The plan of a `CommitTrace` (its columns and flags, and a population's client column),
    evaluating every `eval_every` commits or every `eval_every_seconds` of its virtual time."""
    plan = make_plan(
        trace.worker,
        trace.pulled_version,
        trace.n_workers,
        window=window,
        eval_every=eval_every,
        fresh=trace.fresh,
        round_end=trace.round_end,
        client=getattr(trace, "client", None),
        n_clients=getattr(trace, "n_clients", None),
        local_steps=getattr(trace, "local_steps", None),
        dropped=getattr(trace, "dropped", None),
        buffer=getattr(trace, "buffer", None),
    )
    if eval_every_seconds is None:
        return plan
    return dataclasses.replace(plan, evals=eval_points_in_time(trace.time, eval_every_seconds))


def client_rows(plan: ExecutionPlan) -> tuple[ExecutionPlan, int]:
    """The plan with each commit's row among the clients it names (`client_row`: clients
    numbered in the order of their first commit), and how many it names. A rule with
    per-client state then needs only that many rows (`rules.with_clients` ``rows``): a client
    that never commits has its row never read. Persistent workers' plans name each worker."""
    owners = plan.worker if plan.client is None else plan.client
    named, first, inverse = np.unique(owners, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # first-commit order, whatever the ids
    rank = np.empty(named.size, np.int32)
    rank[order] = np.arange(named.size, dtype=np.int32)
    return dataclasses.replace(plan, client_row=rank[inverse]), int(named.size)


def kept_rows(named: int, n_clients: int) -> int:
    """The rows a simulator keeps for ``named`` clients of ``n_clients``: the next power of
    two (at least 64), so that runs whose traces name a few clients more or fewer share one
    compiled program; every client's where that is not fewer."""
    return min(int(n_clients), max(64, 1 << max(int(named) - 1, 0).bit_length()))
