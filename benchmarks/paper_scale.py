"""The GEM paper's figure-2 workload end to end: wall time and peak memory.

The paper's CNN, 100 workers, GEM (lr 0.05), lognormal compute times (median 0.1 s,
sigma 0.25), each worker training one epoch at full-MNIST size: 60,000 / 64 = 937
mini-batches per worker, 93,700 commits in all (a ``StepsBudget`` of 937 steps per worker).

Data: full MNIST when ``gemsim.problems.Mnist()`` can load it (the IDX files in
``$GEMSIM_DATA``); otherwise mnist-5k, whose 4,000 training images are simply cycled: each
worker's step counter still runs to 937, i.e. about 15 reshuffled passes of 62 steps. The
report says which data set ran.

Reported separately: data loading, the timing simulation, the execution plan, building the
executor, compilation (JAX tracing, lowering and XLA compiling, summed from JAX's own
monitoring events during ``execute``), and execution (the rest of ``execute``); then commits
and samples per second of execution and peak memory (the process's peak RSS and, on an
accelerator, the device's peak bytes in use).

With ``--commits N`` only the first N commits of the trace are executed and the full run's
wall time is extrapolated linearly from the measured execution rate (labelled an
extrapolation). Targets (issue 5): <= 15 minutes on a 2-core CPU, <= 1 minute on one GPU.

    python benchmarks/paper_scale.py                    # the full run (table)
    python benchmarks/paper_scale.py --commits 5000     # a slice, extrapolated
    python benchmarks/paper_scale.py --json --executor batched
"""

from __future__ import annotations

import argparse
import json
import sys
import time

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
    rule_label,
    trace_plan,
)

from gemsim.problems import Mnist
from gemsim.timing import StepsBudget
from gemsim.types import Status

WORKERS = 100
STEPS_PER_WORKER = 60_000 // BATCH  # one epoch of full MNIST: 937
TARGET_CPU_S = 15 * 60
TARGET_GPU_S = 60


def load_problem() -> tuple[object, str, str]:
    """(problem, data set name, note): full MNIST where it loads, else mnist-5k cycled."""
    try:
        return cnn_problem(Mnist()), "mnist", ""
    except (FileNotFoundError, ValueError) as err:
        note = (
            f"full MNIST not loaded ({err}); ran mnist-5k instead: its 4,000 training images "
            f"are cycled, each worker's step counter running to {STEPS_PER_WORKER} "
            f"(about {STEPS_PER_WORKER * BATCH / 4000:.0f} reshuffled passes)"
        )
        return cnn_problem(), "mnist-5k", note


def progress_printer(every: int):
    """A progress callback printing to stderr about every ``every`` commits."""
    state = {"next": every, "start": time.perf_counter()}

    def report(done: int, total: int) -> None:
        if done >= state["next"] or done == total:
            state["next"] = done + every
            elapsed = time.perf_counter() - state["start"]
            print(f"  {done:,}/{total:,} commits, {elapsed:,.0f} s", file=sys.stderr, flush=True)

    return report


def timed_stages(
    executor: str, commits: int | None, eval_every: int | None, diagnostics_every: int | None = None
) -> dict:
    """Run every stage of the workload, timing each; returns the raw figures."""
    t = {}
    start = time.perf_counter()
    problem, dataset, note = load_problem()
    t["load_s"], start = time.perf_counter() - start, time.perf_counter()
    rule = gem_rule(diagnostics_every)
    trace = lognormal_trace(WORKERS, StepsBudget(STEPS_PER_WORKER))
    t["simulate_s"], start = time.perf_counter() - start, time.perf_counter()
    plan = trace_plan(trace, rule, stop=commits, eval_every=eval_every)
    t["plan_s"], start = time.perf_counter() - start, time.perf_counter()
    ex = make_executor(executor, rule, problem, WORKERS)
    t["setup_s"] = time.perf_counter() - start
    with compile_clock() as clock:
        start = time.perf_counter()
        out = ex.execute(plan, progress=progress_printer(max(len(plan) // 10, 1)))
        wall = time.perf_counter() - start
    t["compile_s"], t["compilations"] = clock.seconds, clock.count
    t["execute_s"] = wall - clock.seconds
    return {
        "dataset": dataset,
        "note": note,
        "executor": executor_name(ex),
        "trace_commits": len(trace),
        "commits": out.n_commits,
        "status": out.status.value,
        "final": out.final,
        "timings": t,
    }


def run(
    executor: str, commits: int | None, eval_every: int | None, diagnostics_every: int | None = None
) -> dict:
    """The workload's figures, with the full-run extrapolation where only a slice ran."""
    env = environment()
    raw = timed_stages(executor, commits, eval_every, diagnostics_every)
    t, done, full = raw["timings"], raw["commits"], raw["trace_commits"]
    rate = done / t["execute_s"]
    fixed = t["load_s"] + t["simulate_s"] + t["setup_s"] + t["compile_s"]
    full_execute = full / rate
    target = TARGET_CPU_S if env["platform"] == "cpu" else TARGET_GPU_S
    total = fixed + t["plan_s"] * full / max(done, 1) + full_execute
    return {
        "benchmark": "paper_scale",
        "problem": f"cnn on {raw['dataset']}",
        "rule": rule_label(diagnostics_every),
        "workers": WORKERS,
        "steps_per_worker": STEPS_PER_WORKER,
        "environment": env,
        **raw,
        "commits_per_s": rate,
        "samples_per_s": rate * BATCH,
        "extrapolated": done < full,
        "full_run_wall_s": total,
        "full_run_execute_s": full_execute,
        "target_s": target,
        "target_met": total <= target,
        "peak_rss_bytes": peak_rss_bytes(),
        "device_peak_bytes": device_peak_bytes(),
    }


def table(r: dict) -> str:
    """The report as a fixed-width text table."""
    t = r["timings"]
    how = "extrapolated from the execution rate" if r["extrapolated"] else "measured"
    lines = [
        f"Paper scale: {r['problem']}, {r['workers']} workers x {r['steps_per_worker']} steps "
        f"= {r['trace_commits']:,} commits, {r['rule']}, {r['executor']} executor",
        environment_line(r["environment"]),
        f"{'stage':<34}{'seconds':>10}",
    ]
    for name in ("load", "simulate", "plan", "setup", "compile", "execute"):
        lines.append(f"{name:<34}{t[name + '_s']:>10.1f}")
    lines += [
        f"{'commits executed':<34}{r['commits']:>10,}  (status {r['status']})",
        f"{'XLA compilations':<34}{t['compilations']:>10}",
        f"{'commits/s (execution)':<34}{r['commits_per_s']:>10,.1f}",
        f"{'samples/s (execution)':<34}{r['samples_per_s']:>10,.0f}",
        f"{'full-run wall time':<34}{r['full_run_wall_s']:>10.1f}  ({how}; "
        f"target {r['target_s']} s: {'met' if r['target_met'] else 'NOT met'})",
        f"{'peak RSS':<34}{gib(r['peak_rss_bytes']):>10}",
        f"{'device peak memory':<34}{gib(r['device_peak_bytes']):>10}",
        "final: " + ", ".join(f"{k} {v:.4g}" for k, v in r["final"].items()),
    ]
    if r["note"]:
        lines.append(f"note: {r['note']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--commits", type=int, default=None, help="run only the first N commits and extrapolate"
    )
    parser.add_argument("--executor", choices=EXECUTORS, default="auto")
    parser.add_argument(
        "--eval-every", type=int, default=None, help="evaluate every N commits (default never)"
    )
    add_diagnostics_every(parser)
    args = parser.parse_args(argv)
    report = run(args.executor, args.commits, args.eval_every, args.diagnostics_every)
    print(json.dumps(report) if args.json else table(report))
    return 0 if report["status"] == Status.OK.value else 1


if __name__ == "__main__":
    sys.exit(main())
