"""Timing-model throughput: simulated commits per second, and as a fraction of bare SimPy.

Runs ``gemsim.timing.simulate`` for n = 10, 16, 100 and 1000 workers with log-normal compute
times and a budget of 200,000 commits, once with network and server times off and once
with them on (log-normal pull and push latency plus the model transfer over a given
bandwidth, log-normal service at the PS). With network and service on it also runs, for
each n: churn and slowdowns on together (exponential up periods of mean 300 s and down
periods of mean 30 s; episodes of 2-4x slower compute lasting an exponential 10 s, every
exponential 60 s), SSP with bound 4, K-async with k = n / 10, and the shared PS link. Each
configuration is run ``--repeats`` times and the median rate is reported.

Bare SimPy, the reference: two SimPy processes and no gemsim code. A worker process waits
for a `simpy.Timeout` (its cycle), then triggers the server's wake-up event; the server
process waits for that event and makes the next one. One *exchange* is that pair of events
(the timeout and the wake-up, two `Environment.step`s and two process resumes): the SimPy
work a minimal commit needs when written the SimPy way. Before each run of a configuration
the bare exchange is run too (as many exchanges as the run has commits), so that each
fraction compares two figures measured side by side, per CPU second of this process (the
figure that other load on the machine disturbs least). The same exchange with n worker
processes (``--bare-sizes``) shows what a larger event queue costs SimPy itself.

The bars: >= 100,000 commits/s at n = 100 with network and service on, and >= 50,000 with
churn and slowdowns on as well (docs/design.md §9); on the plain asynchronous protocol
(network and service off), commits per second >= 50 % of bare SimPy's exchanges per second,
at n = 16 and n = 1000 (issue 39).

Client populations (issue 37): K = 1,000 slots (the same log-normal compute) serving N =
100,000 and N = 1,000,000 clients with log-normal speed factors (median 1, sigma 0.5) and
churn (exponential up periods of mean 300 s, down periods of mean 30 s), uniform selection,
network and service off and on. Each configuration runs in a process of its own, whose peak
resident memory is reported beside its rate (and that of a process that only imports
gemsim.timing). The bar: >= 50,000 commits/s at N = 100,000, K = 1,000 with churn, network and
service on.

Usage::

    python benchmarks/timing.py                    # a table
    python benchmarks/timing.py --json             # one JSON object
    python benchmarks/timing.py --population-only  # the population cases alone
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import platform
import resource
import statistics
import subprocess
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
    Population,
    Slowdowns,
    Ssp,
    Uniform,
    WorkerSpec,
    simulate_run,
)

BARS = {"plain": 100_000, "churn+slowdowns": 50_000}
BARE_BAR = 0.5  # commits per CPU second / bare exchanges per CPU second, plain async
BARE_BAR_SIZES = (16, 1000)
FEATURES = ("plain", "churn+slowdowns", "ssp(4)", "k_async(n/10)", "shared link")
CHURN = Churn(uptime=Exponential(300.0), downtime=Exponential(30.0))
SLOWDOWNS = Slowdowns(every=Exponential(60.0), factor=Uniform(2.0, 4.0), duration=Exponential(10.0))
POPULATION_BAR = 50_000  # commits/s at N = 100,000, K = 1,000, churn, network and service on
POPULATION_CASES = ((100_000, 1_000), (1_000_000, 1_000))


def build_spec(n: int, network: bool, commits: int, feature: str = "plain") -> ClusterSpec:
    """n workers with log-normal compute (median 1 s); network and service optional, and
    one of `FEATURES`."""
    worker = WorkerSpec(LogNormal(median=1.0, sigma=0.5))
    if feature == "churn+slowdowns":
        worker = dataclasses.replace(worker, churn=CHURN, slowdowns=SLOWDOWNS)
    spec = ClusterSpec(workers=(worker,) * n, budget=CommitBudget(commits))
    if network:
        spec = with_network(spec)
    if feature == "ssp(4)":
        spec = dataclasses.replace(spec, protocol=Ssp(4))
    elif feature == "k_async(n/10)":
        spec = dataclasses.replace(spec, protocol=KAsync(max(1, n // 10)))
    elif feature == "shared link":
        spec = dataclasses.replace(spec, shared_link=True)
    return spec


def with_network(spec: ClusterSpec) -> ClusterSpec:
    """Log-normal pull and push latency, a 4 MB model over 1 GB/s, log-normal service."""
    return dataclasses.replace(
        spec,
        pull=LogNormal(median=0.01, sigma=0.5),
        push=LogNormal(median=0.01, sigma=0.5),
        # 4 MB over 1 GB/s: 4 ms a transfer, the shared link saturates at 250 commits/s.
        bandwidth_bytes_per_s=1e9,
        model_bytes=4_000_000,
        # 0.5 ms per commit: the PS is about half busy at n = 1000.
        service=LogNormal(median=0.0005, sigma=0.5),
    )


def population_spec(n_clients: int, slots: int, network: bool, commits: int) -> ClusterSpec:
    """K slots of log-normal compute (median 1 s) serving N churning clients of log-normal
    speed factors, chosen uniformly."""
    population = Population(n_clients, speed=LogNormal(median=1.0, sigma=0.5), churn=CHURN)
    spec = ClusterSpec(
        workers=(WorkerSpec(LogNormal(median=1.0, sigma=0.5)),) * slots,
        budget=CommitBudget(commits),
        population=population,
    )
    return with_network(spec) if network else spec


def peak_rss_mib() -> float:
    """This process's peak resident memory in MiB: Linux's VmHWM, which starts anew at exec
    (``ru_maxrss`` keeps the peak of the process that forked it); ``ru_maxrss`` elsewhere."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def population_child(n_clients: int, slots: int, network: bool, commits: int, repeats: int):
    """Run in a process of its own: the population case's rates and the peak memory."""
    spec = population_spec(n_clients, slots, network, commits)
    rates, cpu_rates, seconds, run = [], [], [], None
    for seed in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        run = simulate_run(spec, seed)
        seconds.append(time.perf_counter() - wall)
        rates.append(len(run.trace) / seconds[-1])
        cpu_rates.append(len(run.trace) / (time.process_time() - cpu))
    trace, clients = run.trace, run.clients
    return {
        "n_clients": n_clients,
        "slots": slots,
        "network_and_service": network,
        "commits": len(trace),
        "seconds": statistics.median(seconds),
        "commits_per_s": statistics.median(rates),
        "commits_per_s_runs": rates,
        "commits_per_cpu_s": statistics.median(cpu_rates),
        "peak_rss_mib": peak_rss_mib(),
        "virtual_seconds": trace.duration,
        "staleness_mean": float(trace.staleness.mean()),
        "tasks_lost": int(clients.lost.sum()),
        "clients_chosen": int((clients.started > 0).sum()),
        "slot_wait_seconds": float(run.workers.waited_seconds.sum()),
    }


def measure_population(commits: int, repeats: int) -> dict[str, Any]:
    """Every population case in a fresh process (its own peak memory), and the import alone."""
    rows = []
    for (n_clients, slots), network in itertools.product(POPULATION_CASES, (False, True)):
        argv = ["--child", json.dumps([n_clients, slots, network, commits, repeats])]
        out = subprocess.run(
            [sys.executable, __file__, *argv], check=True, capture_output=True, text=True
        )
        rows.append(json.loads(out.stdout))
    baseline = subprocess.run(
        [sys.executable, __file__, "--child", "null"], check=True, capture_output=True, text=True
    )
    bar = [r for r in rows if r["n_clients"] == 100_000 and r["network_and_service"]]
    return {
        "results": rows,
        "import_only_peak_rss_mib": float(baseline.stdout),
        "bar_commits_per_s": POPULATION_BAR,
        "bar_met": bool(bar) and all(r["commits_per_s"] >= POPULATION_BAR for r in bar),
    }


def bare_simpy(n_workers: int, exchanges: int) -> tuple[float, float]:
    """Seconds (wall, CPU) bare SimPy takes for ``exchanges`` exchanges between
    ``n_workers`` worker processes and one server process (no gemsim code).

    Each worker loops: wait for a `simpy.Timeout` of its next delay (log-normal, drawn
    beforehand), then trigger the server's wake-up event; the server waits for its wake-up
    event and makes the next one. One exchange is one timeout and one wake-up.
    """
    env = simpy.Environment()
    rng = np.random.default_rng(0)
    wake = [env.event()]

    def server(env: simpy.Environment):
        for _ in range(exchanges):
            yield wake[0]
            wake[0] = env.event()

    def worker(env: simpy.Environment, delays: list[float]):
        for delay in itertools.cycle(delays):
            yield env.timeout(delay)
            if not wake[0].triggered:  # two workers at one instant wake the server once
                wake[0].succeed()

    done = env.process(server(env))
    for _ in range(n_workers):
        env.process(worker(env, rng.lognormal(0.0, 0.5, size=1024).tolist()))
    wall, cpu = time.perf_counter(), time.process_time()
    env.run(until=done)
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(n: int, network: bool, commits: int, repeats: int, feature: str) -> dict[str, Any]:
    """Median commits per wall-clock (and per CPU) second over ``repeats`` runs, each after
    a bare SimPy run of as many exchanges (two processes); their ratio per CPU second."""
    spec = build_spec(n, network, commits, feature)
    rates, cpu_rates, bare_cpu_rates, run = [], [], [], None
    for seed in range(repeats):
        _, bare_cpu = bare_simpy(1, commits)
        wall, cpu = time.perf_counter(), time.process_time()
        run = simulate_run(spec, seed)
        rates.append(len(run.trace) / (time.perf_counter() - wall))
        cpu_rates.append(len(run.trace) / (time.process_time() - cpu))
        bare_cpu_rates.append(commits / bare_cpu)
    trace = run.trace
    utilisation = trace.busy_time / trace.duration if trace.duration else 0.0
    fractions = [c / b for c, b in zip(cpu_rates, bare_cpu_rates, strict=True)]
    return {
        "n_workers": n,
        "network_and_service": network,
        "feature": feature,
        "commits": len(trace),
        "commits_per_s": statistics.median(rates),
        "commits_per_s_runs": rates,
        # Per CPU second of this process: the same figure, free of other load on the box.
        "commits_per_cpu_s": statistics.median(cpu_rates),
        "bare_exchanges_per_cpu_s": statistics.median(bare_cpu_rates),
        # Commits per CPU second / bare SimPy exchanges per CPU second, run by run.
        "fraction_of_bare": statistics.median(fractions),
        "fraction_of_bare_runs": fractions,
        "virtual_seconds": trace.duration,
        "ps_utilisation": utilisation,
        "staleness_mean": float(trace.staleness.mean()),
        "availability": float(run.workers.availability.mean()),
    }


def measure_bare(sizes: list[int], exchanges: int, repeats: int) -> list[dict[str, Any]]:
    """Bare SimPy's exchanges per second with n worker processes, median of ``repeats``."""
    rows = []
    for n in sizes:
        runs = [bare_simpy(n, exchanges) for _ in range(repeats)]
        rows.append(
            {
                "n_workers": n,
                "exchanges": exchanges,
                "exchanges_per_s": statistics.median(exchanges / w for w, _ in runs),
                "exchanges_per_cpu_s": statistics.median(exchanges / c for _, c in runs),
                "events_per_exchange": 2,
            }
        )
    return rows


def configurations(sizes: list[int]) -> list[tuple[int, bool, str]]:
    plain = [(n, net, "plain") for n in sizes for net in (False, True)]
    return plain + [(n, True, f) for n in sizes for f in FEATURES[1:]]


def run(
    commits: int,
    repeats: int,
    sizes: list[int],
    bare_sizes: list[int],
    *,
    persistent: bool = True,
    population: bool = True,
) -> dict[str, Any]:
    """All configurations, bare SimPy, the population cases, and whether the bars are met
    (``persistent`` or ``population`` False: leave those out)."""
    if not persistent:
        sizes, bare_sizes = [], []
    bare = measure_bare(bare_sizes, commits, repeats)
    rows = [measure(n, net, commits, repeats, f) for n, net, f in configurations(sizes)]
    verdicts = {}
    for feature, bar in BARS.items():
        at = [
            r
            for r in rows
            if r["n_workers"] == 100 and r["network_and_service"] and r["feature"] == feature
        ]
        verdicts[feature] = bool(at) and all(r["commits_per_s"] >= bar for r in at)
    plain_async = [
        r
        for r in rows
        if r["n_workers"] in BARE_BAR_SIZES
        and not r["network_and_service"]
        and r["feature"] == "plain"
    ]
    verdicts["fraction of bare SimPy"] = len(plain_async) == len(BARE_BAR_SIZES) and all(
        r["fraction_of_bare"] >= BARE_BAR for r in plain_async
    )
    populations = measure_population(commits, repeats) if population else None
    if not persistent:
        verdicts = {}
    if populations is not None:
        verdicts["population"] = populations["bar_met"]
    return {
        "benchmark": "timing",
        "python": platform.python_version(),
        "simpy": simpy.__version__,
        "numpy": np.__version__,
        "machine": platform.machine(),
        "load_average": os.getloadavg(),
        "repeats": repeats,
        "bare_simpy": {
            "exchange": (
                "a worker process's simpy.Timeout, then the server process's wake-up event: "
                "2 SimPy events and 2 process resumes"
            ),
            "results": bare,
        },
        "results": rows,
        "bars_commits_per_s": BARS,
        "bar_fraction_of_bare": {"fraction": BARE_BAR, "n_workers": list(BARE_BAR_SIZES)},
        "population": populations,
        "bars_met": verdicts,
        "bar_met": all(verdicts.values()),
    }


def population_table(report: dict[str, Any]) -> list[str]:
    """The population cases as text lines."""
    populations = report["population"]
    lines = [
        "",
        f"{'clients':>9}  {'slots':>5}  {'network+service':>15}  {'commits':>8}  "
        f"{'seconds':>7}  {'commits/s':>10}  {'per CPU s':>10}  {'peak MiB':>8}  "
        f"{'virtual s':>9}  {'mean tau':>8}  {'lost':>6}  {'chosen':>8}",
    ]
    for r in populations["results"]:
        lines.append(
            f"{r['n_clients']:>9,}  {r['slots']:>5}  "
            f"{'on' if r['network_and_service'] else 'off':>15}  {r['commits']:>8}  "
            f"{r['seconds']:>7.2f}  {r['commits_per_s']:>10,.0f}  "
            f"{r['commits_per_cpu_s']:>10,.0f}  {r['peak_rss_mib']:>8.0f}  "
            f"{r['virtual_seconds']:>9.1f}  {r['staleness_mean']:>8.1f}  "
            f"{r['tasks_lost']:>6}  {r['clients_chosen']:>8,}"
        )
    verdict = "met" if populations["bar_met"] else "NOT met"
    lines.append(
        f"peak memory of a process that only imports gemsim.timing: "
        f"{populations['import_only_peak_rss_mib']:.0f} MiB"
    )
    lines.append(
        f"bar {populations['bar_commits_per_s']:,} commits/s at N = 100,000, K = 1,000 with "
        f"churn, network and service: {verdict} (median of {report['repeats']} runs); load "
        "average " + ", ".join(f"{x:.1f}" for x in report["load_average"])
    )
    return lines


def table(report: dict[str, Any]) -> str:
    """The report as fixed-width text tables."""
    if not report["results"]:
        return "\n".join(population_table(report)[1:])
    lines = [
        f"bare SimPy: one exchange = {report['bare_simpy']['exchange']}",
        f"{'workers':>7}  {'exchanges/s':>12}  {'per CPU s':>12}",
    ]
    for b in report["bare_simpy"]["results"]:
        lines.append(
            f"{b['n_workers']:>7}  {b['exchanges_per_s']:>12,.0f}  "
            f"{b['exchanges_per_cpu_s']:>12,.0f}"
        )
    lines += [
        "",
        f"{'n':>5}  {'network+service':>15}  {'feature':<15}  {'commits':>8}  {'commits/s':>10}  "
        f"{'per CPU s':>10}  {'bare/CPU s':>10}  {'of bare':>7}  {'virtual s':>10}  "
        f"{'PS util':>7}  {'mean tau':>8}  {'up':>5}",
    ]
    for r in report["results"]:
        lines.append(
            f"{r['n_workers']:>5}  {'on' if r['network_and_service'] else 'off':>15}  "
            f"{r['feature']:<15}  {r['commits']:>8}  {r['commits_per_s']:>10,.0f}  "
            f"{r['commits_per_cpu_s']:>10,.0f}  {r['bare_exchanges_per_cpu_s']:>10,.0f}  "
            f"{r['fraction_of_bare']:>7.0%}  {r['virtual_seconds']:>10.1f}  "
            f"{r['ps_utilisation']:>7.3f}  {r['staleness_mean']:>8.2f}  {r['availability']:>5.3f}"
        )
    for feature, bar in report["bars_commits_per_s"].items():
        verdict = "met" if report["bars_met"][feature] else "NOT met"
        lines.append(
            f"bar {bar:,} commits/s at n = 100 with network+service, {feature}: {verdict} "
            f"(median of {report['repeats']} runs)"
        )
    bare_bar = report["bar_fraction_of_bare"]
    verdict = "met" if report["bars_met"]["fraction of bare SimPy"] else "NOT met"
    lines.append(
        f"bar {bare_bar['fraction']:.0%} of bare SimPy's exchanges per CPU second, plain async "
        f"at n = {' and '.join(map(str, bare_bar['n_workers']))}: {verdict}; load average "
        + ", ".join(f"{x:.1f}" for x in report["load_average"])
    )
    if report["population"] is not None:
        lines += population_table(report)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--commits", type=int, default=200_000, help="commits per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 16, 100, 1000])
    parser.add_argument(
        "--bare-sizes",
        type=int,
        nargs="+",
        default=[1, 16, 100, 1000],
        help="worker processes of the bare SimPy exchange (1: the two-process reference)",
    )
    parser.add_argument(
        "--population-only", action="store_true", help="only the client-population cases"
    )
    parser.add_argument(
        "--no-population", action="store_true", help="leave the client-population cases out"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one population case, as JSON
    args = parser.parse_args(argv)
    if args.child:  # "null": import only, for the baseline of peak memory
        case = json.loads(args.child)
        print(json.dumps(population_child(*case)) if case else peak_rss_mib())
        return 0
    report = run(
        args.commits,
        args.repeats,
        args.sizes,
        args.bare_sizes,
        persistent=not args.population_only,
        population=not args.no_population,
    )
    print(json.dumps(report) if args.json else table(report))
    measured = args.population_only or (
        100 in args.sizes and set(BARE_BAR_SIZES) <= set(args.sizes)
    )
    return 0 if report["bar_met"] or not measured else 1


if __name__ == "__main__":
    sys.exit(main())
