"""A whole study timed end to end: `gemsim run` as a user runs it, in a fresh process, with
where its wall time goes (start-up, timing, compilation, execution, writing).

Cases (issue 39's bars, docs/design.md §9):

- ``repeats``: 64 repeats of GEM on the quadratic (dim 100), 16 workers, 10,000 commits each,
  ``engine.many_runs`` ``auto`` against ``off``: bar, ``auto`` >= 5x faster.
- ``rules``: 4 rules (gem, downpour, staleness, dcasgd: each a window of 1) x 4 learning rates
  x 3 seeds on the MLP / digits, 16 workers, 3,000 commits: bars, the traces simulated equal
  the distinct timings (3, not 48), and the wall time is within 1.2x of the engine's own
  execution plus compilation.
- ``quickstart``: `gemsim run scenarios/quickstart.yaml` twice, each into a new folder, the
  first with a fresh compilation cache: bar, the second <= 0.7x the first.

Every command runs in a fresh process with a compilation cache folder of the round's own
(``GEMSIM_CACHE_DIR``; the caller's ``JAX_*`` settings removed), each into a new results folder
(a cold trace store). ``repeats`` and ``rules`` run each variant with the cache cold (the
round's fresh folder) and then warm. Rounds are interleaved; figures are medians over rounds.

The measured process is this script (``--child``), which imports JAX and gemsim, installs
probes and calls the `gemsim` command's own entry point (`gemsim.cli.main`, which ends the
process as the command does) with the case's arguments.
Columns: ``wall s``, the process from start to exit; ``start-up``, interpreter and imports
(JAX's included) until the command starts; ``timing``, seconds this process spent getting
traces (reading the store, waiting for a timing process, simulating: the part of the timing
model on the critical path); ``compile``, JAX's tracing, lowering and compilation (cache
hits included); ``execute``, the executors' `execute` less the compilation inside it;
``write``, writing run folders (the part that does not overlap execution or compilation:
folders are written in the background); ``other``, the rest (checks, plans, data, many-runs
set-up, exit hooks); ``simulated``, runs whose manifest says their trace was simulated.

    python benchmarks/study.py                     # every case, 3 rounds (about 25 min)
    python benchmarks/study.py --cases repeats rules --rounds 3 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
REPEATS = {
    "name": "study-repeats",
    "seed": 0,
    "workers": {"count": 16, "compute": {"dist": "exponential", "mean": 0.1}},
    "budget": {"commits": 10_000},
    "problem": {"model": {"name": "quadratic", "dim": 100, "noise": 0.1}, "batch_size": 1},
    "optimizer": {"rule": "gem", "lr": 0.05, "momentum": 0.9},
    "repeats": 64,
}
RULES = {
    "name": "study-rules",
    "seed": 0,
    "workers": {"count": 16, "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.25}},
    "budget": {"commits": 3000},
    "problem": {"model": {"name": "mlp"}, "dataset": "digits", "batch_size": 16},
    "optimizer": {"rule": "gem", "lr": 0.05},
    "eval": {"every": 1000},
    "seeds": [0, 1, 2],
    "sweep": {
        "optimizer": [
            {"rule": "gem", "lr": 0.05, "momentum": 0.9},
            {"rule": "downpour", "lr": 0.05},
            {"rule": "staleness", "lr": 0.05, "weight": "inverse"},
            {"rule": "dcasgd", "lr": 0.05},
        ],
        "optimizer.lr": [0.01, 0.02, 0.05, 0.1],
    },
}
DISTINCT_TIMINGS = {"rules": 3}
BARS = {"repeats": 5.0, "rules": 1.2, "quickstart": 0.7}
PARTS = ("startup", "timing", "compile", "execute", "write", "other")


# --- the measured process --------------------------------------------------------------------


def child(args: list[str], report: Path) -> None:
    """`gemsim ARGS` in this process, with probes, ended as the `gemsim` command ends
    (`gemsim.cli.main`: exit hooks, then no interpreter teardown); the breakdown written to
    `report` by an exit hook."""
    import atexit

    import jax  # noqa: F401  (start-up: imported before the command, as its first run would)
    from _common import compile_clock

    import gemsim.cli
    import gemsim.engine
    import gemsim.results
    from gemsim.app.sweep import _traces

    spans: dict[str, list[tuple[float, float]]] = {"timing": [], "execute": [], "write": []}

    def timed(owner, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def probe(*a, **k):
            start = time.time()  # JAX's compile events are in time.time()
            try:
                return inner(*a, **k)
            finally:
                spans[part].append((start, time.time()))

        setattr(owner, name, probe)

    timed(_traces.Traces, "timed_for", "timing")
    timed(gemsim.engine.Executor, "execute", "execute")
    timed(gemsim.engine.ManyRunsExecutor, "execute", "execute")
    timed(gemsim.results.RunResult, "write", "write")
    # Entered here, left by the exit hook below: `main` ends the process without returning.
    clocking = compile_clock()
    clock = clocking.__enter__()
    started = time.time()

    def write_report() -> None:  # the command's end: the first exit hook `main` runs
        ended = time.time()
        clocking.__exit__(None, None, None)
        compiled = _union(clock.spans)
        execute, write = _union(spans["execute"]), _union(spans["write"])
        figures = {
            "run_started": started,
            "run_ended": ended,
            "timing": _seconds(_union(spans["timing"])),
            "compile": _seconds(compiled),
            "execute": _seconds(execute) - _overlap(execute, compiled),
            # folders are written in the background: what overlaps the engine is not waited for
            "write": _seconds(write) - _overlap(write, _union(spans["execute"] + compiled)),
        }
        report.write_text(json.dumps(figures))

    atexit.register(write_report)
    sys.argv = ["gemsim", "run", *args, "--quiet"]
    gemsim.cli.main()


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _seconds(spans) -> float:
    return sum(b - a for a, b in spans)


def _overlap(spans, others) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in spans for c, d in others)


# --- the driver ------------------------------------------------------------------------------


def measure(scenario: Path, out: Path, cache: Path, extra: list[str], tmp: Path) -> dict:
    """One `gemsim run` in a fresh process: its wall time, breakdown and runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env["GEMSIM_CACHE_DIR"] = str(cache)
    report = tmp / f"report-{time.monotonic_ns()}.json"
    cmd = [sys.executable, __file__, "--child", str(report), "--"]
    args = [str(scenario), "--out", str(out), *extra]
    started = time.time()
    done = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.time() - started
    if done.returncode != 0:
        raise RuntimeError(f"gemsim run {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    got = json.loads(report.read_text())
    parts = {k: got[k] for k in ("timing", "compile", "execute", "write")}
    parts["startup"] = got["run_started"] - started
    parts["other"] = wall - sum(parts.values())
    manifests = [json.loads(p.read_text()) for p in out.glob("*/manifest.json")]
    traces = Counter(m["provenance"].get("trace_store", {}).get("trace") for m in manifests)
    return {
        "wall_s": wall,
        **{f"{k}_s": v for k, v in parts.items()},
        "runs": len(manifests),
        "simulated": traces.get("simulated", 0),
        "stored_traces": len(list((out / ".traces").glob("*.parquet"))),
        "hashes": {m["run_id"]: (m["trace_sha256"], m["params_sha256"]) for m in manifests},
    }


def variants_of(case: str, tmp: Path) -> tuple[Path, list[tuple[str, list[str]]]]:
    """The case's scenario file and its variants (name, extra arguments), in round order."""
    if case == "quickstart":
        return ROOT / "scenarios" / "quickstart.yaml", [("first", []), ("second", [])]
    doc = REPEATS if case == "repeats" else RULES
    path = tmp / f"{case}.yaml"
    path.write_text(yaml.safe_dump(doc))
    if case == "rules":
        return path, [("cold", []), ("warm", [])]
    off, auto = ["--set", "engine.many_runs=off"], ["--set", "engine.many_runs=auto"]
    return path, [("auto-cold", auto), ("off-cold", off), ("auto-warm", auto), ("off-warm", off)]


def run_case(case: str, rounds: int, tmp: Path) -> dict:
    scenario, variants = variants_of(case, tmp)
    got: dict[str, list[dict]] = {name: [] for name, _ in variants}
    for r in range(rounds):
        cache = tmp / f"cache-{case}-{r}"  # a fresh compilation cache each round
        for name, extra in variants:
            got[name].append(measure(scenario, tmp / f"{case}-{name}-{r}", cache, extra, tmp))
    medians = {
        name: {k: statistics.median(x[k] for x in rs) for k in rs[0] if k != "hashes"}
        for name, rs in got.items()
    }
    per_round = [
        {name: {k: v for k, v in rs[r].items() if k != "hashes"} for name, rs in got.items()}
        for r in range(rounds)
    ]
    hashes = [x["hashes"] for rs in got.values() for x in rs]
    same_traces = all({k: h[0] for k, h in x.items()} == {k: h[0] for k, h in hashes[0].items()}
                      for x in hashes)  # fmt: skip
    same_params = all(x == hashes[0] for x in hashes)
    return {
        "case": case,
        "variants": medians,
        "bars": bars(case, per_round),
        "rounds": per_round,
        "same_traces": same_traces,
        "same_params": same_params,
    }


def ratios(case: str, one: dict) -> dict:
    """The bar's ratios within one round (side by side: the machine's drifts hit both)."""
    if case == "repeats":
        return {
            "off / auto, warm cache": one["off-warm"]["wall_s"] / one["auto-warm"]["wall_s"],
            "off / auto, cold cache": one["off-cold"]["wall_s"] / one["auto-cold"]["wall_s"],
            "execute off / auto": one["off-warm"]["execute_s"] / one["auto-warm"]["execute_s"],
        }
    if case == "rules":
        out = {
            f"wall / (execute + compile), {name}": one[name]["wall_s"]
            / (one[name]["execute_s"] + one[name]["compile_s"])
            for name in ("cold", "warm")
        }
        return {**out, "simulated traces": one["cold"]["simulated"]}
    return {"second / first": one["second"]["wall_s"] / one["first"]["wall_s"]}


def bars(case: str, per_round: list[dict]) -> dict:
    """Each ratio's median over rounds, and whether the bar is met."""
    each = [ratios(case, one) for one in per_round]
    out = {k: statistics.median(x[k] for x in each) for k in each[0]}
    bar = BARS[case]
    if case == "repeats":
        met = {"warm cache": out["off / auto, warm cache"] >= bar}
    elif case == "rules":
        simulated = out["simulated traces"] == DISTINCT_TIMINGS[case]
        met = {name: out[f"wall / (execute + compile), {name}"] <= bar and simulated
               for name in ("cold", "warm")}  # fmt: skip
    else:
        met = {"second run": out["second / first"] <= bar}
    return {**out, "bar": bar, "met": met, "per_round": each}


def table(report: dict) -> str:
    from _common import environment_line

    lines = [
        f"{environment_line(report['environment'])} | load after "
        f"{', '.join(f'{x:.2f}' for x in report['load_average_after'])}"
    ]
    head = f"{'variant':<10} {'wall s':>7}" + "".join(f" {p:>8}" for p in PARTS)
    for c in report["cases"]:
        lines += ["", f"{c['case']} (medians of {report['rounds']} rounds)", head]
        for name, v in c["variants"].items():
            lines.append(
                f"{name:<10} {v['wall_s']:>7.1f}"
                + "".join(f" {v[p + '_s']:>8.2f}" for p in PARTS)
                + f"   runs {v['runs']:.0f}, simulated {v['simulated']:.0f}, "
                f"stored {v['stored_traces']:.0f}"
            )
        shown = [
            f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in c["bars"].items()
            if k != "per_round"
        ]
        lines.append("; ".join(shown))
        for k in c["bars"]["per_round"][0]:
            rounds = ", ".join(f"{x[k]:.2f}" for x in c["bars"]["per_round"])
            lines.append(f"  {k} by round: {rounds}")
        lines.append(
            f"hashes across variants and rounds: traces {'equal' if c['same_traces'] else 'DIFFER'}"
            f", parameters {'equal' if c['same_params'] else 'differ'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[3:], Path(argv[1]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--cases", nargs="+", default=list(BARS), choices=list(BARS))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    args = parser.parse_args(argv)
    from _common import environment

    with tempfile.TemporaryDirectory(prefix="gemsim-study-") as tmp:
        report = {"environment": environment(), "rounds": args.rounds}
        report["cases"] = [run_case(c, args.rounds, Path(tmp)) for c in args.cases]
        report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
