"""`gemsim trace`: a scenario's commit traces and their staleness, without gradients.

Nothing here builds a model, loads data or imports JAX: the problem's sizes (for an epochs
budget or a bandwidth) come from its specs (`gemsim.config.build_cluster`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gemsim import config, timing
from gemsim.config import Scenario, ScenarioError
from gemsim.trace import CommitTrace

from ._identity import RunKind, run_id_of, run_identity

# Per-worker figures of the timing model's report, as (report key, WorkerReport field).
WORKER_FIGURES = (
    ("availability", "availability"),
    ("waited_seconds", "waited_seconds"),
    ("lost", "lost"),
    ("lost_compute_seconds", "lost_compute_seconds"),
    ("cancelled", "cancelled"),
    ("cancelled_compute_seconds", "cancelled_compute_seconds"),
)


def simulate_timing(scenario: Scenario) -> CommitTrace:
    """Simulate the scenario's cluster and return its CommitTrace."""
    return timing.simulate(config.build_cluster(scenario), seed=scenario.seed)


def trace_scenario(
    path: str | Path,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    out: str | Path | None = None,
) -> list[dict[str, Any]]:
    """Load, expand and simulate a scenario file; one staleness report per expanded run.

    With `out`, writes `out/trace.parquet` (one run) or `out/<run_id>/trace.parquet` (a
    sweep). The data sets' sizes are checked for every run before the first is simulated.
    """
    path = Path(path)
    scenario = config.load_scenario(path, overrides)
    runs = config.expand(scenario, source=str(path), base_dir=path.parent)
    specs = []
    for expanded in runs:
        try:
            specs.append(config.build_cluster(expanded.scenario))
        except (ValueError, OSError) as exc:
            raise ScenarioError(str(path), [f"{expanded.sweep_values or 'run'}: {exc}"]) from None
    reports = []
    for expanded, spec in zip(runs, specs, strict=True):
        simulation = timing.simulate_run(spec, seed=expanded.scenario.seed)
        trace = simulation.trace
        run_id = run_id_of(run_identity(expanded.config_hash, RunKind.SIM))
        report = {"run_id": run_id, "sweep": expanded.sweep_values, "seed": expanded.scenario.seed}
        report.update(timing.staleness_summary(trace))
        report.update(worker_figures(spec, simulation.workers, report["per_worker"]))
        report["duration"] = trace.duration
        report["trace_sha256"] = trace.sha256()
        if out is not None:
            folder = Path(out) if len(runs) == 1 else Path(out) / run_id
            trace.to_parquet(folder / "trace.parquet")
            report["trace_path"] = str(folder / "trace.parquet")
        reports.append(report)
    return reports


def worker_figures(
    spec: timing.ClusterSpec, workers: timing.WorkerReport, per_worker: list[dict[str, Any]]
) -> dict[str, Any]:
    """The protocol and, per worker and in total, the time up, the time held by the protocol
    (blocked by SSP, at a barrier) and the work lost (going down) or cancelled (k_sync).
    Adds the per-worker values to the rows of ``per_worker`` in place; returns the totals."""
    for row in per_worker:
        w = row["worker"]
        for key, field in WORKER_FIGURES:
            row[key] = getattr(workers, field)[w].item()
    available = workers.availability
    return {
        "protocol": spec.protocol.name,
        "availability_mean": float(available.mean()) if len(available) else None,
        "waited_seconds": float(workers.waited_seconds.sum()),
        "lost": int(workers.lost.sum()),
        "lost_compute_seconds": float(workers.lost_compute_seconds.sum()),
        "cancelled": int(workers.cancelled.sum()),
        "cancelled_compute_seconds": float(workers.cancelled_compute_seconds.sum()),
    }
