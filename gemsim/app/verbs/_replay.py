"""`gemsim replay`: execute a saved commit trace with a scenario's rule and problem.

A replay is its own kind of run: its identity includes the sha256 of the trace it replays,
so its folder never replaces the simulated or real run the trace came from, even in the same
results folder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gemsim import config
from gemsim._checks import UserError
from gemsim.config import ScenarioError
from gemsim.trace import CommitTrace

from ..execute._compile_cache import setup_compilation_cache
from ..report._progress import ProgressBar
from ..report._summary_rows import SweepRow, summary_row
from ._run import preflight, run, write_result


def read_trace_arg(trace_file: str | Path) -> tuple[CommitTrace, Path]:
    """The trace of a `trace.parquet` or of a run folder holding one (a UserError naming the
    path when there is no such file or folder, or the file is not a commit trace)."""
    path = Path(trace_file)
    if not path.exists():
        raise UserError(
            str(path), "no such trace or run folder (give a trace.parquet or a run's folder)"
        )
    if path.is_dir():  # a run folder (e.g. of a real run): its recorded trace
        path = path / "trace.parquet"
        if not path.is_file():
            raise UserError(str(path.parent), "no trace.parquet in this folder (not a run)")
    try:
        return CommitTrace.from_parquet(path), path
    except (OSError, ValueError) as exc:
        raise UserError(str(path), f"not a readable commit trace: {exc}") from None


def check_replayable(trace: CommitTrace, trace_path: str | Path) -> None:
    """Refuse, before anything runs, a trace the engine cannot execute (a UserError naming
    the file, the first such commit and why: `engine.UnreplayableTrace`)."""
    from gemsim import engine

    try:
        engine.plan_of(trace)
    except engine.UnreplayableTrace as exc:
        raise UserError(str(trace_path), f"the engine cannot replay this trace: {exc}") from None


def replay_file(
    trace_file: str | Path,
    path: str | Path,
    *,
    out: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    quiet: bool = False,
) -> tuple[Path, SweepRow]:
    """One run of the scenario (no sweep) over a saved trace; writes its run folder."""
    setup_compilation_cache()
    path = Path(path)
    scenario = config.load_scenario(path, overrides)
    if scenario.sweep or scenario.repeats > 1 or scenario.seeds:
        raise ScenarioError(
            str(path),
            [
                "sweep/repeats: replay runs one configuration; "
                "pick it with --set and remove the sweep"
            ],
        )
    trace, trace_path = read_trace_arg(trace_file)
    if trace.n_workers != scenario.workers.count:
        raise ScenarioError(
            str(path),
            [
                f"workers.count: {scenario.workers.count} but the trace has "
                f"{trace.n_workers} workers"
            ],
        )
    check_replayable(trace, trace_path)
    _check_clients(scenario, trace, trace_path, str(path))
    expanded = config.expand(scenario, source=str(path), base_dir=path.parent)
    preflight(expanded, str(path), needs=("problem", "optimizer"))
    out_dir = Path(out) if out is not None else Path("results") / scenario.name
    bar = ProgressBar("replay", quiet=quiet)
    result = run(expanded[0], progress=bar, trace=trace, trace_path=str(trace_path))
    bar.close()
    write_result(out_dir, result)
    return out_dir, summary_row(result.manifest)


def _check_clients(scenario, trace, trace_path, source: str) -> None:
    """A rule that keeps state per client needs to know each commit's client: a population's
    trace names it (the workers of any other trace are their own clients)."""
    block = scenario.optimizer
    if block is None or block.build().client_init is None:
        return
    clients = getattr(trace, "client", None)
    if scenario.clients is not None and clients is None:
        raise ScenarioError(
            source,
            [
                f"optimizer.rule: {block.rule!r} keeps state per client, and the trace "
                f"{trace_path} names no client of its commits (no client column); allowed: "
                f"a population's trace, or a scenario without `clients:`"
            ],
        )
    if scenario.clients is not None and trace.n_clients != scenario.clients.population:
        raise ScenarioError(
            source,
            [
                f"clients.population: {scenario.clients.population} but the trace "
                f"{trace_path} has {trace.n_clients} clients"
            ],
        )
