"""A population's run as `gemsim trace` reports it (no gradient): participation, selection
fairness (the chi-square against each client's time up, so that uniform selection among the
available clients is judged fairly) and staleness, tasks started and lost by client speed
decile; the per-client table (`clients.parquet`, `gemsim trace --out`), whose columns a run's
worker summary also has; and the tasks, one row each (`clients_tasks.parquet`, in a run's
folder and beside `clients.parquet`). Everything comes from the timing model's one run (its
`timing.ClientReport`): nothing is drawn again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemsim import timing

from ..record._tables import client_columns, tasks_frame

CLIENTS_FILE = "clients.parquet"
"""Per-client participation of a population's run: client, speed, started, completed, lost,
up_seconds (the per-client sums of its tasks, `clients_tasks.parquet`)."""


def population_report(spec: timing.ClusterSpec, simulation: timing.Simulation):
    """`timing.population_summary` of a population's run with each client's time up (from
    the run's per-client report) as the exposure, plus N, K and the slots' time waiting for a
    client; None without a population."""
    population, clients = spec.population, simulation.clients
    if population is None or clients is None:
        return None
    up = clients.up_seconds
    summary = timing.population_summary(simulation.trace, clients, population, exposure=up)
    return {
        "clients": population.n_clients,
        "concurrency": spec.n_workers,
        **summary,
        "slot_waited_seconds": float(simulation.workers.waited_seconds.sum()),
    }


def write_clients(folder: Path, simulation: timing.Simulation):
    """Write the per-client table of a population's run into `folder`, and its tasks beside
    (`clients_tasks.parquet`), from the run's per-client report; the table's path, or None
    without a population."""
    import pandas as pd

    from gemsim.results import CLIENT_TASKS_FILE

    if simulation.clients is None:
        return None
    columns = client_columns(simulation.clients)
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
