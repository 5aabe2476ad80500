"""The work of a sweep, wherever it runs: a unit of expanded runs in, one outcome per run out.

A unit is what a scheduler hands to one process (this one, a worker process of `--jobs N`, a
Ray task): a single run, or a batch of runs executed together in one compiled program
(`engine.batch_runs`, `_batches.py`). An outcome is everything the run's folder will hold;
the driver writes the folders (gemsim.results.write_run), so work can run anywhere, be killed
at any moment, and never touch the results folder.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gemsim import results
from gemsim.results import Manifest
from gemsim.trace import CommitTrace

from ._identity import RunKind
from ._provenance import utc_now
from ._record import RunIdentity, failed_manifest, flat_params
from ._run import run

Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True, eq=False)
class Outcome:
    """A run as its folder will hold it: manifest, trace, metrics frame and parameters
    (plain numpy, so that it pickles between processes and machines)."""

    manifest: Manifest
    trace: CommitTrace
    metrics: Any  # pandas.DataFrame
    params: dict[str, np.ndarray]

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def status(self) -> str:
        return self.manifest.status

    def placed(self, placement: Mapping[str, Any], *, command: str | None = None) -> Outcome:
        """The outcome with where it ran (`provenance.placement`) and the command that started
        the sweep (a worker process knows only its own) recorded in its manifest."""
        prov = dict(self.manifest.provenance)
        prov["placement"] = {**prov.get("placement", {}), **placement}
        if command is not None:
            prov["command"] = command
        manifest = dataclasses.replace(self.manifest, provenance=prov)
        return dataclasses.replace(self, manifest=manifest)

    def write(self, out_dir: Path) -> Path:
        """The run folder `out_dir/<run_id>/`, written atomically."""
        return results.write_run(
            out_dir, self.run_id, self.manifest, self.trace, self.metrics, self.params
        )


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


def execute_run(who: RunIdentity, *, progress: Progress | None = None) -> Outcome:
    """Run one expanded scenario; an exception is a `failed` outcome, not a crash of the sweep
    (Ctrl-C and SystemExit are not exceptions of the run: they propagate)."""
    started, started_at = time.perf_counter(), utc_now()
    backend = who.kind.value if who.kind in (RunKind.PROCESS, RunKind.RAY) else "sim"
    try:
        result = run(who.expanded, progress=progress, backend=backend)
    except Exception as exc:  # a bug or resource error in one run must not end the sweep
        return failed_outcome(who, exc, wall_seconds=time.perf_counter() - started,
                              started_at=started_at)  # fmt: skip
    return Outcome(result.manifest, result.trace, result.metrics, flat_params(result.params))


@dataclasses.dataclass(frozen=True)
class Unit:
    """What one process executes and hands back at once: a run alone, or several runs
    executed together as one batch of `pad_to` runs (copies of the first run fill a batch
    that has fewer left: `_batches.plan_batches` says why)."""

    runs: tuple[RunIdentity, ...]
    pad_to: int = 0

    @property
    def label(self) -> str:
        return " ".join(w.run_id for w in self.runs)


def execute_unit(
    unit: Unit,
    progress: Progress | None = None,
    *,
    where: Mapping[str, Any] | None = None,
) -> list[Outcome]:
    """Every run of a unit, one outcome each, in the unit's order, each marked with where it
    ran (`where`, default this process). `progress(done, total)` reports the commits under
    way."""
    where = here("in-process") if where is None else where
    if unit.pad_to:
        from ._batches import execute_batch

        done = execute_batch(unit.runs, progress, pad_to=unit.pad_to)
        return [outcome.placed(where) for outcome in done]
    return [execute_run(who, progress=progress).placed(where) for who in unit.runs]


def failed_outcome(
    who: RunIdentity, exc: BaseException, *, wall_seconds: float, started_at: str
) -> Outcome:
    """The outcome of a run that raised, or whose process was lost: status `failed`, the
    error, an empty trace and no parameters."""
    import pandas as pd

    manifest = failed_manifest(
        who, exc, wall_seconds=wall_seconds, started_at=started_at, ended_at=utc_now()
    )
    empty = CommitTrace.from_columns(
        time=[], worker=[], pulled_version=[], compute_time=[], queue_time=[], service_time=[],
        n_workers=who.expanded.scenario.workers.count, duration=0.0,
    )  # fmt: skip
    return Outcome(manifest, empty, pd.DataFrame(), {})


def lost_unit(
    unit: Sequence[RunIdentity], reason: str, *, started: float, started_at: str
) -> list[Outcome]:
    """`failed` outcomes for every run of a unit whose process (or node) was lost."""
    exc = WorkLost(reason)
    wall = time.perf_counter() - started
    return [failed_outcome(who, exc, wall_seconds=wall, started_at=started_at) for who in unit]


class WorkLost(RuntimeError):
    """The process (or Ray node) running a unit died before it returned its outcomes."""
