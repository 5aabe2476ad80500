"""Running scenarios: timing -> engine -> run folder, for one run or a whole sweep."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import pandas as pd

from gemsim import engine, results, timing

from .build import build_cluster
from .errors import ScenarioError
from .load import load_scenario
from .problem import build_dataset, build_model
from .progress import ProgressBar
from .run_record import (
    RunResult,
    SweepRow,
    failed_manifest,
    flat_params,
    metrics_frame,
    run_manifest,
    summary_row,
)
from .schema import Scenario
from .sweep import ExpandedRun, config_hash, expand, resolved_config

BACKENDS = ("sim", "process", "ray")


def build_problem(scenario: Scenario):
    from gemsim import problems

    block = _require(scenario, "problem")
    return problems.make_problem(
        build_model(block.model),
        build_dataset(block.dataset),
        batch_size=block.batch_size,
        seed=scenario.seed,
        eval_subset=scenario.eval.subset,
    )


def run(
    scenario: Scenario | ExpandedRun,
    *,
    progress: Callable[[int, int], None] | None = None,
    sweep_values: Mapping[str, Any] | None = None,
    repeat: int = 0,
    trace: timing.CommitTrace | None = None,
    backend: str = "sim",
    address: str | None = None,
) -> RunResult:
    """Simulate the timing, execute the trace with real gradients, and collect the results.

    With `trace`, the timing model is skipped and that trace is replayed (e.g. one recorded
    by a real backend, or saved by `gemsim trace --out`). With `backend="process"` or
    `"ray"` the scenario runs for real instead (gemsim.real) and its recorded trace is
    returned; `address` joins an existing Ray cluster.
    """
    if isinstance(scenario, ExpandedRun):
        sweep_values, repeat, scenario = scenario.sweep_values, scenario.repeat, scenario.scenario
    if backend != "sim":
        return _run_real(scenario, backend, progress, dict(sweep_values or {}), repeat, address)
    started = time.perf_counter()
    rule = _require(scenario, "optimizer").build()
    problem = build_problem(scenario)
    if trace is None:
        spec = build_cluster(
            scenario, model_bytes=problem.model_bytes, steps_per_epoch=problem.steps_per_epoch
        )
        trace = timing.simulate(spec, seed=scenario.seed)
    plan = engine.make_plan(
        trace.worker,
        trace.pulled_version,
        trace.n_workers,
        window=rule.window,
        eval_every=scenario.eval.every,
    )
    executor = _executor(scenario, rule, problem, trace.n_workers)
    out = executor.execute(plan, problem=problem, params=problem.init_params, progress=progress)
    metrics = metrics_frame(trace, out)
    params = flat_params(out.params)
    manifest = run_manifest(scenario, trace, out, params, dict(sweep_values or {}), repeat)
    manifest["backend"] = "sim"
    manifest["executor"] = type(executor).__name__
    manifest["wall_seconds"] = time.perf_counter() - started
    return RunResult(manifest["run_id"], out.status, out.params, trace, metrics, manifest)


def build_rule_and_problem(config: Mapping[str, Any]):
    """`(rule, problem)` from a resolved config: what every process of a real run calls
    (module level, so that a partial of it pickles into spawned processes)."""
    scenario = Scenario.model_validate(dict(config))
    return _require(scenario, "optimizer").build(), build_problem(scenario)


def real_job(scenario: Scenario):
    """The scenario as a job for a real backend."""
    from gemsim import real

    rule, problem = build_rule_and_problem(resolved_config(scenario))
    spec = build_cluster(
        scenario, model_bytes=problem.model_bytes, steps_per_epoch=problem.steps_per_epoch
    )
    return real.RealJob(
        build=functools.partial(build_rule_and_problem, resolved_config(scenario)),
        spec=spec,
        seed=scenario.seed,
        emulate_latency=scenario.workers.emulate_latency,
        name=scenario.name,
    )


def backend_hash(scenario: Scenario, backend: str) -> str:
    """The identity of a run: its config, and the backend when it is a real one (a real run
    and its simulation then get different run ids in one results folder)."""
    digest = config_hash(scenario)
    if backend == "sim":
        return digest
    return hashlib.sha256(f"{digest}:{backend}".encode()).hexdigest()


def _run_real(scenario, backend, progress, sweep_values, repeat, address) -> RunResult:
    from gemsim import real

    if backend not in BACKENDS:
        raise ScenarioError(scenario.name, [f"backend: {backend!r} is not one of {BACKENDS}"])
    _require(scenario, "problem")
    started = time.perf_counter()
    job = real_job(scenario)
    done = real.run_backend(backend, job, progress=progress, address=address)
    out, trace = done.result, done.trace
    metrics = metrics_frame(trace, out)
    params = flat_params(out.params)
    manifest = run_manifest(scenario, trace, out, params, sweep_values, repeat)
    identity = backend_hash(scenario, backend)
    manifest.update(run_id=identity[:12], config_hash=identity, backend=backend)
    manifest["worker_events"] = [dataclasses.asdict(e) for e in done.events]
    manifest["wall_seconds"] = time.perf_counter() - started
    return RunResult(manifest["run_id"], out.status, out.params, trace, metrics, manifest)


_EXECUTORS: OrderedDict[tuple, engine.Executor] = OrderedDict()
_EXECUTOR_CACHE_SIZE = 8


def _executor(scenario: Scenario, rule, problem, n_workers: int) -> engine.Executor:
    """A compiled executor, reused across runs that differ only in seed or timing: repeats
    and timing sweeps then compile once. The key is everything the compiled code depends on."""
    kind = engine.ExecutorKind(scenario.engine.executor)
    cls = engine.resolve_executor(kind, n_workers)
    key = (
        cls,
        scenario.optimizer.model_dump_json(),
        jax.tree_util.tree_structure(problem),
        n_workers,
        scenario.engine.chunk,
    )
    if key in _EXECUTORS:
        _EXECUTORS.move_to_end(key)
        return _EXECUTORS[key]
    executor = cls(
        rule, problem, params=problem.init_params, n_workers=n_workers, chunk=scenario.engine.chunk
    )
    _EXECUTORS[key] = executor
    if len(_EXECUTORS) > _EXECUTOR_CACHE_SIZE:
        _EXECUTORS.popitem(last=False)
    return executor


def run_file(
    path: str | Path,
    *,
    out: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    resume: bool = False,
    quiet: bool = False,
    backend: str = "sim",
    address: str | None = None,
) -> tuple[Path, list[SweepRow]]:
    """`gemsim run`: expand the sweep, run each point (skipping finished ones with `resume`),
    write a run folder per run, and return the results folder and the summary rows."""
    path = Path(path)
    scenario = load_scenario(path, overrides)
    runs = expand(scenario, source=str(path), base_dir=path.parent)
    missing = [b for b in ("problem", "optimizer") if getattr(scenario, b) is None]
    if missing:
        raise ScenarioError(
            str(path), [f"{b}: required by `gemsim run` (add a `{b}:` block)" for b in missing]
        )
    out_dir = Path(out) if out is not None else Path("results") / scenario.name
    rows = []
    if backend not in BACKENDS:
        raise ScenarioError(str(path), [f"--backend: {backend!r} is not one of {BACKENDS}"])
    for i, expanded in enumerate(runs):
        if backend != "sim":
            identity = backend_hash(expanded.scenario, backend)
            expanded = dataclasses.replace(expanded, config_hash=identity)
        folder = out_dir / expanded.run_id
        if resume and results.is_finished(folder, expanded.config_hash):
            rows.append(summary_row(results.read_manifest(folder), skipped=True))
            continue
        label = f"[{i + 1}/{len(runs)}] {expanded.run_id}"
        manifest = run_to_folder(
            expanded, out_dir, label=label, quiet=quiet, backend=backend, address=address
        )
        rows.append(summary_row(manifest))
    return out_dir, rows


def replay_file(
    trace_file: str | Path,
    path: str | Path,
    *,
    out: str | Path | None = None,
    overrides: Iterable[str] | Mapping[str, Any] | None = None,
    quiet: bool = False,
) -> tuple[Path, SweepRow]:
    """`gemsim replay`: one run of the scenario (no sweep) over a saved trace, given as a
    trace.parquet or a run folder holding one."""
    path = Path(path)
    scenario = load_scenario(path, overrides)
    if scenario.sweep or scenario.repeats > 1 or scenario.seeds:
        raise ScenarioError(
            str(path),
            [
                "sweep/repeats: replay runs one configuration; "
                "pick it with --set and remove the sweep"
            ],
        )
    trace_file = Path(trace_file)
    if trace_file.is_dir():  # a run folder (e.g. of a real run): its recorded trace
        trace_file = trace_file / "trace.parquet"
    try:
        trace = timing.CommitTrace.from_parquet(trace_file)
    except (OSError, ValueError) as exc:
        raise ScenarioError(str(trace_file), [f"not a readable commit trace: {exc}"]) from None
    if trace.n_workers != scenario.workers.count:
        raise ScenarioError(
            str(path),
            [
                f"workers.count: {scenario.workers.count} but the trace "
                f"has {trace.n_workers} workers"
            ],
        )
    out_dir = Path(out) if out is not None else Path("results") / scenario.name
    bar = ProgressBar("replay", quiet=quiet)
    result = run(scenario, progress=bar, trace=trace)
    bar.close()
    result.manifest["replayed_trace"] = str(trace_file)
    write_result(out_dir, result)
    return out_dir, summary_row(result.manifest)


def write_result(out_dir: Path, result: RunResult) -> None:
    """The run folder of a finished run (atomically, see gemsim.results.write_run)."""
    results.write_run(
        out_dir,
        result.run_id,
        result.manifest,
        result.trace.to_pandas(),
        result.metrics,
        flat_params(result.params),
    )


def run_to_folder(
    expanded: ExpandedRun,
    out_dir: Path,
    *,
    label: str,
    quiet: bool,
    backend: str = "sim",
    address: str | None = None,
) -> dict:
    """Run one expanded scenario and write its folder; a crash is recorded as `failed`
    (Ctrl-C is not a crash: it ends the sweep and leaves no folder for this run)."""
    bar = ProgressBar(label, quiet=quiet)
    started = time.perf_counter()
    try:
        result = run(expanded, progress=bar, backend=backend, address=address)
    except Exception as exc:  # a bug or resource error in one run must not end the sweep
        bar.close()
        manifest = failed_manifest(expanded, exc, time.perf_counter() - started)
        manifest["backend"] = backend
        results.write_run(out_dir, expanded.run_id, manifest, pd.DataFrame(), pd.DataFrame(), {})
        return manifest
    bar.close()
    write_result(out_dir, result)
    return result.manifest


def _require(scenario: Scenario, block: str):
    value = getattr(scenario, block)
    if value is None:
        raise ScenarioError(
            scenario.name,
            [f"{block}: required to run (gemsim trace needs only workers and budget)"],
        )
    return value
