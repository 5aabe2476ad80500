"""Timing-model throughput: simulated commits per second of wall-clock time.

Runs ``gemsim.timing.simulate`` for n = 10, 100 and 1000 workers with log-normal compute
times and a budget of 200,000 commits, once with network and server times off and once
with them on (log-normal pull and push latency plus the model transfer over a given
bandwidth, log-normal service at the PS). Each configuration is run ``--repeats`` times
and the median rate is reported. The bar (docs/design.md §9) is >= 50,000 commits/s
at n = 100 with network and service on; the goal is 100,000.

Usage::

    python benchmarks/timing.py            # a table
    python benchmarks/timing.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np
import simpy

from gemsim.timing import ClusterSpec, CommitBudget, LogNormal, WorkerSpec, simulate

BAR = 50_000
GOAL = 100_000


def build_spec(n: int, network: bool, commits: int) -> ClusterSpec:
    """n workers with log-normal compute (median 1 s); network and service optional."""
    workers = (WorkerSpec(LogNormal(median=1.0, sigma=0.5)),) * n
    if not network:
        return ClusterSpec(workers=workers, budget=CommitBudget(commits))
    return ClusterSpec(
        workers=workers,
        budget=CommitBudget(commits),
        pull=LogNormal(median=0.01, sigma=0.5),
        push=LogNormal(median=0.01, sigma=0.5),
        bandwidth_bytes_per_s=1e9,
        model_bytes=4_000_000,
        # 0.5 ms per commit: the PS is about half busy at n = 1000.
        service=LogNormal(median=0.0005, sigma=0.5),
    )


def measure(n: int, network: bool, commits: int, repeats: int) -> dict[str, Any]:
    """Median commits per wall-clock (and per CPU) second over ``repeats`` runs."""
    spec = build_spec(n, network, commits)
    rates, cpu_rates, trace = [], [], None
    for seed in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        trace = simulate(spec, seed)
        rates.append(len(trace) / (time.perf_counter() - wall))
        cpu_rates.append(len(trace) / (time.process_time() - cpu))
    utilisation = trace.busy_time / trace.duration if trace.duration else 0.0
    return {
        "n_workers": n,
        "network_and_service": network,
        "commits": len(trace),
        "commits_per_s": statistics.median(rates),
        "commits_per_s_runs": rates,
        # Per CPU second of this process: the same figure, free of other load on the box.
        "commits_per_cpu_s": statistics.median(cpu_rates),
        "virtual_seconds": trace.duration,
        "ps_utilisation": utilisation,
        "staleness_mean": float(trace.staleness.mean()),
    }


def run(commits: int, repeats: int, sizes: list[int]) -> dict[str, Any]:
    """All configurations, and whether the bar is met."""
    rows = [measure(n, net, commits, repeats) for n in sizes for net in (False, True)]
    bar_rows = [r for r in rows if r["n_workers"] == 100 and r["network_and_service"]]
    return {
        "benchmark": "timing",
        "python": platform.python_version(),
        "simpy": simpy.__version__,
        "numpy": np.__version__,
        "machine": platform.machine(),
        "repeats": repeats,
        "results": rows,
        "bar_commits_per_s": BAR,
        "goal_commits_per_s": GOAL,
        "bar_met": bool(bar_rows) and all(r["commits_per_s"] >= BAR for r in bar_rows),
    }


def table(report: dict[str, Any]) -> str:
    """The report as a fixed-width text table."""
    lines = [
        f"{'n':>5}  {'network+service':>15}  {'commits':>8}  {'commits/s':>10}  "
        f"{'per CPU s':>10}  {'virtual s':>10}  {'PS util':>7}  {'mean tau':>8}"
    ]
    for r in report["results"]:
        lines.append(
            f"{r['n_workers']:>5}  {'on' if r['network_and_service'] else 'off':>15}  "
            f"{r['commits']:>8}  {r['commits_per_s']:>10,.0f}  {r['commits_per_cpu_s']:>10,.0f}  "
            f"{r['virtual_seconds']:>10.1f}  "
            f"{r['ps_utilisation']:>7.3f}  {r['staleness_mean']:>8.2f}"
        )
    verdict = "met" if report["bar_met"] else "NOT met"
    lines.append(
        f"bar {report['bar_commits_per_s']:,} commits/s at n = 100 with network+service: "
        f"{verdict} (median of {report['repeats']} runs; goal {report['goal_commits_per_s']:,})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--commits", type=int, default=200_000, help="commits per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    args = parser.parse_args(argv)
    report = run(args.commits, args.repeats, args.sizes)
    print(json.dumps(report) if args.json else table(report))
    return 0 if report["bar_met"] or 100 not in args.sizes else 1


if __name__ == "__main__":
    sys.exit(main())
