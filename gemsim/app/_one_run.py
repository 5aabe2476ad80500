"""One expanded run executed where its unit of work runs (this process, a job process, a Ray
task), its failure a `failed` record rather than a crash of the sweep."""

from __future__ import annotations

import time

from gemsim.results import RunResult, backend_of
from gemsim.types import Progress, RunKind

from ._provenance import utc_now
from ._record import RunIdentity, failed_result
from ._run import run, run_simulated
from ._trace_store import Traces


def execute_run(
    who: RunIdentity, *, progress: Progress | None = None, traces: Traces | None = None
) -> RunResult:
    """Run one expanded scenario (a simulated one's trace from `traces`, the sweep's trace
    store); an exception is a `failed` record, not a crash of the sweep (Ctrl-C and
    SystemExit are not exceptions of the run: they propagate)."""
    started, started_at = time.perf_counter(), utc_now()
    try:
        if who.kind is RunKind.SIM:
            return run_simulated(who, None, progress, traces)
        return run(who.expanded, progress=progress, backend=backend_of(who.kind.value))
    except Exception as exc:  # a bug or resource error in one run must not end the sweep
        return failed_result(
            who, exc, wall_seconds=time.perf_counter() - started, started_at=started_at
        )
