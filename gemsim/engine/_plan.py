"""From a commit trace to an execution plan: what each scan step needs, and where the host
must step in (evaluations, and snapshot fills that are not the committer's own pull).

Snapshot slots: worker w's slot must hold the PS parameters of the version its next commit
was computed on. With pull-at-commit that is the version its own commit creates, written in
the same scan step ("self fill"). Any other pull (a late join, a restart, the barrier of a
synchronous round) is a "host fill": after the step that creates version v, the host copies
theta into the slots of the workers that pulled v and applies the rule's pull hook to their
state (`rules.pull_state`), with ``fresh`` when the pull starts a new worker life (the
trace's `fresh` column: a join or a restart). A fresh life is always a host fill, even when
it pulls the version its worker's own last commit created. Version 0 is the initial slot
content, which is the state of a fresh life.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gemsim.trace import default_fresh


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
) -> ExecutionPlan:
    """Build the plan for a trace given as its `worker` and `pulled_version` columns, and its
    `fresh` and `round_end` flags (None: their defaults, see `gemsim.trace`)."""
    worker = np.asarray(worker, dtype=np.int64)
    pulled = np.asarray(pulled_version, dtype=np.int64)
    n = len(worker)
    fresh = default_fresh(worker) if fresh is None else np.asarray(fresh, dtype=bool)
    round_end = np.ones(n, dtype=bool) if round_end is None else np.asarray(round_end, bool)
    if len(fresh) != n or len(round_end) != n:
        raise ValueError("fresh and round_end must have one entry per commit")
    commit = np.arange(n)
    if np.any(pulled > commit) or np.any(pulled < 0):
        raise ValueError("pulled_version must satisfy 0 <= pulled_version[k] <= k")
    if np.any(worker < 0) or np.any(worker >= n_workers):
        raise ValueError(f"worker ids must lie in [0, {n_workers})")

    fill_self = np.zeros(n, dtype=bool)
    host: dict[int, list[tuple[int, bool]]] = {}
    last_commit = np.full(n_workers, -1, dtype=np.int64)
    counts = np.zeros(n_workers, dtype=np.int64)
    first_step = np.empty(n, dtype=np.int64)
    for k in range(n):  # one pass; the trace is at most a few hundred thousand rows
        w, v = worker[k], pulled[k]
        first_step[k] = counts[w] * window
        counts[w] += 1
        prev = last_commit[w]
        if prev >= 0 and v <= prev:
            raise ValueError(
                f"commit {k}: worker {w} computed on version {v}, which is not after its own "
                f"previous commit {prev}; one snapshot slot per worker cannot replay that"
            )
        if v > 0:
            if prev >= 0 and v == prev + 1 and not fresh[k]:
                fill_self[prev] = True
            else:
                host.setdefault(int(v - 1), []).append((int(w), bool(fresh[k])))
        last_commit[w] = k
    evals = _eval_points(n, eval_every)
    return ExecutionPlan(
        worker=worker.astype(np.int32),
        staleness=(commit - pulled).astype(np.int32),
        fill_self=fill_self,
        first_step=first_step.astype(np.int32),
        host_fills={k: np.asarray([w for w, _ in ws], dtype=np.int32) for k, ws in host.items()},
        host_fresh={k: np.asarray([f for _, f in ws], dtype=bool) for k, ws in host.items()},
        evals=evals,
        n_workers=int(n_workers),
        round_end=round_end,
    )


def _eval_points(n: int, every: int | None) -> np.ndarray:
    if n == 0 or every is None:
        return np.zeros(0, dtype=np.int64)
    points = np.arange(every - 1, n, every)
    if points.size == 0 or points[-1] != n - 1:
        points = np.append(points, n - 1)
    return points


def plan_of(trace, *, window: int = 1, eval_every: int | None = None) -> ExecutionPlan:
    """The plan of a `CommitTrace` (its columns and flags)."""
    return make_plan(
        trace.worker,
        trace.pulled_version,
        trace.n_workers,
        window=window,
        eval_every=eval_every,
        fresh=trace.fresh,
        round_end=trace.round_end,
    )
