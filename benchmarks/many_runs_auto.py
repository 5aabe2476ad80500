"""`engine.many_runs: auto` against `off`: what each way costs, and what `auto` chose.

For each case, a group of runs that may execute together (a learning-rate sweep: their
floats are lifted), the engine's two ways on the same traces, in one process:

- ``off``: one by one, each run with the sequential executor compiled for its own rule (a
  learning rate is a constant of its program, as `many_runs: off` compiles it);
- ``together``: `engine.ManyRunsExecutor` on every run of the group at once (the unit size
  `auto` would give them where it puts them together).

Figures: microseconds per run and commit of each way, executed after a warm-up call (so
without compilation), interleaved rounds, medians; the seconds each way spent compiling (its
first calls less the warm ones); and `auto`'s choice (`_many_runs_plan.unit_size`) with
whether it was the faster end to end (execution of every run plus compilation).

Cases: ``tridiagonal`` (the theory papers' worst-case quadratic as a user model,
`tridiagonal_model.py`, fixed compute times sqrt(i) + pi/10, plain ASGD) at the sizes named
``n<workers>-d<dim>`` (``--shapes``), and the bundled scenarios whose runs `auto` groups or
executes together (``--bundled``; the group's first 64 runs, their budget cut to
``--commits`` commits).

    python benchmarks/many_runs_auto.py --shapes n16-d64 n256-d1000 n1000-d10000
    python benchmarks/many_runs_auto.py --bundled --commits 2000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from fixed_costs import STUDY_RUNS, compute_times, lr_of

from gemsim import config, engine
from gemsim.app.execute import _stages
from gemsim.app.record import _identity
from gemsim.app.sweep import _many_runs_plan, _traces
from gemsim.types import RunKind

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


def tridiagonal(n: int, d: int, commits: int, runs: int = STUDY_RUNS) -> list:
    """The runs of a learning-rate sweep of the tridiagonal quadratic, as expanded runs."""
    groups = [{"count": 1, "compute": {"dist": "constant", "value": t}} for t in compute_times(n)]
    model = {"import": "tridiagonal_model:make_tridiagonal", "kwargs": {"dim": d}}
    doc = {
        "name": f"tridiagonal-n{n}-d{d}",
        "seed": 0,
        "workers": {"count": n, "compute": {"dist": "constant", "value": 1.0}, "groups": groups},
        "server": {"ties": "by_worker"},
        "budget": {"commits": commits},
        "problem": {"model": {**model, "path": str(HERE)}, "batch_size": 1},
        "optimizer": {"rule": "downpour", "lr": lr_of(n)},
        "eval": {"every": 100},
        "sweep": {"optimizer.lr": [lr_of(n) * k / runs for k in range(1, runs + 1)]},
    }
    scenario = config.parse_scenario(doc, f"{doc['name']}.yaml")
    return config.expand(scenario, f"{doc['name']}.yaml")


def bundled(commits: int, only: list[str] | None = None) -> dict[str, list]:
    """Every bundled scenario's first group of runs that `auto` executes together, its
    budget cut to `commits` commits."""
    out = {}
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        if only and not any(word in str(path) for word in only):
            continue
        runs = config.expand(config.load_scenario(path), str(path), base_dir=path.parent)
        groups: dict[str, list] = {}
        for r in runs:
            s = r.scenario
            if s.problem is None or s.optimizer is None or s.engine.executor == "wavefront":
                continue
            groups.setdefault(config.many_runs_signature(s)[0], []).append(r)
        # The first group `auto` executes together: where it runs them one by one (a large
        # gradient on a CPU), `auto` is `off`.
        group = next(
            (g for g in groups.values() if _unit(g) > 1),
            None,
        )
        if group is None:
            continue
        cut = []
        for r in group[: _many_runs_plan.AUTO_MAX_RUNS]:
            data = r.scenario.model_dump(mode="json", by_alias=True)
            data.update(budget={"commits": commits}, sweep={}, repeats=1)
            data.pop("seeds", None)
            cut.append(config.parse_scenario(data, str(path), base_dir=path.parent))
        out[str(path.relative_to(ROOT))] = [_identity.expanded_of(s) for s in cut]
    return out


def prepared(expanded: list) -> list:
    """`(scenario, rule, problem, plan, hyper)` of each run (traces simulated here)."""
    floats = [config.many_runs_signature(r.scenario)[1] for r in expanded]
    lifted = tuple(sorted(p for p in floats[0] if len({f[p] for f in floats}) > 1))
    out = []
    for r, f in zip(expanded, floats, strict=True):
        s = r.scenario
        who = _identity.RunIdentity.of(r, RunKind.SIM)
        rule, problem = config.build_rule(s), _stages.build_problem(s)
        (trace, _), _ = _traces.Traces().timed_for(who)
        plan = engine.plan_of(trace, window=rule.window, eval_every=s.eval.every)
        out.append((s, rule, problem, plan, {p: f[p] for p in lifted}, lifted))
    return out


def _unit(group: list) -> int:
    """How many of the group's runs `auto` executes at once, weighing the group itself."""
    scenarios = [r.scenario for r in group]
    return _many_runs_plan.unit_size(scenarios[0], len(scenarios), scenarios)[0]


def measure(expanded: list, rounds: int) -> dict:
    runs = prepared(expanded)
    scenario = runs[0][0]
    n_workers = runs[0][3].n_workers
    chunk = scenario.engine.chunk

    started = time.perf_counter()
    singles = []  # one executor per distinct rule, as `off` compiles them
    by_rule: dict[str, object] = {}
    for s, rule, problem, _, _, _ in runs:
        key = s.optimizer.model_dump_json()
        if key not in by_rule:
            by_rule[key] = engine.SequentialExecutor(
                rule, problem, params=problem.init_params, n_workers=n_workers, chunk=chunk
            )
        singles.append(by_rule[key])

    def one_by_one():
        for ex, (_, _, problem, plan, _, _) in zip(singles, runs, strict=True):
            ex.execute(plan, problem=problem, params=problem.init_params)

    one_by_one()
    first_off = time.perf_counter() - started

    lifted = runs[0][5]
    inputs = [engine.RunInputs(p, pr, pr.init_params, h) for _, _, pr, p, h, _ in runs]
    started = time.perf_counter()
    many = engine.ManyRunsExecutor(
        config.lifted_rule(scenario, lifted), inputs[0], n_workers=n_workers, chunk=chunk
    )

    def together():
        many.execute(inputs)

    together()
    first_many = time.perf_counter() - started
    times: dict[str, list[float]] = {"off": [], "together": []}
    for _ in range(rounds):
        for name, fn in (("off", one_by_one), ("together", together)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    commits = sum(len(r[3]) for r in runs)
    warm = {k: statistics.median(v) for k, v in times.items()}
    compile_s = {"off": first_off - warm["off"], "together": first_many - warm["together"]}
    # auto weighs the group's own runs (its distinct rules, its commits), as `gemsim run` does
    size, why = _many_runs_plan.unit_size(scenario, len(runs), [r[0] for r in runs])
    ends = {k: warm[k] + compile_s[k] for k in warm}
    faster = "together" if ends["together"] < ends["off"] else "off"
    chose = "together" if size > 1 else "off"
    return {
        "runs": len(runs),
        "commits": commits,
        "params": runs[0][2].n_params,
        "row_floats": int(many.layout.row_size),
        "workers": n_workers,
        "us_per_run_commit": {k: v / commits * 1e6 for k, v in warm.items()},
        "speedup_engine": warm["off"] / warm["together"],
        "compile_s": compile_s,
        "end_to_end_s": ends,
        "auto": {"unit": size, "why": why, "chose": chose, "right": chose == faster},
        "rounds": {k: [x / commits * 1e6 for x in v] for k, v in times.items()},
    }


def table(report: dict) -> str:
    from _common import environment_line

    lines = [
        environment_line(report["environment"])
        + f" | load after {', '.join(f'{x:.2f}' for x in report['load_average_after'])}",
        "",
        f"{'case':<44}{'runs':>5}{'K':>8}{'off us':>8}{'tog us':>8}{'engine x':>9}"
        f"{'comp off':>9}{'comp tog':>9}  auto",
    ]
    for name, c in report["cases"].items():
        us, comp = c["us_per_run_commit"], c["compile_s"]
        verdict = "right" if c["auto"]["right"] else "WRONG"
        lines.append(
            f"{name[:43]:<44}{c['runs']:>5}{c['row_floats']:>8}{us['off']:>8.2f}"
            f"{us['together']:>8.2f}{c['speedup_engine']:>8.2f}x{comp['off']:>9.2f}"
            f"{comp['together']:>9.2f}  {c['auto']['chose']} ({c['auto']['unit']} at once), "
            f"{verdict}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=[], help="tridiagonal n<N>-d<D> cases")
    parser.add_argument("--shape-commits", type=int, default=4000)
    parser.add_argument("--bundled", action="store_true", help="the bundled scenarios' groups")
    parser.add_argument("--commits", type=int, default=1000, help="bundled runs' budget")
    parser.add_argument("--only", nargs="*", help="bundled files whose path holds one of these")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from _common import environment

    report = {"environment": environment(), "cases": {}}
    for shape in args.shapes:
        n, d = (int(x[1:]) for x in shape.split("-"))
        cases = {f"tridiagonal {shape}": tridiagonal(n, d, args.shape_commits)}
        for name, expanded in cases.items():
            report["cases"][name] = measure(expanded, args.rounds)
            print(name, json.dumps(report["cases"][name]["us_per_run_commit"]), file=sys.stderr)
    if args.bundled:
        for name, expanded in bundled(args.commits, args.only).items():
            report["cases"][name] = measure(expanded, args.rounds)
            print(name, json.dumps(report["cases"][name]["us_per_run_commit"]), file=sys.stderr)
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
