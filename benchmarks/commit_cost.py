"""What a rule's commit costs beside DOWNPOUR's, with the gradient made small.

At b = 64 the CNN's gradient takes 3-7 ms and a shared machine's noise (±10 % between runs,
bursts that slow single runs by half) hides differences of 0.1 ms in the commit. Here the
same CNN computes its gradient on mini-batches of ``--batch`` examples (default 4, a tenth of
the time), so the rest of a commit, which does not depend on the batch (reading the
worker's row, the rule's math and diagnostics, writing the row), is a third of the step.
The values of pi, the zero gradients and the staleness are those of a real run, so the
diagnostics' histograms see what they see at b = 64.

Measured, in one process, with the default executor (sequential) on the engine bar's trace
(lognormal compute, n workers): GEM with its defaults, GEM without diagnostics
(``diagnostics_every`` past the run) and DOWNPOUR, each on ``--commits`` commits, in
``--repeats`` interleaved rounds (alternating the order). Reported: microseconds per
commit (medians) and, per variant, the median of its per-round difference to DOWNPOUR,
the figure to compare between two versions of the code (run each in its own process; the
difference to DOWNPOUR cancels most of the machine's drift).

    python benchmarks/commit_cost.py                    # n = 8, b = 4, 512 commits, 11 rounds
    python benchmarks/commit_cost.py --workers 100 --commits 1024 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from _common import (
    LR,
    cnn_problem,
    environment,
    environment_line,
    lognormal_trace,
    make_executor,
    plan_runner,
    trace_plan,
)

from gemsim.rules import downpour, gem
from gemsim.timing import CommitBudget

REFERENCE = "downpour"


def variants(n: int, commits: int, batch: int) -> dict:
    """name -> a function running the variant's plan once and returning its commits."""
    problem = cnn_problem(batch_size=batch)
    trace = lognormal_trace(n, CommitBudget(commits))
    rules = {
        "gem": gem(lr=LR),
        "gem, no diagnostics": gem(lr=LR, diagnostics_every=commits + 1),
        REFERENCE: downpour(lr=LR),
    }
    return {
        name: plan_runner(make_executor("sequential", rule, problem, n), trace_plan(trace, rule))
        for name, rule in rules.items()
    }


def measure(runs: dict, repeats: int) -> dict[str, list[float]]:
    """Microseconds per commit of each variant, per round, after a compiling call."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(repeats):
        for name in names if r % 2 == 0 else reversed(names):
            start = time.perf_counter()
            commits = runs[name]()
            times[name].append((time.perf_counter() - start) / commits * 1e6)
    return times


def summary(times: dict[str, list[float]]) -> dict:
    ref = times[REFERENCE]
    return {
        name: {
            "us_per_commit": statistics.median(t),
            "minus_downpour_us": statistics.median(a - b for a, b in zip(t, ref, strict=True)),
        }
        for name, t in times.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--commits", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    env = environment()
    times = measure(variants(args.workers, args.commits, args.batch), args.repeats)
    report = {
        "benchmark": "commit_cost",
        "workers": args.workers,
        "commits": args.commits,
        "batch": args.batch,
        "repeats": args.repeats,
        "environment": env,
        "results": summary(times),
        "all_rounds": times,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(
        f"Commit cost: the CNN at b={args.batch}, n={args.workers}, {args.commits} commits, "
        f"medians of {args.repeats} rounds"
    )
    print(environment_line(env))
    print(f"{'variant':<24}{'us/commit':>12}{'minus ' + REFERENCE:>18}")
    for name, row in report["results"].items():
        print(f"{name:<24}{row['us_per_commit']:>12,.1f}{row['minus_downpour_us']:>18,.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
