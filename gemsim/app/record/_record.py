"""A run's record (`gemsim.results.RunResult`), built in one pass from what the run produced:
a finished run's trace, engine output and reports (`Produced`), or a run's error (`Failure`),
into its parameters by leaf path, its manifest (`_manifest.py`) and its tables
(`_tables.py`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemsim import timing
from gemsim.results import RunResult
from gemsim.trace import CommitTrace
from gemsim.types import PyTree

from ._identity import RunIdentity
from ._manifest import manifest_of
from ._tables import (
    metrics_frame,
    tasks_frame,
    worker_evals_frame,
    worker_summary_frame,
)


@dataclass(frozen=True)
class Produced:
    """What a finished run produced (status ok or diverged): its trace, the engine's output
    `out` (`engine.EngineResult`, or a real run's), and where they came from.

    Attributes:
        started: when it started, a `time.perf_counter()` value: its wall time runs until
            its record has its parameters (on the host), unless `wall_seconds` gives it.
        started_at: when it started (UTC, ISO 8601).
        executor: the engine executor's class name (a simulated run's).
        worker_events: a real run's worker processes' events.
        trace_note: where a simulated trace came from (`provenance.trace_store`).
        clients: a population's per-client report, from the run that made the trace (the
            timing model's one run, kept with the trace in the trace store; a real run's
            server); None for a replay, whose tasks are not known.
    """

    trace: CommitTrace
    out: Any
    started: float
    started_at: str
    wall_seconds: float | None = None
    executor: str | None = None
    worker_events: tuple[dict[str, Any], ...] = ()
    trace_note: Any = None
    clients: timing.ClientReport | None = None
    failed = False


@dataclass(frozen=True)
class Failure:
    """A run that raised, or whose process was lost: its error and how long it had run."""

    error: BaseException
    started_at: str
    wall_seconds: float
    trace_note: Any = None
    failed = True


def record_of(
    who: RunIdentity, outcome: Produced | Failure, *, failures_recorded: bool = False
) -> RunResult:
    """The record of a run: its manifest and its tables (a failed run's: an empty trace and
    no parameters). With `failures_recorded`, a finished run whose record cannot be built
    (an exception from its metrics or tables) gets a failed record instead, as a run that
    raised does (a sweep's runs); else the exception propagates (`gemsim.run`)."""
    try:
        return _built(who, outcome)
    except Exception as exc:
        if outcome.failed or not failures_recorded:
            raise
        wall = time.perf_counter() - outcome.started
        return _built(who, Failure(exc, outcome.started_at, wall, outcome.trace_note))


def _built(who: RunIdentity, outcome: Produced | Failure) -> RunResult:
    if outcome.failed:
        params, wall = {}, outcome.wall_seconds
    else:
        params = flat_params(outcome.out.params)
        wall = outcome.wall_seconds
        wall = time.perf_counter() - outcome.started if wall is None else wall
    manifest = manifest_of(who, outcome, params, wall)
    if outcome.failed:
        import pandas as pd

        n_workers = who.expanded.scenario.workers.count
        empty = CommitTrace.from_columns(
            time=[], worker=[], pulled_version=[], compute_time=[], queue_time=[],
            service_time=[], n_workers=n_workers, duration=0.0,
        )  # fmt: skip
        return RunResult(manifest, empty, pd.DataFrame(), {})
    trace, out, clients = outcome.trace, outcome.out, outcome.clients
    return RunResult(
        manifest,
        trace,
        metrics_frame(trace, out),
        params,
        worker_evals=worker_evals_frame(trace, out),
        worker_summary=worker_summary_frame(trace, out, clients),
        tasks=tasks_frame(None if clients is None else clients.tasks, trace),
    )


def failed_record(
    who: RunIdentity, exc: BaseException, *, wall_seconds: float, started_at: str
) -> RunResult:
    """The record of a run that raised, or whose process was lost: status `failed`."""
    return record_of(who, Failure(exc, started_at, wall_seconds))


def flat_params(params: PyTree) -> dict[str, np.ndarray]:
    """Final parameters, one array per leaf, keyed by its path (as written to params.npz)."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}
