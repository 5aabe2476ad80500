"""Sweeps at scale: the wall time of a whole `gemsim run` sweep, one way against another.

Each variant is the command a user types (`gemsim run FILE --out DIR --quiet --json` plus the
variant's own arguments), run in a fresh process, so that every variant pays the same start-up
(imports, data, compilation) as it would for a user: the figure is what the command costs,
not the engine alone. Workloads (scenario files written by this script):

- ``logistic-seeds``: softmax regression on mnist-5k (b = 64), 8 workers with lognormal
  compute times, GEM, ``--commits`` commits per run, 8 seeds: every run shares one compiled
  program;
- ``logistic-lrs``: the same with 8 learning rates and one seed: one by one, 8 compiled
  programs (a learning rate is a constant of the code compiled for one run); together, one
  (the learning rates are traced).

Variants: ``jobs1`` (one process, one run after another: ``engine.many_runs=off``),
``jobs2`` (``--jobs 2``, one run per unit), ``together`` (``engine.many_runs=auto``, the
default: the 8 runs in one program, in one process). Add a row by adding to ``VARIANTS`` or a
workload to ``WORKLOADS``. Rounds are interleaved (every variant once per round, so that
drifts of the machine hit all alike); figures are medians over rounds. Every variant's runs
must give the trace and parameter hashes of the first variant's, or the script says which
did not; ``together`` only the traces (its parameters are the same bits only where XLA's
vmapped arithmetic is: docs/running.md, "Many runs in one program"; ``same params`` counts them).

Columns: ``wall s`` of the command; ``CPU s``, user + system seconds of the command and its
worker processes (the work done, whatever else runs on the machine); ``share``, CPU s over
wall s: the cores the sweep actually got (on an idle 2-core machine up to 1 for ``jobs1``
and 2 for ``jobs2``; less when other processes compete for the cores); ``procs``, the
processes that ran runs; ``sum run s``, ``slowest`` and ``fastest``, the runs' own wall times
from their manifests (a run that compiled its program is the slowest; one that reused a
program compiled before in its process is the fastest).

    python benchmarks/sweep.py                     # table (a few minutes on 2 cores)
    python benchmarks/sweep.py --json
    python benchmarks/sweep.py --workloads logistic-seeds --rounds 3 --commits 1000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

OFF = ["--set", "engine.many_runs=off"]
VARIANTS: dict[str, list[str]] = {
    "jobs1": OFF,
    "jobs2": ["--jobs", "2", *OFF],
    "together": ["--set", "engine.many_runs=auto"],
}
RUNS = 8
LRS = [0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2]


def logistic(commits: int) -> dict:
    return {
        "name": "sweep-bench",
        "seed": 0,
        "workers": {"count": 8, "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.25}},
        "budget": {"commits": commits},
        "problem": {"model": "logistic", "dataset": "mnist-5k", "batch_size": 64},
        "optimizer": {"rule": "gem", "lr": 0.05, "momentum": 0.9},
        "eval": {"every": commits, "subset": 1000},
    }


WORKLOADS = {
    "logistic-seeds": lambda commits: {**logistic(commits), "repeats": RUNS},
    "logistic-lrs": lambda commits: {**logistic(commits), "sweep": {"optimizer.lr": LRS}},
}


def run_variant(scenario: Path, out: Path, args: list[str]) -> dict:
    """One sweep in a fresh process: its wall time and each run's hashes and wall time."""
    cmd = [sys.executable, "-m", "gemsim.cli", "run", str(scenario), "--out", str(out)]
    started, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(
        [*cmd, "--quiet", "--json", *args], capture_output=True, text=True, check=False
    )
    wall, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd + args)} exited {done.returncode}: {done.stderr}")
    runs = {}
    for line in done.stdout.splitlines():
        run_id = json.loads(line)["run_id"]
        manifest = json.loads((out / run_id / "manifest.json").read_text())
        runs[run_id] = {
            "hashes": (manifest["trace_sha256"], manifest["params_sha256"]),
            "wall": manifest["wall_seconds"],
            "pid": manifest["provenance"]["placement"]["pid"],
        }
    return {"wall": wall, "cpu": cpu, "runs": runs}


def _children_cpu() -> float:
    """CPU seconds (user + system) of every finished child process and their reaped
    descendants (the sweep's worker processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def got_params(got: dict) -> dict:
    return {k: x["hashes"] for k, x in got["runs"].items()}


def split(runs: dict) -> dict:
    """The processes that ran the runs, and the runs' own wall times (a run that compiled its
    program is the slowest; one that reused a program compiled before is the fastest)."""
    walls = [r["wall"] for r in runs.values()]
    return {
        "processes": len({r["pid"] for r in runs.values()}),
        "sum_run_wall_s": sum(walls),
        "slowest_run_s": max(walls),
        "fastest_run_s": min(walls),
    }


def measure(workload: str, commits: int, variants: list[str], rounds: int, tmp: Path) -> dict:
    scenario = tmp / f"{workload}.yaml"
    scenario.write_text(yaml.safe_dump(WORKLOADS[workload](commits)))
    rounds_of: dict[str, list[dict]] = {v: [] for v in variants}
    mismatches, reference = [], None
    for r in range(rounds):
        for v in variants:
            got = run_variant(scenario, tmp / f"{workload}-{v}-{r}", VARIANTS[v])
            rounds_of[v].append({"wall_s": got["wall"], "cpu_s": got["cpu"], **split(got["runs"])})
            hashes = {k: x["hashes"] for k, x in got["runs"].items()}
            reference = reference or hashes
            if v == "together":  # traces equal; parameters where XLA's vmapped arithmetic is
                hashes = {k: (h[0], reference[k][1]) for k, h in hashes.items()}
                same = sum(h == reference[k] for k, h in got_params(got).items())
                rounds_of[v][-1]["same_params"] = same
            if hashes != reference:
                mismatches.append(f"{v} round {r}")
    medians = {
        v: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for v, rs in rounds_of.items()
    }
    base = medians[variants[0]]["wall_s"]
    rows = [
        {
            "variant": v,
            "args": " ".join(VARIANTS[v]),
            **medians[v],
            "runs_per_s": RUNS / medians[v]["wall_s"],
            "speedup": base / medians[v]["wall_s"],
            "cpu_share": medians[v]["cpu_s"] / medians[v]["wall_s"],
            "rounds": [x["wall_s"] for x in rounds_of[v]],
        }
        for v in variants
    ]
    return {"workload": workload, "commits": commits, "rows": rows, "mismatches": mismatches}


def environment() -> dict:
    """The machine and its load (other processes share the cores: see `cpu_share`)."""
    return {
        "python": sys.version.split()[0],
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def table(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"{env['cpus']} CPUs | python {env['python']} | load {env['load_average']} before, "
        f"{report['load_average_after']} after"
    ]
    for w in report["workloads"]:
        lines.append(f"\n{w['workload']}: {RUNS} runs of {w['commits']} commits")
        lines.append(
            f"{'variant':<10} {'wall s':>8} {'CPU s':>7} {'share':>6} {'runs/s':>7} "
            f"{'speed-up':>9} {'procs':>5} {'sum run s':>9} {'slowest':>8} {'fastest':>8}"
        )
        for r in w["rows"]:
            lines.append(
                f"{r['variant']:<10} {r['wall_s']:>8.1f} {r['cpu_s']:>7.1f} {r['cpu_share']:>6.2f} "
                f"{r['runs_per_s']:>7.3f} {r['speedup']:>8.2f}x {r['processes']:>5.0f} "
                f"{r['sum_run_wall_s']:>9.1f} "
                f"{r['slowest_run_s']:>8.1f} {r['fastest_run_s']:>8.1f}"
            )
        verdict = "identical" if not w["mismatches"] else f"DIFFER: {w['mismatches']}"
        lines.append(f"trace and params hashes across variants: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--commits", type=int, default=2000, help="commits per run")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (medians)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gemsim-sweep-bench-") as tmp:
        report = {
            "environment": environment(),
            "workloads": [
                measure(w, args.commits, args.variants, args.rounds, Path(tmp))
                for w in args.workloads
            ],
        }
        report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report) if args.json else table(report))
    return 1 if any(w["mismatches"] for w in report["workloads"]) else 0


if __name__ == "__main__":
    sys.exit(main())
