"""A population's run as `gemsim trace` reports it (no gradient): participation, selection
fairness (the chi-square against each client's time up, so that uniform selection among the
available clients is judged fairly) and staleness by client speed decile; and the per-client
table (`clients.parquet`, `gemsim trace --out`), whose columns a run's worker summary also
has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemsim import timing

CLIENTS_FILE = "clients.parquet"
"""Per-client participation of a population's run: client, speed, started, completed, lost,
up_seconds."""


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


def run_clients(scenario, trace) -> dict[str, Any] | None:
    """`client_columns` of a simulated population's run, for its worker summary: the timing
    model is run again (a few tenths of a second next to the gradients) for what the trace
    does not hold, the tasks started and lost. None without a population, or where the
    trace is not the timing model's (a replay of another trace)."""
    if scenario.clients is None or trace.client is None:
        return None
    from ._trace_store import TimingInputs

    inputs = TimingInputs.of(scenario)
    simulation = timing.simulate_run(
        inputs.spec, seed=inputs.seed, schedule_seed=inputs.schedule_seed
    )
    if simulation.trace.sha256() != trace.sha256():
        return None
    return simulated_clients(inputs.spec, simulation, inputs.seed)


def simulated_clients(spec: timing.ClusterSpec, simulation: timing.Simulation, seed: int):
    """`client_columns` of a simulated run."""
    duration = simulation.trace.duration
    return client_columns(spec.population, simulation.clients, seed, duration)


def write_clients(folder: Path, spec: timing.ClusterSpec, simulation: timing.Simulation, seed):
    """Write the per-client table of a population's run into `folder`; the path, or None
    without a population."""
    import pandas as pd

    columns = simulated_clients(spec, simulation, seed)
    if columns is None:
        return None
    table = pd.DataFrame({"client": range(len(columns["speed"])), **columns})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CLIENTS_FILE
    table.to_parquet(path, index=False)
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
        f"completed, {part['tasks_lost']:,} lost, {part['tasks_in_flight']:,} in flight at the end",
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
    lines.append("    decile  speed from      to  clients  commits  mean staleness")
    for row in population["staleness_by_speed_decile"]:
        mean = row["staleness_mean"]
        lines.append(
            f"    {row['decile']:>6}  {row['speed_low']:>10.4g}  {row['speed_high']:>6.4g}"
            f"  {row['clients']:>7,}  {row['commits']:>7,}  "
            f"{'-' if mean is None else format(mean, '.4g'):>14}"
        )
    return lines
