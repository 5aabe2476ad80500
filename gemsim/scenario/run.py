"""Running scenarios: timing -> engine -> run folder, for one run or a whole sweep."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd

from gemsim import engine, results, timing
from gemsim.types import PyTree, Status

from .build import build_cluster
from .errors import ScenarioError
from .load import load_scenario
from .problem import build_dataset, build_model
from .progress import ProgressBar
from .schema import Scenario
from .sweep import ExpandedRun, config_hash, expand, resolved_config

EVAL_COLUMNS = ("train_loss", "test_loss", "test_accuracy")
BACKENDS = ("sim", "process", "ray")


@dataclass(frozen=True)
class RunResult:
    """A finished run: final central parameters, its trace and metrics, and its manifest."""

    run_id: str
    status: Status
    params: PyTree
    trace: timing.CommitTrace
    metrics: pd.DataFrame
    manifest: dict[str, Any]


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
    manifest = _manifest(scenario, trace, out, params, dict(sweep_values or {}), repeat)
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
    manifest = _manifest(scenario, trace, out, params, sweep_values, repeat)
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


def metrics_frame(trace: timing.CommitTrace, out: engine.EngineResult) -> pd.DataFrame:
    """One row per executed commit: trace columns, the worker's batch loss, the rule's info,
    and the central variable's evaluation on the commits where it was evaluated (else NaN)."""
    n = len(out.metrics.get("batch_loss", ()))
    frame = pd.DataFrame(
        {
            "commit": trace.commit[:n],
            "time": trace.time[:n],
            "worker": trace.worker[:n],
            "staleness": trace.staleness[:n],
        }
    )
    for name, values in out.metrics.items():
        frame[name] = values
    for col in EVAL_COLUMNS:
        column = np.full(n, np.nan)
        for k, values in out.evals.items():
            if k < n:
                column[k] = values[col]
        frame[col] = column
    return frame


def flat_params(params: PyTree) -> dict[str, np.ndarray]:
    """Final parameters, one array per leaf, keyed by its path (as written to params.npz)."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def _manifest(scenario, trace, out, params, sweep_values, repeat) -> dict[str, Any]:
    stats = timing.staleness_summary(trace)
    final = out.final
    return {
        "name": scenario.name,
        "run_id": config_hash(scenario)[:12],
        "config": resolved_config(scenario),
        "config_hash": config_hash(scenario),
        "seed": scenario.seed,
        "status": out.status.value,
        "versions": versions(),
        "n_commits": out.n_commits,
        "final": {k: final.get(k, float("nan")) for k in EVAL_COLUMNS},
        "staleness": {k: stats[f"staleness_{k}"] for k in ("mean", "var", "max")},
        "trace_sha256": trace.sha256(),
        "params_sha256": results.params_sha256(params),
        "sweep": sweep_values,
        "repeat": repeat,
        "error": None,
        "diverged_at": out.diverged_at,
    }


@dataclass(frozen=True)
class SweepRow:
    """One line of the summary table `gemsim run` prints."""

    run_id: str
    sweep: dict[str, Any]
    status: str
    train_loss: float
    test_accuracy: float
    staleness_mean: float
    wall_seconds: float
    skipped: bool = False


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
            rows.append(_row(results.read_manifest(folder), skipped=True))
            continue
        label = f"[{i + 1}/{len(runs)}] {expanded.run_id}"
        manifest = run_to_folder(
            expanded, out_dir, label=label, quiet=quiet, backend=backend, address=address
        )
        rows.append(_row(manifest))
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
    return out_dir, _row(result.manifest)


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
        manifest = _failed_manifest(expanded, exc, time.perf_counter() - started)
        manifest["backend"] = backend
        results.write_run(out_dir, expanded.run_id, manifest, pd.DataFrame(), pd.DataFrame(), {})
        return manifest
    bar.close()
    write_result(out_dir, result)
    return result.manifest


def _failed_manifest(expanded: ExpandedRun, exc: Exception, wall: float) -> dict[str, Any]:
    nan = float("nan")
    return {
        "name": expanded.scenario.name,
        "run_id": expanded.run_id,
        "config": expanded.config,
        "config_hash": expanded.config_hash,
        "seed": expanded.scenario.seed,
        "status": Status.FAILED.value,
        "versions": versions(),
        "wall_seconds": wall,
        "n_commits": 0,
        "final": dict.fromkeys(EVAL_COLUMNS, nan),
        "staleness": {"mean": nan, "var": nan, "max": nan},
        "trace_sha256": "",
        "params_sha256": results.params_sha256({}),
        "sweep": expanded.sweep_values,
        "repeat": expanded.repeat,
        "error": "".join(traceback.format_exception_only(type(exc), exc)).strip(),
    }


def _row(manifest: Mapping[str, Any], skipped: bool = False) -> SweepRow:
    final, stale = manifest["final"], manifest["staleness"]
    return SweepRow(
        run_id=manifest["run_id"],
        sweep=dict(manifest["sweep"]),
        status=manifest["status"],
        train_loss=_num(final.get("train_loss")),
        test_accuracy=_num(final.get("test_accuracy")),
        staleness_mean=_num(stale.get("mean")),
        wall_seconds=_num(manifest["wall_seconds"]),
        skipped=skipped,
    )


def _num(value: Any) -> float:
    return float("nan") if value is None else float(value)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("gemsim", "jax", "jaxlib", "simpy", "numpy", "optax", "pydantic"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def _require(scenario: Scenario, block: str):
    value = getattr(scenario, block)
    if value is None:
        raise ScenarioError(
            scenario.name,
            [f"{block}: required to run (gemsim trace needs only workers and budget)"],
        )
    return value
