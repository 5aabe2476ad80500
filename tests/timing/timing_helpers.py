"""Small builders shared by the timing tests."""

from __future__ import annotations

from gemsim.timing import ClusterSpec, CommitBudget, Distribution, WorkerSpec
from gemsim.timing._budget import Budget


def cluster(
    n: int,
    compute: Distribution,
    budget: Budget | None = None,
    *,
    speeds: tuple[float, ...] | None = None,
    **kwargs: object,
) -> ClusterSpec:
    """n workers with one compute law (and optional speed factors)."""
    speeds = speeds or (1.0,) * n
    workers = tuple(WorkerSpec(compute, speed=s) for s in speeds)
    return ClusterSpec(workers=workers, budget=budget or CommitBudget(1000), **kwargs)


def version_at(trace, t: float) -> int:
    """PS version at time t: commits with time <= t (for untied times)."""
    return int((trace.time <= t).sum())


def rows_of(trace, worker: int):
    """Indices of the commits made by ``worker``."""
    return (trace.worker == worker).nonzero()[0]
