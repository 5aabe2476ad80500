"""Helpers shared by the engine benchmarks (engine.py, paper_scale.py, scale.py).

Not a benchmark itself: the workload builders (the paper's CNN, GEM, a lognormal cluster),
executor selection, compile-time accounting and the environment / memory facts every
report carries.
"""

from __future__ import annotations

import datetime
import os
import platform
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import jax
import numpy as np
import psutil

import gemsim.engine
from gemsim.engine import WavefrontExecutor
from gemsim.engine._choice import ExecutorKind, resolve_executor
from gemsim.problems import Cnn, Mnist5k, make_problem
from gemsim.rules import gem
from gemsim.timing import Budget, ClusterSpec, LogNormal, WorkerSpec, simulate
from gemsim.types import Status

BATCH = 64
LR = 0.05
CHUNK = 512
EXECUTORS = tuple(k.value for k in ExecutorKind)
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def environment() -> dict:
    """Device, versions, date and machine load: what every report is stamped with."""
    return {
        "devices": [str(d) for d in jax.devices()],
        "platform": jax.devices()[0].platform,
        "jax": jax.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def environment_line(env: dict) -> str:
    """One printed line with the fields of :func:`environment`."""
    load = ", ".join(f"{x:.2f}" for x in env["load_average"])
    return (
        f"device {', '.join(env['devices'])} | jax {env['jax']} | python {env['python']} | "
        f"{env['cpu_count']} CPUs | load {load} | {env['date']}"
    )


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def rss_bytes() -> int:
    """Current resident set size of this process."""
    return psutil.Process().memory_info().rss


def device_peak_bytes() -> int | None:
    """Peak bytes in use on the first device, where the backend reports it (not on CPU)."""
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def gib(n: int | None) -> str:
    """Bytes as GiB for tables ('n/a' for None)."""
    return "n/a" if n is None else f"{n / 2**30:.2f} GiB"


def cnn_problem(dataset=None, batch_size: int = BATCH, seed: int = 0):
    """The paper's CNN on ``dataset`` (default mnist-5k)."""
    return make_problem(Cnn(), Mnist5k() if dataset is None else dataset, batch_size, seed)


def gem_rule(diagnostics_every: int | None = None):
    """GEM with the benchmarks' learning rate and otherwise its defaults (full diagnostics on
    every commit); ``diagnostics_every`` given: full diagnostics every k-th commit only."""
    if diagnostics_every is None:
        return gem(lr=LR)
    return gem(lr=LR, diagnostics_every=diagnostics_every)


def rule_label(diagnostics_every: int | None = None) -> str:
    """How reports name :func:`gem_rule`'s rule."""
    extra = "" if diagnostics_every is None else f", diagnostics_every={diagnostics_every}"
    return f"gem(lr={LR}{extra})"


def add_diagnostics_every(parser) -> None:
    """The `--diagnostics-every` option every engine benchmark takes."""
    parser.add_argument(
        "--diagnostics-every",
        type=int,
        default=None,
        help="GEM's full diagnostics on every k-th commit only (default: not given, GEM's "
        "default: every commit)",
    )


def lognormal_trace(n_workers: int, budget: Budget, seed: int = 0):
    """A trace of ``n_workers`` with lognormal compute (median 0.1 s, sigma 0.25)."""
    workers = tuple(WorkerSpec(compute=LogNormal(0.1, 0.25)) for _ in range(n_workers))
    return simulate(ClusterSpec(workers=workers, budget=budget), seed=seed)


def trace_plan(trace, rule, stop: int | None = None, eval_every: int | None = None):
    """The execution plan of the first ``stop`` commits of ``trace`` (a prefix of a trace is
    itself a valid trace)."""
    return gemsim.engine.make_plan(
        trace.worker[:stop],
        trace.pulled_version[:stop],
        trace.n_workers,
        window=rule.window,
        eval_every=eval_every,
        fresh=trace.fresh[:stop],
        round_end=trace.round_end[:stop],
    )


def make_executor(kind: str, rule, problem, n_workers: int, max_width: int | None = None):
    """The executor ``kind`` (sequential, batched, or auto: the engine's own choice for this
    device and n) starting from the problem's initial parameters."""
    cls = resolve_executor(ExecutorKind(kind), n_workers)
    extra = {"max_width": max_width} if cls is WavefrontExecutor else {}
    return cls(rule, problem, params=problem.init_params, n_workers=n_workers, chunk=CHUNK, **extra)


def plan_runner(ex, plan) -> Callable[[], int]:
    """A function executing ``plan`` once with ``ex`` and returning the commits applied; it
    raises unless the run ends ``ok``. No final evaluation: the synchronous baselines the
    executors are compared with evaluate nothing either."""

    def run() -> int:
        out = ex.execute(plan, final_eval=False)
        if out.status is not Status.OK:
            raise RuntimeError(f"executor run ended with status {out.status}")
        return out.n_commits

    return run


def executor_name(ex) -> str:
    """``sequential`` or ``batched``: which executor class ``ex`` is."""
    return "wavefront" if isinstance(ex, WavefrontExecutor) else "sequential"


@dataclass
class CompileClock:
    """Spans of JAX tracing, lowering and compiling seen while active; overlapping spans
    (a nested trace inside an outer one) count once."""

    spans: list[tuple[float, float]] = field(default_factory=list)
    count: int = 0  # XLA compilations

    def listener(self, event: str, start: float, end: float, **_) -> None:
        if event in COMPILE_EVENTS:
            self.spans.append((start, end))
            self.count += event == COMPILE_EVENTS[-1]

    @property
    def seconds(self) -> float:
        total, reach = 0.0, -np.inf
        for start, end in sorted(self.spans):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total


@contextmanager
def compile_clock() -> Iterator[CompileClock]:
    """Measure the compile seconds inside the ``with`` block."""
    clock = CompileClock()
    jax.monitoring.register_event_time_span_listener(clock.listener)
    try:
        yield clock
    finally:
        jax.monitoring.unregister_event_time_span_listener(clock.listener)


def timed(fn, *args, **kwargs) -> tuple[object, float]:
    """``fn(*args, **kwargs)`` and its wall seconds (results blocked on)."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kwargs))
    return out, time.perf_counter() - start
