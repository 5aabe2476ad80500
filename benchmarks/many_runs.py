"""Many runs in one program (`engine: {many_runs}`) against the same runs one by one, in one
process.

Workloads (GEM, lr 0.05, momentum 0.9, n = 16 workers with exponential compute times, the
runs differing in their seed):

- ``quadratic``: dim 100, noise 0.1, 2,000 commits, 64 repeats;
- ``logistic``: softmax regression on mnist-5k, b = 64, 2,000 commits, 32 repeats;
- ``cnn``: the paper's CNN on mnist-5k, b = 64, 256 commits, 8 repeats.

Two figures each, runs per second of both ways and their ratio:

- ``engine``: the commits alone. The runs' traces and problems are built beforehand, every
  program is compiled beforehand (one warm-up call of each way), then rounds alternate the
  two ways (medians over ``--rounds``): one by one, the sequential executor on each run;
  together, `engine.ManyRunsExecutor` on every run at once (`many_runs` as `auto` would
  size it; the CNN, which `auto` leaves alone on a CPU, at all 8).
- ``sweep``: the whole `gemsim run` of the workload in this process (timing simulations,
  engine, run folders written), with ``engine.many_runs`` ``off`` and ``auto`` (the CNN:
  8), each run twice: the first pass compiles (``cold``), the second reuses the process's
  compiled programs (``warm``).

Every run's trace executed together must equal its one-by-one run's; parameters are reported
as equal (same sha256) or by their largest relative difference.

    python benchmarks/many_runs.py                # every workload (about 15 min on 2 cores)
    python benchmarks/many_runs.py --workloads quadratic --rounds 3
    python benchmarks/many_runs.py --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from _common import environment, environment_line

from gemsim import config, engine, timing
from gemsim.app.execute._stages import build_problem
from gemsim.app.sweep import _many_runs_plan
from gemsim.app.verbs._run_sweep import run_file
from gemsim.config import build_rule
from gemsim.results import read_manifest

BASE = {
    "name": "many-runs-bench",
    "seed": 0,
    "workers": {"count": 16, "compute": {"dist": "exponential", "mean": 0.1}},
    "optimizer": {"rule": "gem", "lr": 0.05, "momentum": 0.9},
}
WORKLOADS = {
    "quadratic": {
        "problem": {"model": {"name": "quadratic", "dim": 100, "noise": 0.1}, "batch_size": 1},
        "budget": {"commits": 2000},
        "repeats": 64,
    },
    "logistic": {
        "problem": {"model": "logistic", "dataset": "mnist-5k", "batch_size": 64},
        "budget": {"commits": 2000},
        "repeats": 32,
    },
    "cnn": {
        "problem": {"model": "cnn", "dataset": "mnist-5k", "batch_size": 64},
        "budget": {"commits": 256},
        "repeats": 8,
        "engine": {"many_runs": 8},  # auto runs the CNN one by one on a CPU
    },
}


def scenario_doc(name: str) -> dict:
    return {**BASE, **WORKLOADS[name]}


def engine_figures(name: str, rounds: int) -> dict:
    """Runs per second of the commits alone, one by one against together."""
    doc = scenario_doc(name)
    expanded = config.expand(config.parse_scenario(doc, name))
    scenarios = [e.scenario for e in expanded]
    runs = []
    for s in scenarios:
        problem = build_problem(s)
        trace = timing.simulate(config.build_cluster(s), seed=s.seed)
        plan = engine.plan_of(trace, window=1, eval_every=s.eval.every)
        runs.append(engine.RunInputs(plan, problem, problem.init_params, {}))
    size, why = _many_runs_plan.unit_size(scenarios[0], len(runs))
    if name == "cnn":
        default = config.parse_scenario({**doc, "engine": {}}, name)
        auto = _many_runs_plan.unit_size(default, len(runs))
        why = f"forced 8; auto: {auto[0]} ({auto[1]})"
    rule = build_rule(scenarios[0])
    single = engine.SequentialExecutor(rule, runs[0].problem, params=runs[0].params, n_workers=16)
    many = engine.ManyRunsExecutor(lambda h: build_rule(scenarios[0]), runs[0], n_workers=16)
    units = [runs[a : a + size] for a in range(0, len(runs), size)]

    def one_by_one():
        return [single.execute(r.plan, problem=r.problem, params=r.params) for r in runs]

    def together():
        return [out for u in units for out in many.execute(u)]

    alone, joined = one_by_one(), together()  # compiles both
    times = {"one_by_one": [], "together": []}
    for _ in range(rounds):
        for label, fn in (("one_by_one", one_by_one), ("together", together)):
            started = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - started)
    o, b = statistics.median(times["one_by_one"]), statistics.median(times["together"])
    return {
        "runs": len(runs),
        "unit_size": size,
        "unit_choice": why,
        "one_by_one_runs_per_s": len(runs) / o,
        "together_runs_per_s": len(runs) / b,
        "ratio": o / b,
        "params": _compare(alone, joined),
        "seconds": times,
    }


def _compare(alone, together) -> str:
    worst = 0.0
    for a, b in zip(alone, together, strict=True):
        for x, y in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params), strict=True):
            x, y = np.asarray(x), np.asarray(y)
            worst = max(worst, float(np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-30)))
    return "equal" if worst == 0.0 else f"max relative difference {worst:.2g}"


def sweep_figures(name: str) -> dict:
    """Runs per second of the whole sweep in this process, cold and warm, off against auto."""
    doc = scenario_doc(name)
    setting = doc.get("engine", {}).get("many_runs", "auto")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.yaml"
        path.write_text(json.dumps(doc))
        folders = {}
        for label, value in (("off", "off"), ("together", setting)):
            for attempt in ("cold", "warm"):
                folder = Path(tmp) / f"{label}-{attempt}"
                started = time.perf_counter()
                _, rows = run_file(
                    path, out=folder, quiet=True, overrides=[f"engine.many_runs={value}"]
                )
                out[f"{label}_{attempt}_s"] = time.perf_counter() - started
                folders[label] = (folder, rows)
        n = len(folders["off"][1])
        for key in list(out):
            out[key.replace("_s", "_runs_per_s")] = n / out[key]
        out["ratio_cold"] = out["off_cold_s"] / out["together_cold_s"]
        out["ratio_warm"] = out["off_warm_s"] / out["together_warm_s"]
        (off_dir, rows), (on_dir, _) = folders["off"], folders["together"]
        same_trace = same_params = 0
        for r in rows:
            a, b = read_manifest(off_dir / r.run_id), read_manifest(on_dir / r.run_id)
            same_trace += a["trace_sha256"] == b["trace_sha256"]
            same_params += a["params_sha256"] == b["params_sha256"]
        out["same_trace"], out["same_params"], out["runs"] = same_trace, same_params, n
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=3, help="engine rounds (medians)")
    parser.add_argument("--skip-sweep", action="store_true", help="the engine figures only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = {"environment": environment(), "workloads": {}}
    for name in args.workloads:
        entry = {"engine": engine_figures(name, args.rounds)}
        if not args.skip_sweep:
            entry["sweep"] = sweep_figures(name)
        report["workloads"][name] = entry
        if not args.json:
            _print(name, entry)
    report["environment_after"] = environment()
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(environment_line(report["environment_after"]))
    return 0


def _print(name: str, entry: dict) -> None:
    e = entry["engine"]
    print(
        f"{name}: {e['runs']} runs, batches of {e['batch_size']} ({e['batch_choice']})\n"
        f"  engine: one by one {e['one_by_one_runs_per_s']:.2f} runs/s, together "
        f"{e['together_runs_per_s']:.2f} runs/s: {e['ratio']:.2f}x; parameters {e['params']}"
    )
    s = entry.get("sweep")
    if s:
        print(
            f"  sweep: cold {s['off_cold_runs_per_s']:.2f} -> {s['together_cold_runs_per_s']:.2f} "
            f"runs/s ({s['ratio_cold']:.2f}x), warm {s['off_warm_runs_per_s']:.2f} -> "
            f"{s['together_warm_runs_per_s']:.2f} runs/s ({s['ratio_warm']:.2f}x); same trace "
            f"{s['same_trace']}/{s['runs']}, same parameters {s['same_params']}/{s['runs']}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
