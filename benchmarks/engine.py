"""Engine efficiency: simulated samples per second against plain synchronous training.

The paper's CNN on mnist-5k, b = 64, GEM (lr 0.05, every other setting at its default, so
full diagnostics on every commit), lognormal compute times (median 0.1 s,
sigma 0.25). ``--problem`` picks other workloads, in the same setting otherwise:
``cnn-fashion`` (the CNN on the full 60,000 Fashion-MNIST images; Debian's
dataset-fashion-mnist or ``--data-dir``) and ``resnet-cifar`` (a ResNet, ``--resnet-depth``,
on CIFAR-10 from ``--data-dir``, or on CIFAR-shaped data, 50,000 random 32x32x3 images, when
no folder is given). Each workload's data set is put on the device once and shared by every
variant (all executors, all n, the synchronous baselines): the report counts the copies of
the training images alive on the device, and gives their bytes and the process's memory.
For each n in ``--workers`` it measures the samples per second (commits * 64 /
seconds of ``execute``, compiled beforehand; the timing simulation is not included) of

- the sequential executor, and on a GPU the wavefront executor too (``--executors``
  picks; on a CPU the wavefront one is the slower by half, and ``executor: auto`` never takes
  it there);

and, on the same device in the same process, plain synchronous SGD of the same model with
batches drawn by ``problem.batch(0, step)`` inside the compiled step:

- ``sync b loop``: a jitted SGD step at batch b = 64 called from a Python loop;
- ``sync b scan``: one jitted ``lax.scan`` over 512 b-sized steps per call;
- ``sync n*b loop``: the jitted step at batch n*b; where n*b exceeds mnist-5k's 4,000
  training images (n = 100: 6,400) the largest multiple of b that fits (3,968) is
  measured instead, and the table says so (the ResNet's n*b is capped at 1,024: the
  activations of a larger batch do not fit a small machine).

Executors run without evaluating the central variable (neither do the synchronous
variants): both sides measure training throughput. After one warm-up (compiling) call of
each, ``--repeats`` rounds run; in each round, every n's executors and synchronous variants
run back to back (the executors first in even rounds, last in odd ones), the executors next
to the b-sized synchronous variants, so that a round's figures for one n are taken seconds
apart. Figures are medians over rounds. The ratio is
best executor / best synchronous figure per n, as the median of the per-round ratios (the
bar's figure: each ratio compares runs made side by side, so drifts of a shared machine's
speed, 2x within minutes on some, cancel) and as the ratio of medians (printed beside it:
it compares figures up to a minute apart). The bar (docs/design.md §9): >= 0.85 on CPU
at n = 8 and n = 100 with the default settings (no ``--diagnostics-every``); on a GPU,
batched >= 10x sequential at n = 100 (and, as a goal, >= 0.5 of synchronous batch-n*b
training).

``--diagnostics-cost`` adds the sequential executor with GEM's diagnostics off (only
``update_norm``, as ``diagnostics_every`` past the run's length gives) to the same rounds: the
diagnostics' own cost, side by side; it does not count toward the bar. The machine's load
average is recorded before and after the rounds.

Default commits per execution: 512 at n <= 8, 1,024 above (the ResNet: 64 and 128);
synchronous variants process as many samples as the smallest executor workload. The default
run (7 rounds) takes about six minutes on a 2-core CPU. Bursts of load on a shared machine
slow single runs by up to half: the more rounds, the more of them the median outvotes.

    python benchmarks/engine.py                         # table
    python benchmarks/engine.py --json                  # one JSON object
    python benchmarks/engine.py --workers 8 --commits 256 --repeats 2   # quick check
    python benchmarks/engine.py --executors sequential batched   # the batched one on a CPU too
    python benchmarks/engine.py --problem cnn-fashion      # the full Fashion-MNIST
    python benchmarks/engine.py --problem resnet-cifar --resnet-depth 20 --workers 8
    python benchmarks/engine.py --diagnostics-cost         # also: GEM without diagnostics
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
from _common import (
    BATCH,
    CHUNK,
    LR,
    add_diagnostics_every,
    environment,
    environment_line,
    gem_rule,
    gib,
    lognormal_trace,
    make_executor,
    peak_rss_bytes,
    plan_runner,
    rss_bytes,
    rule_label,
    trace_plan,
)

from gemsim import problems
from gemsim.timing import CommitBudget

CPU_BAR = 0.85
GPU_SPEEDUP_BAR = 10.0
GPU_SYNC_NB_BAR = 0.5


@dataclass(frozen=True)
class Workload:
    """A model on a data set held once on the device: ``make(b)`` builds its problem at batch
    size b from the same arrays."""

    name: str
    model: object
    spec: object
    data: problems.Dataset
    commits: tuple[int, int]  # default commits per execution at n <= 8 and above
    max_sync_batch: int | None = None

    def make(self, batch_size: int = BATCH):
        return problems.make_problem(self.model, self.spec, batch_size, seed=0, data=self.data)


def cifar_shaped(n_train: int = 50_000, n_test: int = 10_000) -> problems.Dataset:
    """Random 32x32x3 images with labels from a fixed random linear teacher (standard
    normal pixels, like normalised CIFAR-10): the shapes and the cost of the real set."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n_train + n_test, 32, 32, 3), dtype=np.float32)
    teacher = rng.standard_normal((32 * 32 * 3, 10)).astype(np.float32)
    y = np.argmax(x.reshape(len(x), -1) @ teacher, axis=1).astype(np.int32)
    return problems.Dataset(x[:n_train], y[:n_train], x[n_train:], y[n_train:], 10)


def workload(name: str, data_dir: str | None = None, depth: int = 20) -> Workload:
    """The workload ``name``, its data loaded onto the device once."""
    if name == "cnn-mnist5k":
        spec, model, commits, cap = problems.Mnist5k(), problems.Cnn(), (512, 1024), None
    elif name == "cnn-fashion":
        spec, model = problems.FashionMnist(data_dir), problems.Cnn()
        commits, cap = (512, 1024), None
    elif name == "resnet-cifar":
        spec, model = problems.Cifar10(data_dir), problems.Resnet(depth)
        commits, cap = (64, 128), 1024
    else:
        raise ValueError(f"unknown problem {name!r}")
    if name == "resnet-cifar" and data_dir is None:
        spec, host = None, cifar_shaped()
    else:
        host = problems.load_dataset(spec, seed=0)
    label = name if spec is not None or name != "resnet-cifar" else f"{name} (CIFAR-shaped)"
    return Workload(label, model, spec, problems.to_device(host), commits, cap)


def data_memory(w: Workload) -> dict:
    """Bytes of the workload's arrays, and how many copies of its training images are alive
    on the device (1: every problem, worker and executor reads the same array)."""
    arrays = (w.data.x_train, w.data.y_train, w.data.x_test, w.data.y_test)
    shape, dtype = w.data.x_train.shape, w.data.x_train.dtype
    copies = {
        a.unsafe_buffer_pointer()
        for a in jax.live_arrays()
        if a.shape == shape and a.dtype == dtype
    }
    return {
        "data_bytes": int(sum(a.nbytes for a in arrays)),
        "train_image_copies": len(copies),
        "rss_bytes": rss_bytes(),
        "peak_rss_bytes": peak_rss_bytes(),
    }


@dataclass(frozen=True)
class Variant:
    """One measured workload: ``run()`` does a fixed amount of work and returns its samples."""

    name: str
    kind: str  # "executor", "sync" or "reference"
    batch: int
    run: Callable[[], int]
    workers: int  # the n whose rounds it runs in (the b-sized sync ones: once per n)
    note: str = ""


def default_commits(n: int, w: Workload | None = None) -> int:
    """Commits per execution: more at large n, where the first commits fill the slots."""
    small, large = (512, 1024) if w is None else w.commits
    return small if n <= 8 else large


NO_DIAGNOSTICS = "sequential, no diagnostics"


def executor_variants(
    problem,
    n: int,
    commits: int,
    kinds: list[str],
    diagnostics_every: int | None = None,
    diagnostics_cost: bool = False,
) -> tuple[list[Variant], dict]:
    """The executors ``kinds`` (sequential, batched) on an n-worker trace; with
    ``diagnostics_cost`` also the sequential one with GEM's diagnostics off (a reference)."""
    rule = gem_rule(diagnostics_every)
    start = time.perf_counter()
    trace = lognormal_trace(n, CommitBudget(commits))
    plan = trace_plan(trace, rule)
    info = {"simulate_and_plan_s": time.perf_counter() - start, "commits": len(plan)}
    variants = []
    for kind in kinds:
        ex = make_executor(kind, rule, problem, n)
        variants.append(Variant(kind, "executor", BATCH, _execute(ex, plan, rule), workers=n))
    if diagnostics_cost:
        bare = gem_rule(len(plan) + 1)  # the first commit's diagnostics only: off in effect
        ex = make_executor("sequential", bare, problem, n)
        run = _execute(ex, plan, bare)
        variants.append(Variant(NO_DIAGNOSTICS, "reference", BATCH, run, workers=n))
    return variants, info


def _execute(ex, plan, rule) -> Callable[[], int]:
    """The samples of one execution of ``plan`` (``plan_runner``'s commits times b and the
    rule's window)."""
    commits = plan_runner(ex, plan)
    return lambda: commits() * BATCH * rule.window


def sgd_step(problem, params, step):
    """One plain SGD step on worker 0's mini-batch number ``step``."""
    batch = problem.batch(0, step)
    loss, grads = jax.value_and_grad(problem.loss)(params, batch, batch.key)
    return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss


def loop_runner(problem, steps: int) -> Callable[[], int]:
    """``steps`` jitted SGD steps called one by one from Python."""
    step_fn = jax.jit(sgd_step, donate_argnums=1)

    def run() -> int:
        params = jax.tree.map(jnp.copy, problem.init_params)
        for s in range(steps):
            params, _ = step_fn(problem, params, jnp.int32(s))
        jax.block_until_ready(params)
        return steps * problem.batch_size

    return run


def scan_runner(problem, steps: int) -> Callable[[], int]:
    """``steps`` SGD steps as ``lax.scan`` calls of up to CHUNK steps each."""
    length = min(steps, CHUNK)
    calls = math.ceil(steps / length)

    def many(problem, params, first):
        body = lambda p, s: sgd_step(problem, p, s)
        return jax.lax.scan(body, params, first + jnp.arange(length, dtype=jnp.int32))

    many_fn = jax.jit(many, donate_argnums=1)

    def run() -> int:
        params = jax.tree.map(jnp.copy, problem.init_params)
        for c in range(calls):
            params, _ = many_fn(problem, params, jnp.int32(c * length))
        jax.block_until_ready(params)
        return calls * length * problem.batch_size

    return run


def sync_variants(w: Workload, problem, samples: int, workers: list[int]) -> list[Variant]:
    """Plain synchronous SGD per n: batch b in a loop and in a scan (the same two programs
    for every n, measured beside each n's executors), and batch n*b."""
    steps = max(1, samples // BATCH)
    loop, scan = loop_runner(problem, steps), scan_runner(problem, steps)
    variants = []
    largest = problem.train_size // BATCH * BATCH
    for n in workers:
        variants += [
            Variant("sync b loop", "sync", BATCH, loop, workers=n),
            Variant("sync b scan", "sync", BATCH, scan, workers=n),
        ]
        batch, note = n * BATCH, ""
        if batch > problem.train_size:
            batch = largest
            note = (
                f"n*b = {n * BATCH:,} exceeds the {problem.train_size:,}-image train set; "
                f"measured at {batch:,}, the largest multiple of b that fits"
            )
        if w.max_sync_batch is not None and batch > w.max_sync_batch:
            batch = w.max_sync_batch
            note = f"n*b = {n * BATCH:,} capped at {batch:,} (memory of the activations)"
        if batch == BATCH:
            continue
        big = w.make(batch_size=batch)
        runner = loop_runner(big, max(1, math.ceil(samples / batch)))
        variants.append(Variant("sync n*b loop", "sync", batch, runner, workers=n, note=note))
    return variants


def default_executors(platform: str) -> list[str]:
    """The executors measured unless ``--executors`` says: on a CPU the sequential one alone
    (the one ``executor: auto`` runs there), elsewhere both."""
    return ["sequential"] if platform == "cpu" else ["sequential", "wavefront"]


def key(v: Variant) -> str:
    """A unique name of a variant in the results."""
    return f"{v.name} @ n={v.workers}"


def measure(variants: list[Variant], repeats: int) -> dict[str, list[float]]:
    """Samples/s per variant over ``repeats`` rounds, after a warm-up call of each program
    (it compiles; one is enough for workloads of seconds). A round runs each n's variants
    back to back, in alternate order from round to round, so that a drift of the machine's
    speed within a round hits both sides of a ratio alike."""
    for run in {id(v.run): v.run for v in variants}.values():
        run()
    groups: dict[int, list[Variant]] = {}
    for v in variants:
        groups.setdefault(v.workers, []).append(v)
    rates: dict[str, list[float]] = {key(v): [] for v in variants}
    for r in range(repeats):
        for group in groups.values():
            for v in group if r % 2 == 0 else reversed(group):
                start = time.perf_counter()
                samples = v.run()
                rates[key(v)].append(samples / (time.perf_counter() - start))
    return rates


def summarise(variants: list[Variant], rates: dict, n: int, platform: str) -> dict:
    """The figures of one n: medians, the best-executor / best-sync ratio and the bars."""
    mine = [v for v in variants if v.workers == n]
    ex = [key(v) for v in mine if v.kind == "executor"]
    sync = [key(v) for v in mine if v.kind == "sync"]
    refs = [key(v) for v in mine if v.kind == "reference"]
    med = {k: statistics.median(rates[k]) for k in ex + sync + refs}
    rounds = range(len(rates[ex[0]]))
    best = lambda keys, r: max(rates[k][r] for k in keys)
    ratio = max(med[k] for k in ex) / max(med[k] for k in sync)
    per_round = [best(ex, r) / best(sync, r) for r in rounds]
    row = {
        "workers": n,
        "samples_per_s": med,
        "batch": {key(v): v.batch for v in mine},
        "notes": [v.note for v in mine if v.note],
        "best_executor_over_best_sync": ratio,
        "per_round_ratio_median": statistics.median(per_round),
        "per_round_ratios": per_round,
    }
    seq, bare = f"sequential @ n={n}", f"{NO_DIAGNOSTICS} @ n={n}"
    if seq in rates and bare in rates:
        # The sequential executor's time with diagnostics over its time without, minus one.
        row["diagnostics_cost"] = {
            "of_medians": med[bare] / med[seq] - 1,
            "per_round_median": statistics.median(
                rates[bare][r] / rates[seq][r] - 1 for r in rounds
            ),
        }
    row["bars"] = _bars(row, n, platform)
    return row


def _bars(row: dict, n: int, platform: str) -> dict[str, bool]:
    med = row["samples_per_s"]
    if platform == "cpu":
        return {f"ratio >= {CPU_BAR}": row["per_round_ratio_median"] >= CPU_BAR}
    seq, bat = med.get(f"sequential @ n={n}"), med.get(f"batched @ n={n}")
    nb = med.get(f"sync n*b loop @ n={n}")
    if n != 100 or bat is None or seq is None:
        return {}
    bars = {f"batched >= {GPU_SPEEDUP_BAR:g}x sequential": bat >= GPU_SPEEDUP_BAR * seq}
    if nb is not None:
        bars[f"batched >= {GPU_SYNC_NB_BAR} x sync n*b"] = bat >= GPU_SYNC_NB_BAR * nb
    return bars


def run(
    workers: list[int],
    commits: int | None,
    repeats: int,
    kinds: list[str],
    diagnostics_every: int | None = None,
    diagnostics_cost: bool = False,
    w: Workload | None = None,
) -> dict:
    """Build every variant, measure them interleaved and summarise per n."""
    env = environment()
    w = workload("cnn-mnist5k") if w is None else w
    problem = w.make()
    variants, setup = [], {}
    for n in workers:
        ex_variants, info = executor_variants(
            problem,
            n,
            commits or default_commits(n, w),
            kinds,
            diagnostics_every,
            diagnostics_cost,
        )
        variants += ex_variants
        setup[n] = info
    samples = min(info["commits"] for info in setup.values()) * BATCH
    variants += sync_variants(w, problem, samples, workers)
    start = time.perf_counter()
    rates = measure(variants, repeats)
    return {
        "benchmark": "engine",
        "problem": w.name,
        "model_params": problem.n_params,
        "train_size": problem.train_size,
        "memory": data_memory(w),
        "rule": rule_label(diagnostics_every),
        "batch": BATCH,
        "repeats": repeats,
        "environment": env,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "setup": setup,
        "sync_samples": samples,
        "measure_s": time.perf_counter() - start,
        "results": [summarise(variants, rates, n, env["platform"]) for n in workers],
        "all_rounds": rates,
    }


def table(report: dict) -> str:
    """The report as a fixed-width text table."""
    lines = [
        f"Engine efficiency: {report['problem']}, b={report['batch']}, {report['rule']}, "
        f"medians of {report['repeats']} rounds",
        environment_line(report["environment"])
        + f" | load at the end {', '.join(f'{x:.2f}' for x in report['load_average_end'])}",
        _memory_line(report),
        f"{'n':>5}  {'variant':<28}{'batch':>7}{'samples/s':>12}",
    ]
    for row in report["results"]:
        n = row["workers"]
        for name, rate in row["samples_per_s"].items():
            label = name.replace(f" @ n={n}", "")
            lines.append(f"{n:>5}  {label:<28}{row['batch'][name]:>7,}{rate:>12,.0f}")
        bars = ", ".join(f"{k}: {'met' if ok else 'NOT met'}" for k, ok in row["bars"].items())
        lines.append(
            f"{'':>7}best executor / best sync, median of the per-round ratios: "
            f"{row['per_round_ratio_median']:.3f} (rounds "
            f"{', '.join(f'{x:.3f}' for x in row['per_round_ratios'])}; ratio of medians "
            f"{row['best_executor_over_best_sync']:.3f})" + (f"; {bars}" if bars else "")
        )
        if cost := row.get("diagnostics_cost"):
            lines.append(
                f"{'':>7}diagnostics' cost (sequential): {cost['of_medians']:+.1%} time "
                f"(median of per-round {cost['per_round_median']:+.1%})"
            )
        lines += [f"{'':>7}note: {note}" for note in row["notes"]]
    return "\n".join(lines)


def _memory_line(report: dict) -> str:
    mem = report["memory"]
    return (
        f"{report['model_params']:,} parameters, {report['train_size']:,} training examples; "
        f"data {gib(mem['data_bytes'])} on the device, {mem['train_image_copies']} copy of the "
        f"training images alive after building every variant; process RSS "
        f"{gib(mem['rss_bytes'])} (peak {gib(mem['peak_rss_bytes'])})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 100])
    parser.add_argument(
        "--commits", type=int, default=None, help="commits per execution (default 512 / 1024)"
    )
    parser.add_argument("--repeats", type=int, default=7, help="rounds (medians over them)")
    parser.add_argument(
        "--executors",
        nargs="+",
        choices=["sequential", "wavefront"],
        default=None,
        help="default: sequential on a CPU, both on an accelerator",
    )
    parser.add_argument(
        "--problem",
        choices=["cnn-mnist5k", "cnn-fashion", "resnet-cifar"],
        default="cnn-mnist5k",
        help="the workload (default: the paper's CNN on mnist-5k)",
    )
    parser.add_argument("--data-dir", default=None, help="cnn-fashion, resnet-cifar: the files")
    parser.add_argument("--resnet-depth", type=int, default=20, help="resnet-cifar: 8, 20, ...")
    add_diagnostics_every(parser)
    parser.add_argument(
        "--diagnostics-cost",
        action="store_true",
        help="also measure the sequential executor with GEM's diagnostics off (not in the bar)",
    )
    args = parser.parse_args(argv)
    w = workload(args.problem, args.data_dir, args.resnet_depth)
    kinds = args.executors or default_executors(jax.devices()[0].platform)
    report = run(
        args.workers,
        args.commits,
        args.repeats,
        kinds,
        args.diagnostics_every,
        args.diagnostics_cost,
        w,
    )
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
