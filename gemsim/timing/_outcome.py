"""What a simulation gives besides its trace: per-worker availability, waits and lost work."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gemsim.trace import CommitTrace


class WorkerReport(NamedTuple):
    """Per-worker figures of one simulated run, each an array indexed by worker (by slot,
    with a population: a slot is always up and its losses are its clients' going down).

    Attributes:
        up_seconds: float64, time up within ``[0, duration]`` (joined and not down).
        availability: float64, ``up_seconds / duration`` (NaN for a zero duration).
        waited_seconds: float64, time held by the protocol within ``[0, duration]``: blocked
            by SSP, waiting at a barrier (sync, k_sync) or for a k_async round to close; for a
            population's slot, waiting for a client to be up and free.
        lost: int64, gradients lost because the worker went down while computing or queued.
        lost_compute_seconds: float64, the compute time those gradients had taken.
        cancelled: int64, gradients cancelled by k_sync (their round had its k gradients)
            or stopped by the server (`DelayStops`, `BatchRestarts`).
        cancelled_compute_seconds: float64, the compute time those had taken.
        downs: per worker, its down intervals ``(start, end)`` as scheduled (``end`` may be
            ``inf``), the late join ``(0, join_at)`` included.
    """

    up_seconds: np.ndarray
    availability: np.ndarray
    waited_seconds: np.ndarray
    lost: np.ndarray
    lost_compute_seconds: np.ndarray
    cancelled: np.ndarray
    cancelled_compute_seconds: np.ndarray
    downs: tuple[tuple[tuple[float, float], ...], ...]


TASK_IN_FLIGHT, TASK_COMMITTED, TASK_LOST = 0, 1, 2
"""A task's outcome (`ClientTasks.outcome`): still in flight at the run's end, committed, or
lost (its client went down before its work was in service)."""
TASK_OUTCOMES = ("in_flight", "committed", "lost")
"""The outcomes' names, by code."""


class ClientTasks(NamedTuple):
    """A population's tasks, one entry per task in the order they started (equal-length
    arrays); the trace holds the committed ones only.

    Attributes:
        client: int64, the task's client.
        slot: int64, the slot that ran it.
        start: float64, when the slot took the client (its pull begins then).
        end: float64, when it ended: its commit's time, or when its client went down (lost);
            NaN for a task still in flight at the run's end.
        outcome: int8, `TASK_COMMITTED`, `TASK_LOST` or `TASK_IN_FLIGHT`.
        commit: int64, the row of its commit in the trace; -1 for a task not committed.
    """

    client: np.ndarray
    slot: np.ndarray
    start: np.ndarray
    end: np.ndarray
    outcome: np.ndarray
    commit: np.ndarray


class ClientReport(NamedTuple):
    """Per-client figures of a population's run, each an array indexed by client id.

    Attributes:
        speed: float64, the client's speed factor.
        started: int64, tasks the client was chosen for (within the budget's span).
        completed: int64, its tasks committed (its rows in the trace's ``client`` column).
        lost: int64, its tasks lost because it went down before they were in service.
        up_seconds: float64, its time up within the run's span (`client_up_seconds`), the
            exposure its selections are judged against; computed once, by the run that
            made the trace (the timing model, or a real run's server).
        tasks: the tasks themselves (`ClientTasks`), whose per-client sums the counts are;
            None where only the counts are known.

    A task still in flight when the run ends is started but neither completed nor lost.
    """

    speed: np.ndarray
    started: np.ndarray
    completed: np.ndarray
    lost: np.ndarray
    up_seconds: np.ndarray
    tasks: ClientTasks | None = None


class Simulation(NamedTuple):
    """A simulated run: its commit trace, its per-worker report (per slot, with a
    population) and, with a population, its per-client report."""

    trace: CommitTrace
    workers: WorkerReport
    clients: ClientReport | None = None


def down_seconds(downs: list[tuple[float, float]] | tuple, duration: float) -> float:
    """Total length of the intervals within ``[0, duration]``."""
    return sum(max(0.0, min(end, duration) - min(start, duration)) for start, end in downs)


def worker_report(state, duration: float) -> WorkerReport:
    """The report of a finished `SimState` whose run lasted ``duration``."""
    n = state.spec.n_workers
    up = np.array([duration - down_seconds(d, duration) for d in state.downs], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        availability = up / duration if duration > 0 else np.full(n, np.nan)
    return WorkerReport(
        up_seconds=up,
        availability=np.asarray(availability, dtype=np.float64),
        waited_seconds=np.asarray(state.waited, dtype=np.float64),
        lost=np.asarray(state.lost, dtype=np.int64),
        lost_compute_seconds=np.asarray(state.lost_compute, dtype=np.float64),
        cancelled=np.asarray(state.cancelled, dtype=np.int64),
        cancelled_compute_seconds=np.asarray(state.cancelled_compute, dtype=np.float64),
        downs=tuple(tuple(d) for d in state.downs),
    )
