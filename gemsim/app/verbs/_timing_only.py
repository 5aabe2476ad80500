"""`gemsim trace`: a scenario's commit traces and their staleness, without gradients.

Nothing here builds a model or imports JAX: the problem's sizes (for an epochs budget or a
bandwidth) come from its specs (`gemsim.config.build_cluster`). A scenario that splits its
training set among the workers loads the training labels to print the partition
(`_partition_report.py`); any other loads no data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gemsim import config, timing
from gemsim.config import Scenario, ScenarioError
from gemsim.timing import check_work
from gemsim.trace import CommitTrace

from ..record._identity import RunKind, run_id_of, run_identity
from ..report._partition_report import partition_text
from ..report._population_report import population_report, write_clients

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
    try:
        spec = checked_cluster(scenario)
    except (ValueError, OSError) as exc:
        raise ScenarioError(scenario.name, [str(exc)]) from None
    return timing.simulate(spec, seed=scenario.seed)


def checked_cluster(scenario: Scenario, *, model_bytes: bool = True) -> timing.ClusterSpec:
    """The scenario's cluster, checked as far as its simulation goes: an epochs budget needs
    an epoch of at least one full batch, and the simulation may not be endless or too long
    (`gemsim.timing.check_work`: churn, slowdowns, commits at the laws' typical
    values). A ValueError names what to change. ``model_bytes=False`` leaves out the
    parameters' bytes (an imported model is then not traced for them): the checks stay
    valid, on the optimistic side."""
    bandwidth = scenario.network.bandwidth_bytes_per_s is not None
    if scenario.budget.epochs_per_worker is not None and scenario.problem is not None:
        check_batch_size(scenario)
        # The sizes are read once here and handed on: an imported model may be costly.
        steps, n_bytes = config.problem_sizes(scenario, model_bytes=model_bytes and bandwidth)
        if steps < 1:  # a factory's own data, smaller than a batch (its size known only now)
            raise ValueError(_no_full_batch(scenario.problem.batch_size, ""))
        spec = config.build_cluster(scenario, sizes=(steps, n_bytes))
    else:
        spec = config.build_cluster(scenario, sizes=None if model_bytes else (1, 0))
    check_work(spec)
    return spec


def check_batch_size(scenario: Scenario) -> None:
    """Refuse a batch larger than the training set of the scenario's data set (its size known
    from the data set's spec or files, without loading it); a model that brings its own data
    is checked when it is built."""
    from gemsim import problems

    if scenario.problem is None:
        return
    _, data = config.problem_args(scenario)
    if data is None:
        return
    n_train = problems.data_shape(data, scenario.seed).n_train
    if scenario.problem.batch_size > n_train:
        raise ValueError(_no_full_batch(scenario.problem.batch_size, f" of {n_train} examples"))


def _no_full_batch(batch_size: int, size: str) -> str:
    return (
        f"problem.batch_size: {batch_size} is larger than the training set{size}, which "
        f"holds no full batch; allowed: a batch_size of at most the training set's size"
    )


def trace_scenario(
    path: str | Path,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    out: str | Path | None = None,
) -> list[dict[str, Any]]:
    """Load, expand and simulate a scenario file; one staleness report per expanded run
    (with its `partition`, as text, where the scenario splits its data among the workers).

    With `out`, writes `out/trace.parquet` (one run) or `out/<run_id>/trace.parquet` (a
    sweep). The data sets' sizes and the partitions are checked for every run before the
    first is simulated.
    """
    path = Path(path)
    scenario = config.load_scenario(path, overrides)
    runs = config.expand(scenario, source=str(path), base_dir=path.parent)
    specs, partitions = [], []
    for expanded in runs:
        try:
            specs.append(checked_cluster(expanded.scenario))
            partitions.append(partition_text(expanded.scenario))
        except ScenarioError as exc:  # an impossible partition, named by its field
            where = expanded.sweep_values or "run"
            raise ScenarioError(str(path), [f"{where}: {p}" for p in exc.problems]) from None
        except (ValueError, OSError) as exc:
            raise ScenarioError(str(path), [f"{expanded.sweep_values or 'run'}: {exc}"]) from None
    reports = []
    for expanded, spec, partition in zip(runs, specs, partitions, strict=True):
        simulation = timing.simulate_run(spec, seed=expanded.scenario.seed)
        trace = simulation.trace
        run_id = run_id_of(run_identity(expanded.config_hash, RunKind.SIM))
        report = {"run_id": run_id, "sweep": expanded.sweep_values, "seed": expanded.scenario.seed}
        report.update(timing.staleness_summary(trace))
        report.update(worker_figures(spec, simulation.workers, report["per_worker"]))
        report["duration"] = trace.duration
        report["trace_sha256"] = trace.sha256()
        if partition is not None:
            report["partition"] = partition
        population = population_report(spec, simulation)
        if population is not None:
            report["population"] = population
        if out is not None:
            folder = Path(out) if len(runs) == 1 else Path(out) / run_id
            trace.to_parquet(folder / "trace.parquet")
            report["trace_path"] = str(folder / "trace.parquet")
            clients = write_clients(folder, simulation)
            if clients is not None:
                report["clients_path"] = str(clients)
        reports.append(report)
    return reports


def worker_figures(
    spec: timing.ClusterSpec, workers: timing.WorkerReport, per_worker: list[dict[str, Any]]
) -> dict[str, Any]:
    """The protocol and, per worker and in total, the time up, the time held by the protocol
    (blocked by SSP, at a barrier) and the work lost (going down) or cancelled (k_sync, or
    the server's stops of a rule: `optimizer.stops`, `optimizer.restarts`).
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
