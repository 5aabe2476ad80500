"""`gemsim run` over a whole sweep, and `gemsim.run_sweep`: expand, check every run, skip the
finished ones (`resume`), execute the rest here, in `jobs` job processes or on a Ray cluster
(`scheduler`), and write one run folder per run.

The driver (this process) is the only writer of run folders, whoever computed them: work
comes back as records (`gemsim.results.RunResult`) and each is written atomically, in the
background while the sweep goes on (`_folder_writer.py`). Simulated runs get their traces
through the results folder's trace store, one trace per distinct timing (`_trace_store.py`);
run here, a sweep has its next traces simulated ahead by timing processes while it executes
(`_trace_ahead.py`). A run that raises is
recorded `failed` and the sweep goes on; a unit whose process or node is lost is recorded
`failed` too (after Ray's retries on a cluster), so `--resume` runs it again.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from gemsim import config, results
from gemsim._checks import UserError
from gemsim._lru import Lru
from gemsim.config import ExpandedRun, Scenario, ScenarioError
from gemsim.results import RunResult
from gemsim.types import BACKENDS, RunKind

from ..execute._compile_cache import setup_compilation_cache
from ..execute._stages import compile_key
from ..record._identity import RunIdentity
from ..record._provenance import api_call, command_line
from ..report._progress import ProgressBar, SweepProgress
from ..report._summary_rows import SweepRow, summary_row
from ..sweep._folder_writer import FolderWriter
from ..sweep._local_jobs import LocalPool, Lost
from ..sweep._many_runs_plan import plan_many_runs
from ..sweep._ray_tasks import RayPool
from ..sweep._trace_ahead import TraceAhead, timing_processes
from ..sweep._trace_store import TimingInputs, TraceStore
from ..sweep._traces import TraceNotes
from ..sweep._units import Unit, execute_unit, here, lost_unit
from ._run import preflight

SCHEDULERS = ("local", "ray")
"""Where the runs of a sweep execute: here or in `--jobs` job processes, or as Ray tasks."""

OnRow = Callable[[Path, SweepRow], None]


@api_call("gemsim.run_file")
def run_file(
    path: str | Path,
    *,
    out: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    resume: bool = False,
    quiet: bool = False,
    backend: str = "sim",
    address: str | None = None,
    jobs: int = 1,
    scheduler: str = "local",
    on_row: OnRow | None = None,
    cluster: str | None = None,
) -> tuple[Path, list[SweepRow]]:
    """`gemsim run`: expand the sweep, check every run, run each point (skipping finished
    ones with `resume`), write a run folder per run, and return the results folder and the
    summary rows in sweep order (each also handed to `on_row(out_dir, row)` as its run ends).

    Args:
        jobs: job processes on this machine (1: run here, one run after another); with
            `scheduler="ray"`, the most tasks in flight (and a local Ray instance's CPUs).
        scheduler: "local" (here, or `jobs` job processes) or "ray": the runs as Ray tasks
            (`address` names a running cluster; none starts a local instance).
        cluster: deprecated name of `scheduler` (0.2: `cluster="ray"`).
    """
    path = Path(path)
    scheduler = _scheduler(scheduler, cluster)
    check_options(str(path), backend=backend, jobs=jobs, scheduler=scheduler)
    setup_compilation_cache()
    scenario = config.load_scenario(path, overrides)
    runs = config.expand(scenario, source=str(path), base_dir=path.parent)
    out_dir = Path(out) if out is not None else Path("results") / scenario.name
    rows = sweep(
        runs, str(path), out_dir, resume=resume, quiet=quiet, backend=backend,
        address=address, jobs=jobs, scheduler=scheduler, on_row=on_row,
    )  # fmt: skip
    return out_dir, rows


@api_call("gemsim.run_sweep")
def run_sweep(
    scenario: Scenario | str | Path,
    *,
    jobs: int = 1,
    scheduler: str = "local",
    address: str | None = None,
    out: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    resume: bool = False,
    quiet: bool = False,
    cluster: str | None = None,
):
    """Run a scenario's whole sweep (as `gemsim run` does) and return its results frame.

    Args:
        scenario: a scenario file, or a loaded `Scenario` (its `sweep`, `repeats` and `seeds`
            are expanded as from a file).
        jobs, scheduler, address: where the runs execute (see `run_file`; `cluster` is the
            deprecated name of `scheduler`).
        out: the results folder (default `results/<name>`).
        overrides: `path=value` strings or a mapping, applied before expanding.
        resume: skip runs whose folder holds a finished run of the same identity.
        quiet: no progress bar.

    Returns:
        `gemsim.load_results(out)`: one row per commit of every finished run (ok or
        diverged) in the folder. Runs that failed are left out of the frame; a warning names
        them (their folders hold the error).
    """
    scheduler = _scheduler(scheduler, cluster)
    if isinstance(scenario, str | Path):
        out_dir, rows = run_file(
            scenario, out=out, overrides=overrides, resume=resume, quiet=quiet,
            jobs=jobs, scheduler=scheduler, address=address,
        )  # fmt: skip
    else:
        source = f"<scenario {scenario.name!r}>"
        check_options(source, backend="sim", jobs=jobs, scheduler=scheduler)
        setup_compilation_cache()
        scenario = with_overrides(scenario, overrides, source)
        out_dir = Path(out) if out is not None else Path("results") / scenario.name
        rows = sweep(
            config.expand(scenario, source=source), source, out_dir, resume=resume,
            quiet=quiet, address=address, jobs=jobs, scheduler=scheduler,
        )  # fmt: skip
    failed = [r for r in rows if r.status == "failed"]
    if failed:
        first = [f"{r.run_id}: {(r.error or 'no error recorded').splitlines()[0]}" for r in failed]
        warnings.warn(
            f"{len(failed)} of {len(rows)} runs failed: " + "; ".join(first),
            RuntimeWarning,
            stacklevel=2,
        )
    return results.load_results(out_dir)


def with_overrides(scenario: Scenario, overrides, source: str) -> Scenario:
    """A loaded scenario with `path=value` overrides applied (validated again)."""
    if not overrides:
        return scenario
    data = scenario.model_dump(mode="python", exclude_unset=True)
    try:
        data = config.apply_overrides(data, overrides)
    except ValueError as exc:
        raise ScenarioError(source, [str(exc)]) from None
    return config.parse_scenario(data, source)


def _scheduler(scheduler: str, cluster: str | None) -> str:
    """`scheduler`, or the deprecated `cluster` it replaces."""
    if cluster is None:
        return scheduler
    warnings.warn(
        "cluster= is deprecated: pass scheduler= (the same values)",
        DeprecationWarning,
        stacklevel=3,
    )
    return cluster


def check_options(source: str, *, backend: str, jobs: int, scheduler: str) -> None:
    """The options of where runs execute, checked before anything is loaded."""
    problems = []
    if backend not in BACKENDS:
        problems.append(f"--backend: {backend!r} is not one of {BACKENDS}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        problems.append(f"--jobs: must be an integer >= 1, got {jobs!r}")
    if scheduler not in SCHEDULERS:
        problems.append(f"--scheduler: {scheduler!r} is not one of {SCHEDULERS}")
    if backend != "sim" and (scheduler != "local" or jobs != 1):
        problems.append(
            f"--backend {backend} runs each point for real and measures its wall-clock "
            "times: it cannot share the machine with other runs (drop --jobs / --scheduler)"
        )
    if scheduler == "ray" and importlib.util.find_spec("ray") is None:
        problems.append("--scheduler ray: Ray is not installed (pip install 'gemsim[ray]')")
    if problems:
        raise UserError(source, problems)


def sweep(
    runs: list[ExpandedRun],
    source: str,
    out_dir: Path,
    *,
    resume: bool = False,
    quiet: bool = False,
    backend: str = "sim",
    address: str | None = None,
    jobs: int = 1,
    scheduler: str = "local",
    on_row: OnRow | None = None,
) -> list[SweepRow]:
    """Check every run, skip the finished ones (`resume`), execute the rest, write their
    folders as they arrive; the summary rows in sweep order."""
    # Timing processes start before the checks, so that their interpreters are up when the
    # first unit needs its traces (they are stopped if there turn out to be none to simulate).
    timing = [_timing_inputs(r) for r in runs] if backend == "sim" else [None] * len(runs)
    early = _early_ahead(timing, out_dir, jobs=jobs, scheduler=scheduler)
    with TraceAhead(processes=early) as timing_ahead:
        notes = preflight(runs, source, needs=("problem", "optimizer"), backend=backend)
        who = [RunIdentity.of(expanded, RunKind(backend)) for expanded in runs]
        rows: list[SweepRow | None] = [None] * len(who)
        todo = _to_execute(who, out_dir, rows, resume=resume, on_row=on_row)
        plan = plan_many_runs(who, todo)
        units = plan.units
        if not quiet:
            for note in [*notes, *plan.notes]:
                print(note, file=sys.stderr, flush=True)
        work, stored = _units_of(who, units, plan.pad_to, out_dir, timing, address)
        where = dict(jobs=jobs, scheduler=scheduler, address=address)
        ahead = min(early, _ahead_processes(work, stored))
        if ahead:
            by_unit = [[t for t in unit.timing if t is not None] for unit in work]
            timing_ahead.assign(work[0].store, by_unit, stored)
        else:
            timing_ahead.stop()
        notes = TraceNotes(stored, ahead=ahead > 0)
        command = command_line()

        def written(i: int, record: RunResult) -> None:
            rows[i] = _row(out_dir, summary_row(record.manifest), on_row)

        # closing(): an exception here (Ctrl-C while a folder is written) stops the job
        # processes now, not when the traceback that holds this generator is collected. The
        # folders of a unit are written while the next one executes (`_folder_writer.py`).
        finished = _finished_units(units, work, len(who), quiet=quiet, ahead=timing_ahead, **where)
        with closing(finished), FolderWriter(out_dir, written) as writer:
            for index, records in finished:
                for i, record in zip(units[index], records, strict=True):
                    writer.submit(i, notes.settle(record.placed({}, command=command)))
    return rows  # type: ignore[return-value]


def _to_execute(
    who: list[RunIdentity], out_dir: Path, rows: list, *, resume: bool, on_row: OnRow | None
) -> list[int]:
    """The runs to execute: all, or with `resume` those without a finished folder (whose
    rows are filled in `rows`)."""
    todo = []
    for i, w in enumerate(who):
        folder = out_dir / w.run_id
        if resume and results.is_finished(folder, w.identity, w.kind.value):
            row = summary_row(results.read_manifest(folder), skipped=True)
            rows[i] = _row(out_dir, row, on_row)
        else:
            todo.append(i)
    return todo


def _units_of(
    who: list[RunIdentity],
    units: list[list[int]],
    pad_to: list[int],
    out_dir: Path,
    timing: list[TimingInputs | None],
    address: str | None = None,
) -> tuple[list[Unit], set[str]]:
    """The units of work, simulated runs' with their timing inputs (`timing`, by run) and the
    results folder's trace store, real runs' with the Ray cluster to join (`address`); and
    the keys the store holds now."""
    store = TraceStore.of(out_dir) if who and who[0].kind is RunKind.SIM else None
    if store is None:  # real runs record their own traces
        work = [
            Unit(tuple(who[i] for i in u), pad, address=address)
            for u, pad in zip(units, pad_to, strict=True)
        ]
        return work, set()
    store.remove_leftovers()
    work = [
        Unit(tuple(who[i] for i in unit), pad, tuple(timing[i] for i in unit), store)
        for unit, pad in zip(units, pad_to, strict=True)
    ]
    return work, store.keys()


def _timing_inputs(expanded: ExpandedRun) -> TimingInputs | None:
    """A simulated run's timing inputs, computed once here for every process that needs them
    (None where they fail: the run fails where it executes, with the error)."""
    try:
        return TimingInputs.of(expanded.scenario)
    except Exception:  # the run's own failure, recorded when it runs
        return None


def _early_ahead(
    timing: list[TimingInputs | None], out_dir: Path, *, jobs: int, scheduler: str
) -> int:
    """Timing processes a sweep starts before its checks: only one executed here (with job
    processes or Ray, each gets its own units' traces through the store), for the traces its
    store does not hold (`timing_processes`)."""
    if scheduler != "local" or jobs != 1:
        return 0
    keys = [t.key for t in timing if t is not None]
    return timing_processes([keys], TraceStore.of(out_dir).keys())


def _ahead_processes(work: list[Unit], stored: set[str]) -> int:
    """Timing processes the runs to execute still want, once they are known (`resume` may
    have left fewer traces to simulate than `_early_ahead` counted)."""
    if not work or work[0].store is None:
        return 0
    keys = [[t.key for t in unit.timing if t is not None] for unit in work]
    return timing_processes(keys, stored)


def _row(out_dir: Path, row: SweepRow, on_row: OnRow | None) -> SweepRow:
    if on_row is not None:
        on_row(out_dir, row)
    return row


def _finished_units(
    units: list[list[int]],
    work: list[Unit],
    n_runs: int,
    *,
    quiet: bool,
    jobs: int,
    scheduler: str,
    address: str | None,
    ahead: TraceAhead,
) -> Iterator[tuple[int, list[RunResult]]]:
    """`(unit index, records)` as units finish: here (with the `ahead` timing processes),
    from a local pool or from Ray."""
    if scheduler == "local" and jobs == 1:
        yield from _here(units, work, n_runs, quiet, ahead)
        return
    progress = SweepProgress(sum(len(u.runs) for u in work), quiet=quiet)
    labels = [unit.label for unit in work]
    if scheduler == "ray":
        pool = RayPool(address=address, jobs=jobs if jobs > 1 else None)
    else:
        pool = LocalPool(
            jobs, local_unit, on_progress=lambda i, d, t: progress.update(labels[i], d, t)
        )
    keys = [compile_key(unit.runs[0].expanded.scenario) for unit in work]
    try:
        with closing(pool.results(work, keys)) as finished:
            for index, result in finished:
                records = _records(work[index], result)
                yield index, records
                for record in records:
                    progress.finished(labels[index], _finished_line(record))
    finally:
        progress.close()


def _here(
    units, work, n_runs: int, quiet: bool, ahead: TraceAhead
) -> Iterator[tuple[int, list[RunResult]]]:
    """One unit after another in this process, each with its own progress bar (and the
    traces of the next ones simulated `ahead`). Traces read once stay in memory for the next
    units (often the same few: the runs of a study differ in their rule, not their timing)."""
    kept = Lru(4)
    for index, (positions, unit) in enumerate(zip(units, work, strict=True)):
        ahead.at(index)
        first = positions[0] + 1
        if len(unit.runs) == 1:
            label = f"[{first}/{n_runs}] {unit.runs[0].run_id}"
        else:
            label = f"[{first}-{positions[-1] + 1}/{n_runs}] {len(unit.runs)} runs together"
        bar = ProgressBar(label, quiet=quiet)
        try:
            records = execute_unit(unit, progress=bar, kept=kept)
        finally:
            bar.close()
        yield index, records


def local_unit(unit, progress) -> list[RunResult]:
    """The work of a `--jobs` job process (module level: it is pickled by reference)."""
    return execute_unit(unit, progress, where=here("local"))


def _records(unit: Unit, result: list[RunResult] | Lost) -> list[RunResult]:
    if isinstance(result, Lost):
        return lost_unit(
            unit.runs, result.reason, started=result.started, started_at=result.started_at
        )
    return result


def _finished_line(record: RunResult) -> str:
    m = record.manifest
    attempt = m.provenance.get("placement", {}).get("attempt")
    retried = f" (retry {attempt} after a lost task)" if attempt else ""
    error = f": {m.error.splitlines()[0]}" if m.error else ""
    return f"{m.run_id} {m.status} in {m.wall_seconds:.1f} s{retried}{error}"
