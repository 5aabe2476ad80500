"""Timing only: a scenario's commit trace, without gradients (what `gemsim trace` runs)."""

from __future__ import annotations

from gemsim import timing

from .build import build_cluster
from .schema import Scenario


def simulate_timing(scenario: Scenario, *, model_bytes: int | None = None) -> timing.CommitTrace:
    """Simulate the scenario's cluster and return its CommitTrace.

    The model's size (for bandwidth) and train size (for an epochs budget) come from the
    problem block; they are only computed when the scenario needs them.
    """
    needs_bytes = scenario.network.bandwidth_bytes_per_s is not None and model_bytes is None
    needs_steps = scenario.budget.epochs_per_worker is not None
    steps_per_epoch = None
    if needs_bytes or needs_steps:
        from .run import build_problem

        problem = build_problem(scenario)
        model_bytes = problem.model_bytes if model_bytes is None else model_bytes
        steps_per_epoch = problem.steps_per_epoch
    spec = build_cluster(scenario, model_bytes=model_bytes or 0, steps_per_epoch=steps_per_epoch)
    return timing.simulate(spec, seed=scenario.seed)


def trace_scenario(path, overrides=(), out=None) -> list[dict]:
    """Load, expand and simulate a scenario file; one staleness report per expanded run.

    With `out`, writes `out/trace.parquet` (one run) or `out/<run_id>/trace.parquet` (a sweep).
    """
    from pathlib import Path

    from .load import load_scenario
    from .sweep import expand

    scenario = load_scenario(path, overrides)
    runs = expand(scenario, source=str(path), base_dir=Path(path).parent)
    reports = []
    for run in runs:
        trace = simulate_timing(run.scenario)
        report = {"run_id": run.run_id, "sweep": run.sweep_values, "seed": run.scenario.seed}
        report.update(timing.staleness_summary(trace))
        report["duration"] = trace.duration
        if out is not None:
            folder = Path(out) if len(runs) == 1 else Path(out) / run.run_id
            folder.mkdir(parents=True, exist_ok=True)
            trace.to_parquet(folder / "trace.parquet")
            report["trace_path"] = str(folder / "trace.parquet")
        reports.append(report)
    return reports
