"""Engine efficiency on the built-in transformer against a plain optax loop of the same model.

Simulated samples per second of the engine against a plain optax training loop of the same
model, on the same batches and device, in one process.

The workload is the default ``Transformer()`` (4 layers, d_model 128, 4 heads, context 64:
0.81 M parameters with the Shakespeare vocabulary of 70) on ``Shakespeare()`` (a training
example is a window of 65 characters), at batch b = 32 (``--batch``), GEM (lr 0.05, momentum
0.9, every other setting at its default, so full diagnostics on every commit), lognormal
compute times (median 0.1 s, sigma 0.3), executor ``auto``. It is the scenario

    name: bench-lm
    seed: 0
    workers: {count: 8, compute: {dist: lognormal, median: 0.1, sigma: 0.3}}
    budget: {commits: 200}
    problem: {model: transformer, dataset: shakespeare, batch_size: 32}
    optimizer: {rule: gem, lr: 0.05, momentum: 0.9}
    eval: {every: 1000000, subset: 64}

built programmatically (as ``engine.py`` builds the CNN's), for each n in ``--workers``
(default 8 and 100) and ``--commits`` commits; no evaluation on either side (training
throughput only). On a GPU the wavefront executor (what ``auto`` picks there) and the
sequential one are both measured at the largest n (``--executors`` names others).

The plain side is synchronous training of the same model with ``optax.sgd(0.05,
momentum=0.9)``: ``jax.value_and_grad(problem.loss)`` on ``problem.batch(worker, step)``
drawn inside the compiled step, for the (worker, first mini-batch) sequence of the first n's
plan (the engine reads the same windows of the corpus; every batch gathers b windows alike, so
the other n's cost the same), as ``engine.py``'s baseline runs it:

- ``plain loop``: one jitted step called from a Python loop;
- ``plain scan``: one jitted ``lax.scan`` over ``--scan-length`` steps per call.

Each side processes ``--commits`` mini-batches per execution. After one warm-up (compiling)
call of each program (the sequential executor on the first 16 commits of its plan: it
compiles one program for any length; the wavefront executor on the whole plan: its programs
depend on the waves' widths; the plain loop one step, the scan one call), ``--rounds`` rounds
run every variant back to back, in reversed order in odd rounds, the plain ones between the
executors. Figures are medians over rounds. The ratio is engine (``auto``) over the best plain
variant, as the median of per-round ratios (each compares runs made side by side, so drifts
of a shared machine's speed cancel) and as the ratio of medians. The bar: >= 0.9 at n = 8 and
n = 100; the goal 0.95. Tokens per second are samples per second times the context (64).

Memory: the process's peak resident set (``resource.getrusage`` ``ru_maxrss``; a high-water
mark, so each figure is taken right after that n's executors are built and warmed, before the
next n's exist) and its current resident set (psutil), with each executor's slots array
((n + 1) rows of one worker's snapshot and GEM state); on a GPU the device's peak bytes too.
The machine's load average (``os.getloadavg()``) is printed before and after the rounds and at
the start of each round; compilations during the timed rounds are counted (0 expected).

The default run (3 rounds of 32 commits) takes about five minutes on a 2-core CPU: a gradient
of the transformer at b = 32 takes 0.3-0.6 s there, and compiling GEM's commit loop 20-40 s
per executor (4 min 48 s measured at a load average of 5 to 10 from other work).

    python benchmarks/lm.py                          # table
    python benchmarks/lm.py --json                   # one JSON object
    python benchmarks/lm.py --rounds 5 --commits 64  # more work per figure
    python benchmarks/lm.py --workers 8 --commits 16 --rounds 2   # quick check
    python benchmarks/lm.py --diagnostics-cost       # also: GEM without diagnostics
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _common import (
    LR,
    add_diagnostics_every,
    compile_clock,
    device_peak_bytes,
    environment,
    environment_line,
    executor_name,
    gem_rule,
    gib,
    make_executor,
    peak_rss_bytes,
    plan_runner,
    rss_bytes,
    rule_label,
    trace_plan,
)

from gemsim import problems
from gemsim.engine import WavefrontExecutor
from gemsim.timing import ClusterSpec, CommitBudget, LogNormal, WorkerSpec, simulate

BAR = 0.9
GOAL = 0.95
BATCH = 32
MOMENTUM = 0.9
MEDIAN_S, SIGMA = 0.1, 0.3
WARMUP_COMMITS = 16
SCAN = 16
NO_DIAGNOSTICS = "sequential, no diagnostics"
MEMORY_METHOD = (
    "peak: resource.getrusage(RUSAGE_SELF).ru_maxrss (high-water mark of the resident set); "
    "current: psutil.Process().memory_info().rss"
)


@dataclass(frozen=True)
class Variant:
    """One measured program: ``run()`` does a fixed amount of work and returns its samples."""

    name: str
    kind: str  # "engine", "plain" or "reference"
    workers: int | None  # the n of an engine variant; None for the plain ones
    run: Callable[[], int]
    auto: bool = False  # the executor `auto` picks (the bar's)

    @property
    def key(self) -> str:
        return self.name if self.workers is None else f"{self.name} @ n={self.workers}"


def lm_problem(batch: int = BATCH):
    """The default transformer on Shakespeare at batch ``batch``, seed 0."""
    return problems.make_problem(problems.Transformer(), problems.Shakespeare(), batch, seed=0)


def lognormal_trace(n_workers: int, commits: int, seed: int = 0):
    """A trace of ``n_workers`` with lognormal compute (median 0.1 s, sigma 0.3)."""
    workers = tuple(WorkerSpec(compute=LogNormal(MEDIAN_S, SIGMA)) for _ in range(n_workers))
    return simulate(ClusterSpec(workers=workers, budget=CommitBudget(commits)), seed=seed)


def executor_kinds(n: int, largest: int, extra: list[str]) -> list[str]:
    """``auto`` at every n, and ``extra`` at the largest n."""
    return ["auto", *extra] if n == largest else ["auto"]


def n_plan(n: int, commits: int, diagnostics_every: int | None):
    """The execution plan of an n-worker trace of ``commits`` commits, and its facts."""
    rule = gem_rule(diagnostics_every)
    start = time.perf_counter()
    plan = trace_plan(lognormal_trace(n, commits), rule)
    info = {
        "simulate_and_plan_s": time.perf_counter() - start,
        "commits": len(plan),
        "host_fills": len(plan.host_fills),
        "max_staleness": int(plan.staleness.max()),
    }
    return plan, info


def engine_variants(
    problem, n: int, plan, kinds: list[str], diagnostics_every, diagnostics_cost
) -> tuple[list[Variant], dict]:
    """The executors ``kinds`` on an n-worker plan, warmed up (compiled), and the setup's
    facts (warm-up seconds, slots bytes, memory after warming)."""
    rule = gem_rule(diagnostics_every)
    variants, seen, warm, slots = [], set(), {}, {}
    for kind in kinds:
        ex = make_executor(kind, rule, problem, n)
        name = executor_name(ex)
        if name in seen:
            continue
        seen.add(name)
        label = f"engine auto ({name})" if kind == "auto" else f"engine {name}"
        variants.append(Variant(label, "engine", n, _samples(ex, plan), auto=kind == "auto"))
        warm[label] = _warm(ex, plan)
        slots[label] = (n + 1) * ex.layout.row_size * 4
    if diagnostics_cost:
        bare = gem_rule(len(plan) + 1)  # the first commit's diagnostics only: off in effect
        ex = make_executor("sequential", bare, problem, n)
        variants.append(Variant(NO_DIAGNOSTICS, "reference", n, _samples(ex, plan)))
        warm[NO_DIAGNOSTICS] = _warm(ex, plan)
    info = {
        "warmup_s": warm,
        "slots_bytes": slots,
        "row_floats": ex.layout.row_size,
        "memory_after_warmup": memory(),
    }
    return variants, info


def _samples(ex, plan) -> Callable[[], int]:
    commits = plan_runner(ex, plan)
    return lambda: commits() * ex.problem.batch_size * ex.rule.window


def _warm(ex, plan) -> float:
    """Compile ``ex``'s programs: the sequential executor has one for any plan length, so a
    prefix of the plan does; the wavefront one compiles per wave width: the whole plan."""
    start = time.perf_counter()
    if isinstance(ex, WavefrontExecutor):
        plan_runner(ex, plan)()
    else:
        plan_runner(ex, plan.truncated(min(len(plan), WARMUP_COMMITS)))()
    return time.perf_counter() - start


def plain_step(problem, opt, params, state, worker, step):
    """One optax step on ``worker``'s mini-batch number ``step``."""
    batch = problem.batch(worker, step)
    loss, grads = jax.value_and_grad(problem.loss)(params, batch, batch.key)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


def plain_variants(problem, workers: np.ndarray, steps: np.ndarray, scan_length: int):
    """The plain loop and scan over the mini-batches ``(workers[i], steps[i])``, warmed up,
    and their warm-up seconds."""
    opt = optax.sgd(LR, momentum=MOMENTUM)
    total = len(steps)
    step_fn = jax.jit(lambda *a: plain_step(problem, opt, *a), donate_argnums=(0, 1))

    def fresh():
        params = jax.tree.map(jnp.copy, problem.init_params)
        return params, opt.init(params)

    def loop(count: int = total) -> int:
        params, state = fresh()
        for i in range(count):
            params, state, _ = step_fn(params, state, np.int32(workers[i]), np.int32(steps[i]))
        jax.block_until_ready(params)
        return count * problem.batch_size

    length = min(total, scan_length)
    calls = math.ceil(total / length)
    pad = calls * length - total  # the last call runs past the plan: repeat its batches
    w_all = jnp.asarray(np.concatenate([workers, workers[:pad]]), jnp.int32)
    s_all = jnp.asarray(np.concatenate([steps, steps[:pad]]), jnp.int32)

    def many(params, state, ws, ss):
        def body(carry, ij):
            params, state, loss = plain_step(problem, opt, *carry, *ij)
            return (params, state), loss

        return jax.lax.scan(body, (params, state), (ws, ss))

    many_fn = jax.jit(many, donate_argnums=(0, 1))

    def scan(count: int = calls) -> int:
        params, state = fresh()
        for c in range(count):
            part = slice(c * length, (c + 1) * length)
            (params, state), _ = many_fn(params, state, w_all[part], s_all[part])
        jax.block_until_ready(params)
        return count * length * problem.batch_size

    warm = {}
    for name, fn in (("plain loop", loop), ("plain scan", scan)):
        start = time.perf_counter()
        fn(1)
        warm[name] = time.perf_counter() - start
    variants = [
        Variant("plain loop", "plain", None, loop),
        Variant("plain scan", "plain", None, scan),
    ]
    return variants, {"warmup_s": warm, "steps": total, "scan_length": length, "calls": calls}


def memory() -> dict:
    return {
        "peak_rss_bytes": peak_rss_bytes(),
        "rss_bytes": rss_bytes(),
        "device_peak_bytes": device_peak_bytes(),
    }


def round_order(variants: list[Variant]) -> list[Variant]:
    """The order of a round: the smallest n's engines, the plain variants, the others' engines
    (so every engine runs next to a plain one, or next to its own n's other executors)."""
    engines = [v for v in variants if v.kind != "plain"]
    plain = [v for v in variants if v.kind == "plain"]
    first = min((v.workers for v in engines), default=None)
    head = [v for v in engines if v.workers == first]
    return head + plain + [v for v in engines if v.workers != first]


def measure(variants: list[Variant], rounds: int) -> tuple[dict, list, int]:
    """Samples/s per variant over ``rounds`` rounds (alternating order), the load average at
    each round's start, and the compilations seen during the rounds."""
    order = round_order(variants)
    rates: dict[str, list[float]] = {v.key: [] for v in variants}
    loads = []
    with compile_clock() as clock:
        for r in range(rounds):
            loads.append([round(x, 2) for x in os.getloadavg()])
            for v in order if r % 2 == 0 else reversed(order):
                start = time.perf_counter()
                samples = v.run()
                rates[v.key].append(samples / (time.perf_counter() - start))
    return rates, loads, clock.count


def summarise(variants: list[Variant], rates: dict, n: int) -> dict:
    """The figures of one n: medians, engine (auto) / best plain per round and of medians."""
    plain = [v.key for v in variants if v.kind == "plain"]
    mine = [v for v in variants if v.workers == n]
    auto = next(v.key for v in mine if v.auto)
    engines = [v.key for v in mine if v.kind == "engine"]
    med = {v.key: statistics.median(rates[v.key]) for v in mine}
    best_plain = max(statistics.median(rates[k]) for k in plain)
    rounds = range(len(rates[auto]))
    per_round = [rates[auto][r] / max(rates[k][r] for k in plain) for r in rounds]
    row = {
        "workers": n,
        "samples_per_s": med,
        "auto": auto,
        "auto_over_best_plain": statistics.median(per_round),
        "per_round_ratios": per_round,
        "ratio_of_medians": med[auto] / best_plain,
        "best_engine_over_best_plain": max(med[k] for k in engines) / best_plain,
    }
    row["bar"] = row["auto_over_best_plain"] >= BAR
    row["goal"] = row["auto_over_best_plain"] >= GOAL
    seq = next((v.key for v in mine if v.kind == "engine" and "sequential" in v.name), None)
    bare = f"{NO_DIAGNOSTICS} @ n={n}"
    if seq is not None and bare in rates:
        # The sequential executor's time with diagnostics over its time without, minus one.
        row["diagnostics_cost"] = {
            "of_medians": med[bare] / med[seq] - 1,
            "per_round_median": statistics.median(
                rates[bare][r] / rates[seq][r] - 1 for r in rounds
            ),
        }
    return row


def run(
    workers: list[int],
    commits: int,
    rounds: int,
    batch: int = BATCH,
    extra_executors: list[str] | None = None,
    scan_length: int = SCAN,
    diagnostics_every: int | None = None,
    diagnostics_cost: bool = False,
) -> dict:
    """Build every variant, measure them interleaved and summarise per n."""
    env = environment()
    start = time.perf_counter()
    problem = lm_problem(batch)
    build_s = time.perf_counter() - start
    gpu = jax.default_backend() == "gpu"
    extra = extra_executors
    if extra is None:
        extra = ["sequential", "wavefront"] if gpu else []
    largest = max(workers)
    plans = {n: n_plan(n, commits, diagnostics_every) for n in workers}
    # The plain side first (the first n's mini-batches), so that its memory comes first.
    plan = plans[workers[0]][0]
    variants, plain_info = plain_variants(problem, plan.worker, plan.first_step, scan_length)
    plain_info["memory_after_warmup"] = memory()
    setup = {}
    for n in workers:
        plan, info = plans[n]
        kinds = executor_kinds(n, largest, extra)
        found, more = engine_variants(problem, n, plan, kinds, diagnostics_every, diagnostics_cost)
        variants += found
        setup[n] = info | more
    start = time.perf_counter()
    rates, loads, compiles = measure(variants, rounds)
    context = problem.input_shape[0]
    results = [summarise(variants, rates, n) for n in workers]
    for row in results:
        row["tokens_per_s"] = {k: v * context for k, v in row["samples_per_s"].items()}
    plain_med = {v.key: statistics.median(rates[v.key]) for v in variants if v.kind == "plain"}
    return {
        "benchmark": "lm",
        "problem": "transformer (default) on shakespeare",
        "model": str(problem.model),
        "model_params": problem.n_params,
        "vocab_size": problem.vocab_size,
        "context": context,
        "train_windows": problem.train_size,
        "batch": batch,
        "rule": rule_label(diagnostics_every) + f", momentum {MOMENTUM}",
        "plain_optimizer": f"optax.sgd({LR}, momentum={MOMENTUM})",
        "compute": f"lognormal(median {MEDIAN_S} s, sigma {SIGMA})",
        "rounds": rounds,
        "commits": commits,
        "environment": env,
        "load_average_before": env["load_average"],
        "load_average_rounds": loads,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "problem_build_s": build_s,
        "setup": setup,
        "plain": plain_info
        | {
            "samples_per_s": plain_med,
            "tokens_per_s": {k: v * context for k, v in plain_med.items()},
        },
        "memory_method": MEMORY_METHOD,
        "memory_end": memory(),
        "compilations_during_rounds": compiles,
        "measure_s": time.perf_counter() - start,
        "results": results,
        "all_rounds": rates,
    }


def _loads(values) -> str:
    return ", ".join(f"{x:.2f}" for x in values)


def table(report: dict) -> str:
    """The report as a fixed-width text table."""
    env = report["environment"]
    plain = report["plain"]
    lines = [
        f"LM engine efficiency: {report['problem']}, {report['model_params']:,} parameters "
        f"(vocabulary {report['vocab_size']}, context {report['context']}), "
        f"{report['train_windows']:,} training windows, b={report['batch']}",
        f"engine: {report['rule']}, compute {report['compute']}, {report['commits']} commits per "
        f"execution; plain: {report['plain_optimizer']}, {plain['steps']} steps (scan "
        f"{plain['calls']} x {plain['scan_length']}); medians of {report['rounds']} rounds",
        environment_line(env),
        f"load average before {_loads(report['load_average_before'])}; at each round's start "
        + "; ".join(_loads(x) for x in report["load_average_rounds"])
        + f"; after {_loads(report['load_average_after'])}",
        f"{'n':>5}  {'variant':<36}{'samples/s':>11}{'tokens/s':>11}{'s/step':>9}",
    ]
    batch = report["batch"]
    for name, rate in plain["samples_per_s"].items():
        lines.append(f"{'-':>5}  {name:<36}{rate:>11.1f}{rate * report['context']:>11,.0f}"
                     f"{batch / rate:>9.3f}")  # fmt: skip
    for row in report["results"]:
        n = row["workers"]
        for name, rate in row["samples_per_s"].items():
            label = name.replace(f" @ n={n}", "")
            lines.append(
                f"{n:>5}  {label:<36}{rate:>11.1f}{rate * report['context']:>11,.0f}"
                f"{batch / rate:>9.3f}"
            )
        mark = lambda ok: "met" if ok else "NOT met"
        lines.append(
            f"{'':>7}engine auto / best plain, median of per-round ratios "
            f"{row['auto_over_best_plain']:.3f} (rounds "
            f"{', '.join(f'{x:.3f}' for x in row['per_round_ratios'])}; ratio of medians "
            f"{row['ratio_of_medians']:.3f}); bar >= {BAR}: {mark(row['bar'])}, "
            f"goal >= {GOAL}: {mark(row['goal'])}"
        )
        if len([k for k in row["samples_per_s"] if k.startswith("engine")]) > 1:
            lines.append(
                f"{'':>7}best engine / best plain (ratio of medians) "
                f"{row['best_engine_over_best_plain']:.3f}"
            )
        if cost := row.get("diagnostics_cost"):
            lines.append(
                f"{'':>7}diagnostics' cost (sequential): {cost['of_medians']:+.1%} time "
                f"(median of per-round {cost['per_round_median']:+.1%})"
            )
    lines.append(
        "memory (peak = ru_maxrss, a high-water mark; now = psutil RSS): after the plain "
        f"programs peak {gib(plain['memory_after_warmup']['peak_rss_bytes'])}"
    )
    for n, info in report["setup"].items():
        mem = info["memory_after_warmup"]
        slots = ", ".join(gib(b) for b in info["slots_bytes"].values())
        device = mem["device_peak_bytes"]
        lines.append(
            f"{'':>7}n = {n}: after building and warming its executors, peak "
            f"{gib(mem['peak_rss_bytes'])}, now {gib(mem['rss_bytes'])}; slots {slots} per "
            f"executor ({info['row_floats']:,} floats a row)"
            + ("" if device is None else f"; device peak {gib(device)}")
        )
    warm = {**plain["warmup_s"]}
    for n, info in report["setup"].items():
        warm |= {f"{k} @ n={n}": v for k, v in info["warmup_s"].items()}
    lines.append(
        f"setup: problem built in {report['problem_build_s']:.1f} s; warm-up (compiling) calls "
        + ", ".join(f"{k} {v:.1f} s" for k, v in warm.items())
    )
    end = report["memory_end"]
    lines.append(
        f"{'':>7}at the end: peak {gib(end['peak_rss_bytes'])}, now {gib(end['rss_bytes'])}; "
        f"compilations during the timed rounds: {report['compilations_during_rounds']}; "
        f"rounds took {report['measure_s']:.0f} s"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 100])
    parser.add_argument(
        "--commits", type=int, default=32, help="commits (plain: steps) per execution"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians over them)")
    parser.add_argument("--batch", type=int, default=BATCH, help="mini-batch size b")
    parser.add_argument(
        "--executors",
        nargs="*",
        choices=["sequential", "wavefront"],
        default=None,
        help="executors measured besides auto at the largest n (default: both on a GPU, "
        "none elsewhere)",
    )
    parser.add_argument(
        "--scan-length", type=int, default=SCAN, help="plain scan: steps per compiled call"
    )
    add_diagnostics_every(parser)
    parser.add_argument(
        "--diagnostics-cost",
        action="store_true",
        help="also measure the sequential executor with GEM's diagnostics off (not in the bar)",
    )
    args = parser.parse_args(argv)
    report = run(
        args.workers,
        args.commits,
        args.rounds,
        args.batch,
        args.executors,
        args.scan_length,
        args.diagnostics_every,
        args.diagnostics_cost,
    )
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
