"""The work of a sweep, wherever it runs: a unit of expanded runs in, one record per run out.

A unit is what a scheduler hands to one process (this one, a job process of `--jobs N`, a Ray
task): a single run, or several runs executed together in one compiled program
(`engine.many_runs`, `_many_runs.py`), with the runs' timing inputs and the sweep's trace
store, through which every process gets its traces (`_trace_store.py`). A record
(`gemsim.results.RunResult`) is everything the run's folder will hold; the driver writes the
folders (`RunResult.write`), so work can run anywhere, be killed at any moment, and never
touch a run folder.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gemsim._lru import Lru
from gemsim.results import RunResult
from gemsim.types import Progress

from ..execute._many_runs import execute_many
from ..execute._one_run import execute_run
from ..record._identity import RunIdentity
from ..record._record import failed_record
from ._trace_store import TimingInputs, TraceStore
from ._traces import Traces


def here(scheduler: str, **extra: Any) -> dict[str, Any]:
    """Where work runs: the scheduler, host, process id and the CPUs it may use (XLA:CPU's
    results depend on their number), and what the scheduler adds."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cpus = len(usable) if usable is not None else os.cpu_count()
    return {
        "scheduler": scheduler,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cpus": cpus,
        **extra,
    }


@dataclasses.dataclass(frozen=True)
class Unit:
    """What one process executes and hands back at once: a run alone, or several runs
    executed together at `pad_to` runs (copies of the first run fill a group that has fewer
    left: `_many_runs_plan.plan_many_runs` says why); a real run's `address`, the Ray cluster
    its workers join (None: a local instance)."""

    runs: tuple[RunIdentity, ...]
    pad_to: int = 0
    timing: tuple[TimingInputs | None, ...] = ()
    store: TraceStore | None = None
    address: str | None = None

    def traces(self, kept: Lru | None = None) -> Traces:
        """Where the unit's runs get their traces: the store, where this process sees the
        results folder it lives in (a Ray node may not), else simulated here; those `kept`
        from the units before (`Traces`)."""
        store = self.store
        if store is not None and not store.seen_here():
            store = None
        pairs = zip(self.runs, self.timing, strict=False)  # no timing: every run's computed here
        known = {w.identity: t for w, t in pairs if t is not None}
        return Traces(store, known, kept)

    @property
    def label(self) -> str:
        return " ".join(w.run_id for w in self.runs)


def execute_unit(
    unit: Unit,
    progress: Progress | None = None,
    *,
    where: Mapping[str, Any] | None = None,
    kept: Lru | None = None,
) -> list[RunResult]:
    """Every run of a unit, one record each, in the unit's order, each marked with where it
    ran (`where`, default this process). `progress(done, total)` reports the commits under
    way; `kept`, the traces this process keeps in memory across a sweep's units."""
    where = here("in-process") if where is None else where
    traces = unit.traces(kept)
    if unit.pad_to:
        done = execute_many(unit.runs, progress, pad_to=unit.pad_to, traces=traces)
        return [result.placed(where) for result in done]
    return [
        execute_run(who, progress=progress, traces=traces, address=unit.address).placed(where)
        for who in unit.runs
    ]


def lost_unit(
    unit: Sequence[RunIdentity], reason: str, *, started: float, started_at: str
) -> list[RunResult]:
    """`failed` records for every run of a unit whose process (or node) was lost."""
    exc = WorkLost(reason)
    wall = time.perf_counter() - started
    return [failed_record(who, exc, wall_seconds=wall, started_at=started_at) for who in unit]


class WorkLost(RuntimeError):
    """The process (or Ray node) running a unit died before it returned its records."""
