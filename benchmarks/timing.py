"""Timing-model throughput: simulated commits per second of wall-clock time.

Runs ``gemsim.timing.simulate`` for n = 10, 100 and 1000 workers with log-normal compute
times and a budget of 200,000 commits, once with network and server times off and once
with them on (log-normal pull and push latency plus the model transfer over a given
bandwidth, log-normal service at the PS). With network and service on it also runs, for
each n: churn and slowdowns on together (exponential up periods of mean 300 s and down
periods of mean 30 s; episodes of 2-4x slower compute lasting an exponential 10 s, every
exponential 60 s), SSP with bound 4, K-async with k = n / 10, and the shared PS link. Each
configuration is run ``--repeats`` times and the median rate is reported. The bars
(docs/design.md §9) are >= 100,000 commits/s at n = 100 with network and service on, and
>= 50,000 with churn and slowdowns on as well.

Usage::

    python benchmarks/timing.py            # a table
    python benchmarks/timing.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np
import simpy

from gemsim.timing import (
    Churn,
    ClusterSpec,
    CommitBudget,
    Exponential,
    KAsync,
    LogNormal,
    Slowdowns,
    Ssp,
    Uniform,
    WorkerSpec,
    simulate_run,
)

BARS = {"plain": 100_000, "churn+slowdowns": 50_000}
FEATURES = ("plain", "churn+slowdowns", "ssp(4)", "k_async(n/10)", "shared link")
CHURN = Churn(uptime=Exponential(300.0), downtime=Exponential(30.0))
SLOWDOWNS = Slowdowns(every=Exponential(60.0), factor=Uniform(2.0, 4.0), duration=Exponential(10.0))


def build_spec(n: int, network: bool, commits: int, feature: str = "plain") -> ClusterSpec:
    """n workers with log-normal compute (median 1 s); network and service optional, and
    one of `FEATURES`."""
    worker = WorkerSpec(LogNormal(median=1.0, sigma=0.5))
    if feature == "churn+slowdowns":
        worker = dataclasses.replace(worker, churn=CHURN, slowdowns=SLOWDOWNS)
    spec = ClusterSpec(workers=(worker,) * n, budget=CommitBudget(commits))
    if network:
        spec = dataclasses.replace(
            spec,
            pull=LogNormal(median=0.01, sigma=0.5),
            push=LogNormal(median=0.01, sigma=0.5),
            # 4 MB over 1 GB/s: 4 ms a transfer, the shared link saturates at 250 commits/s.
            bandwidth_bytes_per_s=1e9,
            model_bytes=4_000_000,
            # 0.5 ms per commit: the PS is about half busy at n = 1000.
            service=LogNormal(median=0.0005, sigma=0.5),
        )
    if feature == "ssp(4)":
        spec = dataclasses.replace(spec, protocol=Ssp(4))
    elif feature == "k_async(n/10)":
        spec = dataclasses.replace(spec, protocol=KAsync(max(1, n // 10)))
    elif feature == "shared link":
        spec = dataclasses.replace(spec, shared_link=True)
    return spec


def measure(n: int, network: bool, commits: int, repeats: int, feature: str) -> dict[str, Any]:
    """Median commits per wall-clock (and per CPU) second over ``repeats`` runs."""
    spec = build_spec(n, network, commits, feature)
    rates, cpu_rates, run = [], [], None
    for seed in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        run = simulate_run(spec, seed)
        rates.append(len(run.trace) / (time.perf_counter() - wall))
        cpu_rates.append(len(run.trace) / (time.process_time() - cpu))
    trace = run.trace
    utilisation = trace.busy_time / trace.duration if trace.duration else 0.0
    return {
        "n_workers": n,
        "network_and_service": network,
        "feature": feature,
        "commits": len(trace),
        "commits_per_s": statistics.median(rates),
        "commits_per_s_runs": rates,
        # Per CPU second of this process: the same figure, free of other load on the box.
        "commits_per_cpu_s": statistics.median(cpu_rates),
        "virtual_seconds": trace.duration,
        "ps_utilisation": utilisation,
        "staleness_mean": float(trace.staleness.mean()),
        "availability": float(run.workers.availability.mean()),
    }


def configurations(sizes: list[int]) -> list[tuple[int, bool, str]]:
    plain = [(n, net, "plain") for n in sizes for net in (False, True)]
    return plain + [(n, True, f) for n in sizes for f in FEATURES[1:]]


def run(commits: int, repeats: int, sizes: list[int]) -> dict[str, Any]:
    """All configurations, and whether the bars are met."""
    rows = [measure(n, net, commits, repeats, f) for n, net, f in configurations(sizes)]
    verdicts = {}
    for feature, bar in BARS.items():
        at = [
            r
            for r in rows
            if r["n_workers"] == 100 and r["network_and_service"] and r["feature"] == feature
        ]
        verdicts[feature] = bool(at) and all(r["commits_per_s"] >= bar for r in at)
    return {
        "benchmark": "timing",
        "python": platform.python_version(),
        "simpy": simpy.__version__,
        "numpy": np.__version__,
        "machine": platform.machine(),
        "repeats": repeats,
        "results": rows,
        "bars_commits_per_s": BARS,
        "bars_met": verdicts,
        "bar_met": all(verdicts.values()),
    }


def table(report: dict[str, Any]) -> str:
    """The report as a fixed-width text table."""
    lines = [
        f"{'n':>5}  {'network+service':>15}  {'feature':<15}  {'commits':>8}  {'commits/s':>10}  "
        f"{'per CPU s':>10}  {'virtual s':>10}  {'PS util':>7}  {'mean tau':>8}  {'up':>5}"
    ]
    for r in report["results"]:
        lines.append(
            f"{r['n_workers']:>5}  {'on' if r['network_and_service'] else 'off':>15}  "
            f"{r['feature']:<15}  {r['commits']:>8}  {r['commits_per_s']:>10,.0f}  "
            f"{r['commits_per_cpu_s']:>10,.0f}  {r['virtual_seconds']:>10.1f}  "
            f"{r['ps_utilisation']:>7.3f}  {r['staleness_mean']:>8.2f}  {r['availability']:>5.3f}"
        )
    for feature, bar in report["bars_commits_per_s"].items():
        verdict = "met" if report["bars_met"][feature] else "NOT met"
        lines.append(
            f"bar {bar:,} commits/s at n = 100 with network+service, {feature}: {verdict} "
            f"(median of {report['repeats']} runs)"
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
