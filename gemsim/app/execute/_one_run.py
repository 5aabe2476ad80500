"""One expanded run executed where its unit of work runs (this process, a job process, a Ray
task): what it produced, or its error, made into its record in one pass; a failure is a
`failed` record rather than a crash of the sweep."""

from __future__ import annotations

import time

from gemsim.results import RunResult
from gemsim.types import Progress, RunKind

from ..record._identity import RunIdentity
from ..record._provenance import utc_now
from ..record._record import Failure, record_of
from ..sweep._traces import Traces
from ._real import real_run
from ._simulated import simulated_run


def execute_run(
    who: RunIdentity,
    *,
    progress: Progress | None = None,
    traces: Traces | None = None,
    address: str | None = None,
) -> RunResult:
    """Run one expanded scenario (a simulated one's trace from `traces`, the sweep's trace
    store; a real one's on the backend its kind names, `address` a Ray cluster to join); an
    exception is a `failed` record, not a crash of the sweep (Ctrl-C and SystemExit are not
    exceptions of the run: they propagate)."""
    started, started_at = time.perf_counter(), utc_now()
    try:
        if who.kind is RunKind.SIM:
            outcome = simulated_run(who, None, progress, traces)
        else:
            outcome = real_run(who, progress, address)
    except Exception as exc:  # a bug or resource error in one run must not end the sweep
        outcome = Failure(exc, started_at, time.perf_counter() - started)
    return record_of(who, outcome, failures_recorded=True)
