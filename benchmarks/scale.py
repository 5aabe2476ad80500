"""Scale: 1,000 simulated workers of the paper's CNN with GEM, within this machine's memory.

Simulates ``--workers`` workers (default 1,000) with lognormal compute times (median 0.1 s,
sigma 0.25), executes the first ``--commits`` commits (default 3,000) with GEM (lr 0.05) on
the CNN / mnist-5k at b = 64, and reports:

- the engine's per-worker state: one float32 row per worker holding its parameter snapshot
  and its GEM state (``layout.row_size * 4`` bytes), and the whole slots array
  (``(n + 1)`` rows: one spare);
- the process's resident memory before the executor is built and its peak (RSS), next to
  the machine's total memory, and the device's peak bytes where the backend reports them;
- wall times: timing simulation and plan, building the executor, compilation (from JAX's
  monitoring events) and execution;
- the run's status. The script exits with status 1 unless the run ended ``ok``.

    python benchmarks/scale.py                      # table
    python benchmarks/scale.py --json
    python benchmarks/scale.py --commits 200        # a quick check
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import psutil
from _common import (
    BATCH,
    EXECUTORS,
    add_diagnostics_every,
    cnn_problem,
    compile_clock,
    device_peak_bytes,
    environment,
    environment_line,
    executor_name,
    gem_rule,
    gib,
    lognormal_trace,
    make_executor,
    peak_rss_bytes,
    rss_bytes,
    rule_label,
    trace_plan,
)

from gemsim.timing import CommitBudget
from gemsim.types import Status


def state_bytes(ex, n: int) -> dict[str, int]:
    """Bytes of the engine's per-worker rows (snapshot + rule state) and of all of them."""
    row = ex.layout.row_size * 4
    return {
        "snapshot_bytes_per_worker": ex.layout.snapshot_size * 4,
        "row_bytes_per_worker": row,
        "slots_bytes": (n + 1) * row,
    }


def run(n: int, commits: int, executor: str, diagnostics_every: int | None = None) -> dict:
    """Simulate, build and execute; every stage timed, memory recorded."""
    env, t = environment(), {}
    problem, rule = cnn_problem(), gem_rule(diagnostics_every)
    rss_before = rss_bytes()
    start = time.perf_counter()
    plan = trace_plan(lognormal_trace(n, CommitBudget(commits)), rule)
    t["simulate_and_plan_s"], start = time.perf_counter() - start, time.perf_counter()
    ex = make_executor(executor, rule, problem, n)
    t["setup_s"] = time.perf_counter() - start
    with compile_clock() as clock:
        start = time.perf_counter()
        out = ex.execute(plan)
        wall = time.perf_counter() - start
    t["compile_s"], t["execute_s"] = clock.seconds, wall - clock.seconds
    return {
        "benchmark": "scale",
        "problem": "cnn on mnist-5k",
        "rule": rule_label(diagnostics_every),
        "workers": n,
        "executor": executor_name(ex),
        "environment": env,
        "commits": out.n_commits,
        "status": out.status.value,
        "timings": t,
        "commits_per_s": out.n_commits / t["execute_s"],
        "samples_per_s": out.n_commits * BATCH / t["execute_s"],
        **state_bytes(ex, n),
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": peak_rss_bytes(),
        "machine_memory_bytes": psutil.virtual_memory().total,
        "device_peak_bytes": device_peak_bytes(),
    }


def table(r: dict) -> str:
    """The report as a fixed-width text table."""
    t = r["timings"]
    mib = lambda b: f"{b / 2**20:,.2f} MiB"
    rows = [
        ("snapshot per worker", mib(r["snapshot_bytes_per_worker"])),
        ("row per worker (snapshot + state)", mib(r["row_bytes_per_worker"])),
        (f"slots array ({r['workers'] + 1:,} rows)", gib(r["slots_bytes"])),
        ("RSS before the executor", gib(r["rss_before_bytes"])),
        ("peak RSS", gib(r["peak_rss_bytes"])),
        ("machine memory", gib(r["machine_memory_bytes"])),
        ("device peak memory", gib(r["device_peak_bytes"])),
        ("simulate + plan", f"{t['simulate_and_plan_s']:.1f} s"),
        ("build executor", f"{t['setup_s']:.1f} s"),
        ("compile", f"{t['compile_s']:.1f} s"),
        ("execute", f"{t['execute_s']:.1f} s"),
        ("commits/s (execution)", f"{r['commits_per_s']:,.1f}"),
        ("samples/s (execution)", f"{r['samples_per_s']:,.0f}"),
        ("status", f"{r['status']} after {r['commits']:,} commits"),
    ]
    head = [
        f"Scale: {r['workers']:,} workers, {r['problem']}, b={BATCH}, {r['rule']}, "
        f"{r['executor']} executor",
        environment_line(r["environment"]),
    ]
    return "\n".join(head + [f"{name:<36}{value:>16}" for name, value in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--executor", choices=EXECUTORS, default="auto")
    add_diagnostics_every(parser)
    args = parser.parse_args(argv)
    report = run(args.workers, args.commits, args.executor, args.diagnostics_every)
    print(json.dumps(report) if args.json else table(report))
    if report["status"] != Status.OK.value:
        print(f"scale: the run ended with status {report['status']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
