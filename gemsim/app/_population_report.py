"""A population's run as `gemsim trace` reports it (no gradient): participation, selection
fairness (the chi-square against each client's time up, so that uniform selection among the
available clients is judged fairly) and staleness, tasks started and lost by client speed
decile; the per-client table (`clients.parquet`, `gemsim trace --out`), whose columns a run's
worker summary also has; and the tasks, one row each (`clients_tasks.parquet`, in a run's
folder and beside `clients.parquet`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemsim import timing

CLIENTS_FILE = "clients.parquet"
"""Per-client participation of a population's run: client, speed, started, completed, lost,
up_seconds (the per-client sums of its tasks, `clients_tasks.parquet`)."""


def population_report(spec: timing.ClusterSpec, simulation: timing.Simulation, seed: int):
    """`timing.population_summary` of a population's run with each client's time up as the
    exposure, plus N, K and the slots' time waiting for a client; None without a population."""
    population, clients = spec.population, simulation.clients
    if population is None or clients is None:
        return None
    up = timing.client_up_seconds(population, seed, simulation.trace.duration)
    summary = timing.population_summary(simulation.trace, clients, population, exposure=up)
    return {
        "clients": population.n_clients,
        "concurrency": spec.n_workers,
        **summary,
        "slot_waited_seconds": float(simulation.workers.waited_seconds.sum()),
    }


def client_columns(
    population: timing.Population | None,
    clients: timing.ClientReport | None,
    seed: int,
    duration: float,
) -> dict[str, Any] | None:
    """Each client's speed factor, tasks started, completed and lost (from the timing model's
    report, or a real run's server), and time up within the run's `duration` (arrays indexed
    by client id); None without a population."""
    if population is None or clients is None:
        return None
    return {
        "speed": clients.speed,
        "started": clients.started,
        "completed": clients.completed,
        "lost": clients.lost,
        "up_seconds": timing.client_up_seconds(population, seed, duration),
    }


def run_clients(scenario, clients: timing.ClientReport | None, duration: float):
    """`client_columns` of a population's run, for its worker summary, from the per-client
    report its timing came with (the timing model's one run, kept beside the trace and in
    the trace store; or a real run's server). None without a population, or without a
    report (a replay of a trace: its tasks are not known)."""
    if scenario.clients is None or clients is None:
        return None
    from gemsim import config

    population = config.build_cluster(scenario).population
    return client_columns(population, clients, scenario.seed, duration)


def tasks_frame(tasks: timing.ClientTasks | None, trace) -> Any:
    """`clients_tasks.parquet`: one row per task of a population's run, in the order they
    started: ``task``, ``client``, ``slot``, ``start``, ``end`` (its commit's time in the
    trace, the time its client went down, NaN in flight at the end), ``outcome``
    (``committed``, ``lost``, ``in_flight``), ``commit`` (its row in the trace, else -1) and
    ``staleness`` (the trace's, else -1). None without tasks."""
    import numpy as np
    import pandas as pd

    if tasks is None:
        return None
    commit = np.asarray(tasks.commit, np.int64)
    done = commit >= 0
    end = np.array(tasks.end, np.float64)
    # A real server's pool sees a commit a moment after the trace's clock reading of it.
    end[done] = trace.time[commit[done]]
    staleness = np.full(len(commit), -1, np.int64)
    staleness[done] = trace.staleness[commit[done]]
    outcome = pd.Categorical.from_codes(
        np.asarray(tasks.outcome, np.int8), categories=list(timing.TASK_OUTCOMES)
    )
    return pd.DataFrame(
        {
            "task": np.arange(len(commit), dtype=np.int64),
            "client": np.asarray(tasks.client, np.int64),
            "slot": np.asarray(tasks.slot, np.int64),
            "start": np.asarray(tasks.start, np.float64),
            "end": end,
            "outcome": outcome,
            "commit": commit,
            "staleness": staleness,
        }
    )


def simulated_clients(spec: timing.ClusterSpec, simulation: timing.Simulation, seed: int):
    """`client_columns` of a simulated run."""
    duration = simulation.trace.duration
    return client_columns(spec.population, simulation.clients, seed, duration)


def write_clients(folder: Path, spec: timing.ClusterSpec, simulation: timing.Simulation, seed):
    """Write the per-client table of a population's run into `folder`, and its tasks beside
    (`clients_tasks.parquet`); the table's path, or None without a population."""
    import pandas as pd

    from gemsim.results import CLIENT_TASKS_FILE

    columns = simulated_clients(spec, simulation, seed)
    if columns is None:
        return None
    table = pd.DataFrame({"client": range(len(columns["speed"])), **columns})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CLIENTS_FILE
    table.to_parquet(path, index=False)
    tasks = tasks_frame(simulation.clients.tasks, simulation.trace)
    if tasks is not None:
        tasks.to_parquet(folder / CLIENT_TASKS_FILE, index=False)
    return path


def population_lines(population: dict[str, Any] | None) -> list[str]:
    """The report's lines: N, K, selection, tasks, fairness, staleness by speed decile."""
    if not population:
        return []
    part, fair = population["participation"], population["fairness"]
    lines = [
        f"  clients             {population['clients']:,} (concurrency "
        f"{population['concurrency']:,}, selection {population['selection']})",
        f"  tasks               {part['tasks_started']:,} started, {part['tasks_completed']:,} "
        f"completed, {part['tasks_lost']:,} lost{_share(part['loss_rate'])}, "
        f"{part['tasks_in_flight']:,} in flight at the end",
        f"  clients chosen      {part['clients_chosen']:,} of {part['clients']:,} "
        f"({part['clients_committed']:,} committed at least once)",
    ]
    if population["slot_waited_seconds"]:
        lines.append(
            f"  slots waited        {population['slot_waited_seconds']:.6g} slot-seconds "
            "with no client available"
        )
    if fair["cv"] is not None:
        chi = ""
        if fair["chi_square"] is not None:
            chi = f", chi-square {fair['chi_square']:.6g} on {fair['dof']} dof"
            if fair["p_value"] is not None:
                small = (fair.get("p_method") or "").startswith("monte carlo")
                how = f", {fair['p_method']}: expected counts below 5" if small else ""
                chi += f" (p = {fair['p_value']:.3g}{how})"
        lines.append(f"  selection fairness  CV {fair['cv']:.4g}, Jain {fair['jain']:.4g}{chi}")
    lines.append("  by client speed decile (0: slowest)")
    deciles = population["staleness_by_speed_decile"]
    tasks = bool(deciles) and "lost" in deciles[0]
    head = "  started     lost" if tasks else ""
    lines.append(f"    decile  speed from      to  clients  commits  mean staleness{head}")
    for row in deciles:
        mean = row["staleness_mean"]
        counts = f"  {row['started']:>7,}  {row['lost']:>7,}" if tasks else ""
        lines.append(
            f"    {row['decile']:>6}  {row['speed_low']:>10.4g}  {row['speed_high']:>6.4g}"
            f"  {row['clients']:>7,}  {row['commits']:>7,}  "
            f"{'-' if mean is None else format(mean, '.4g'):>14}{counts}"
        )
    return lines


def _share(rate: float | None) -> str:
    return "" if rate is None else f" ({100 * rate:.3g} %)"
