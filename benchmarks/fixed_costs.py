"""The fixed costs of a run, and gemsim end to end against the theory papers' own simulator.

The reference is the Richtárik group's simulator (github.com/vectozavr/ringmaster-lmo): its
plain ASGD loop (`AsynchronousSGD` over a `DelayedAsynchronousTransport`, numpy, a heap of
arrival times), with fixed compute times ``tau_i = sqrt(i) + pi/10``, exact gradients of its
tridiagonal worst-case quadratic (`create_worst_case`, `TridiagonalQuadraticFunction`, from
the repository's history: commit fe4f03c) and ``lr = 0.5 / n``. Its code is read from a git
clone given by ``--reference`` and run as it is, in a process of its own (a stand-in module
named ``torch`` lets its files import without PyTorch, which this loop never calls, and saves
the reference PyTorch's import). gemsim runs the same work: the quadratic as a user model
(`tridiagonal_model.py`), `downpour` (plain ASGD), `server.ties: by_worker`, the loss every
100 commits (the reference's loop records it every 100 updates too). Both give the same
updates; the final points are compared.

Sizes (the virtual seconds give the updates): ``small`` n = 16, d = 64, 60 s (338 updates);
``middle`` n = 256, d = 1,000, 700 s (20,069); ``large`` n = 1,000, d = 10,000, 1,700 s
(100,927). Figures, medians over interleaved rounds:

- ``costs``: where a gemsim run's time goes, by stage (interpreter, JAX's import, the rest of
  the imports, scenario parse, checks, problem build, timing model, compilation, execution,
  the run's record, writing its folder, the rest): ``gemsim run`` in a new process with the
  compilation cache cold (a new cache folder) and warm, and a second `gemsim.run` (with
  `gemsim.load_scenario` before and `RunResult.write` after) in a running process, as in a
  notebook. Imports and compilations are counted where they happen and taken out of the
  stage that caused them.
- ``versus``: the wall seconds of the reference's whole process against gemsim's, new
  process (warm cache) and second run in a running process; ``speedup`` = reference / gemsim.
- ``study``: 16 runs (learning rates ``lr * k / 16``, k = 1..16) of one size: the reference
  runs them in one process one after another (its own way: a new transport and optimizer per
  run); gemsim as one ``gemsim run`` of a 16-point sweep, ``engine.many_runs`` ``auto`` and
  ``off``, the compilation cache warm (each variant run once before, in each round).
- ``eval``: the engine alone on one size, microseconds per commit with ``eval.every`` 1 and
  100, the evaluations inside the commit loop and between segments (compiled beforehand; the
  run's executor, its plan and `execute` only).

    python benchmarks/fixed_costs.py --reference ~/src/ringmaster-lmo            # about 6 min
    python benchmarks/fixed_costs.py --reference R --parts versus study --study-sizes middle large
    python benchmarks/fixed_costs.py --reference R --json
    python benchmarks/fixed_costs.py --reference R --gemsim ../gemsim-before   # an older tree
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SIZES = {"small": (16, 64, 60.0), "middle": (256, 1000, 700.0), "large": (1000, 10_000, 1700.0)}
EVAL_EVERY = 100
STUDY_RUNS = 16
PARTS = ("costs", "versus", "study", "eval")
STAGES = (
    "interpreter", "import jax", "imports", "parse", "checks", "problem", "timing", "compile",
    "execute", "record", "write", "other",
)  # fmt: skip
REFERENCE_FILES = {  # path in the reference's repository -> (commit, path in the checkout)
    "src/__init__.py": ("HEAD", "src/__init__.py"),
    "src/factory.py": ("HEAD", "src/factory.py"),
    "src/signature.py": ("HEAD", "src/signature.py"),
    "src/asynchronous/__init__.py": ("HEAD", "src/asynchronous/__init__.py"),
    "src/asynchronous/algorithm.py": ("HEAD", "src/asynchronous/algorithm.py"),
    "src/asynchronous/asynchronous_transport.py": (
        "HEAD",
        "src/asynchronous/asynchronous_transport.py",
    ),
    "function.py": ("fe4f03c", "code/experiments/function.py"),
}
FUNCTION_NAMES = ("BaseFunction", "TridiagonalQuadraticFunction", "create_worst_case")


def lr_of(n: int) -> float:
    return 0.5 / n


def study_lrs(n: int) -> list[float]:
    return [lr_of(n) * k / STUDY_RUNS for k in range(1, STUDY_RUNS + 1)]


def compute_times(n: int) -> list[float]:
    return [math.sqrt(i) + math.pi / 10 for i in range(1, n + 1)]


# --- the reference's process -----------------------------------------------------------------


def reference_tree(repo: Path, into: Path) -> Path:
    """The reference's files, read from its git history into `into` (with the stand-in
    `torch` module their imports name)."""
    for target, (commit, path) in REFERENCE_FILES.items():
        text = subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{path}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        (into / target).parent.mkdir(parents=True, exist_ok=True)
        (into / target).write_text(text)
    (into / "torch").mkdir(exist_ok=True)
    (into / "torch" / "__init__.py").write_text("class Tensor:  # never instantiated\n    pass\n")
    return into


def reference_child(tree: str, n: int, d: int, seconds: float, lrs: list[float], out: str):
    """The reference's whole work in this process: its function, its transport and its ASGD
    loop, one run per learning rate; the final points saved to `out` (.npz)."""
    import ast

    import numpy as np
    import scipy.linalg
    import scipy.sparse

    sys.path.insert(0, tree)
    from src.asynchronous.algorithm import AsynchronousSGD, StochasticGradientNodeAlgorithm
    from src.asynchronous.asynchronous_transport import DelayedAsynchronousTransport
    from src.signature import Signature

    module = ast.parse(Path(tree, "function.py").read_text())
    wanted = [node for node in module.body if getattr(node, "name", None) in FUNCTION_NAMES]
    names = {"np": np, "scipy": scipy}
    exec(compile(ast.Module(wanted, []), "function.py", "exec"), names)  # noqa: S102

    class Exact:
        """The node's function: exact gradients of the quadratic."""

        def __init__(self, function):
            self.function = function

        def stochastic_gradient(self, point):
            return self.function.gradient(point)

        def value(self, point):
            return self.function.value(point)

    points, losses = {}, {}
    for r, lr in enumerate(lrs):
        function = names["TridiagonalQuadraticFunction"](*names["create_worst_case"](d, 1.0))
        nodes = [Signature(StochasticGradientNodeAlgorithm, Exact(function)) for _ in range(n)]
        transport = DelayedAsynchronousTransport(nodes, np.asarray(compute_times(n)))
        point = np.zeros(d)
        point[0] = math.sqrt(d)
        optimizer = AsynchronousSGD(transport, point, gamma=lr)
        updates, curve = 0, []
        while optimizer._heap[0][0] <= seconds:  # the next arrival, within the budget
            optimizer.step()
            updates += 1
            if updates % EVAL_EVERY == 0:
                curve.append(function.value(optimizer.get_point()))
        points[f"run{r}"], losses[f"loss{r}"] = optimizer.get_point(), np.asarray(curve)
        points[f"updates{r}"] = np.asarray(updates)
    np.savez(out, **points, **losses)


# --- gemsim's processes ----------------------------------------------------------------------


def scenario_doc(name: str, n: int, d: int, seconds: float, every: int = EVAL_EVERY) -> dict:
    groups = [{"count": 1, "compute": {"dist": "constant", "value": t}} for t in compute_times(n)]
    model = {"import": "tridiagonal_model:make_tridiagonal", "kwargs": {"dim": d}}
    return {
        "name": name,
        "seed": 0,
        "workers": {"count": n, "compute": {"dist": "constant", "value": 1.0}, "groups": groups},
        "server": {"ties": "by_worker"},
        "budget": {"seconds": seconds},
        "problem": {"model": {**model, "path": str(HERE)}, "batch_size": 1},
        "optimizer": {"rule": "downpour", "lr": lr_of(n)},
        "eval": {"every": every},
    }


class Probes:
    """Seconds by stage. Functions are wrapped where the stages call them; imports and JAX's
    compilations are recorded too, and every instant of the main thread goes to the most
    specific of what was under way then: a compilation, else an import, else the innermost
    probed call. Folders written in background threads count where the main thread was in
    none of these (waiting for them at the end); the rest is `other`."""

    COMPILE_EVENTS = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )

    def __init__(self):
        self._main = threading.main_thread().ident
        self._local = threading.local()
        self.items: list[tuple[int, float, float, str]] = []  # (rank, start, end, stage)

    def wrap(self, owner, name: str, stage: str) -> None:
        inner = getattr(owner, name)

        def probe(*args, **kwargs):
            start = time.time()
            try:
                return inner(*args, **kwargs)
            finally:
                rank = 2 if _thread_id() == self._main else 1 if stage == "write" else 0
                if rank:
                    self.items.append((rank, start, time.time(), stage))

        setattr(owner, name, probe)

    def compiled(self, event: str, start: float, end: float, **_) -> None:
        if event in self.COMPILE_EVENTS and _thread_id() == self._main:
            self.items.append((4, start, end, "compile"))

    def install_imports(self) -> None:
        import builtins
        import importlib

        for owner, name in ((builtins, "__import__"), (importlib, "import_module")):
            setattr(owner, name, self._import_probe(getattr(owner, name)))

    def _import_probe(self, inner):
        def probe(*args, **kwargs):
            if getattr(self._local, "importing", False) or _thread_id() != self._main:
                return inner(*args, **kwargs)
            self._local.importing = True
            start = time.time()
            try:
                return inner(*args, **kwargs)
            finally:
                self._local.importing = False
                self.items.append((3, start, time.time(), "imports"))

        return probe

    def seconds(self, since: float, until: float) -> dict[str, float]:
        """Every stage's seconds within [since, until] (see the class docstring)."""
        out = dict.fromkeys(STAGES, 0.0)
        items = [(max(a, since), min(b, until), r, s) for r, a, b, s in self.items]
        items = [x for x in items if x[1] > x[0]]
        bounds = sorted({since, until, *(x[0] for x in items), *(x[1] for x in items)})
        starts = sorted(range(len(items)), key=lambda i: items[i][0])
        active: list[int] = []
        k = 0
        for a, b in zip(bounds, bounds[1:], strict=False):
            while k < len(starts) and items[starts[k]][0] <= a:
                active.append(starts[k])
                k += 1
            active = [i for i in active if items[i][1] > a]
            if active:  # the highest rank, and among equals the latest started (innermost)
                best = max(active, key=lambda i: (items[i][2], items[i][0]))
                out[items[best][3]] += b - a
            else:
                out["other"] += b - a
        return out


_thread_id = threading.get_ident  # bound here: the import probes call it


def _module(*names: str):
    """The first of the modules `names` that imports (gemsim's private layout changes)."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(names[0])


def install_probes() -> Probes:
    """Probes on the stages of a run (see `Probes`), JAX already imported."""
    import jax

    import gemsim.config
    import gemsim.engine
    import gemsim.results

    # The modules by their names in this gemsim, or in an older one (`--gemsim`).
    many_runs = _module("gemsim.app.execute._many_runs", "gemsim.app._many_runs")
    stages = _module("gemsim.app.execute._stages", "gemsim.app._stages")
    simulated = _module("gemsim.app.execute._simulated", "gemsim.app._run")
    one_run = _module("gemsim.app.execute._one_run", "gemsim.app._one_run")
    trace_store = _module("gemsim.app.sweep._traces", "gemsim.app._trace_store")
    run_verb = _module("gemsim.app.verbs._run", "gemsim.app._run")
    run_sweep = _module("gemsim.app.verbs._run_sweep", "gemsim.app._run_sweep")

    probes = Probes()
    jax.monitoring.register_event_time_span_listener(probes.compiled)
    for owner, name, stage in (
        (gemsim.config, "load_scenario", "parse"),
        (gemsim.config, "expand", "parse"),
        (run_sweep, "preflight", "checks"),
        (gemsim.config, "build_rule", "problem"),
        (stages, "build_problem", "problem"),
        (simulated, "build_problem", "problem"),
        (trace_store.Traces, "trace_for", "timing"),
        (trace_store.Traces, "timed_for", "timing"),
        (gemsim.engine.Executor, "execute", "execute"),
        (gemsim.engine.ManyRunsExecutor, "execute", "execute"),
        (run_verb, "run_result", "record"),
        (many_runs, "run_result", "record"),
        (run_verb, "record_of", "record"),
        (one_run, "record_of", "record"),
        (many_runs, "record_of", "record"),
        (gemsim.results.RunResult, "write", "write"),
    ):
        if hasattr(owner, name):  # an older gemsim (`--gemsim`) may lack one
            probes.wrap(owner, name, stage)
    probes.install_imports()
    return probes


def cli_child(report: str, args: list[str]) -> None:
    """`gemsim run ARGS` in this process with probes, ended as the command ends (exit hooks,
    no teardown: `gemsim.cli.main`); the stages written to `report` by an exit hook."""
    import atexit

    first = time.time()
    import jax  # noqa: F401

    jax_s = time.time() - first
    import gemsim.cli

    probes = install_probes()
    started = time.time()

    def write_report() -> None:
        seconds = probes.seconds(started, time.time())
        seconds["import jax"] = jax_s
        seconds["imports"] += started - first - jax_s
        Path(report).write_text(json.dumps({"first": first, **seconds}))

    atexit.register(write_report)
    sys.argv = ["gemsim", "run", *args, "--quiet"]
    gemsim.cli.main()


def notebook_child(report: str, scenario: str, out: str) -> None:
    """Two runs in this process as a notebook makes them (`gemsim.load_scenario`, `gemsim.run`,
    `RunResult.write`): each run's stages and wall seconds."""
    first = time.time()
    import jax  # noqa: F401

    jax_s = time.time() - first
    import gemsim

    probes = install_probes()
    runs = []
    for i in range(2):
        started = time.time()
        result = gemsim.run(gemsim.load_scenario(scenario))
        result.write(Path(out) / f"run{i}")
        ended = time.time()
        seconds = probes.seconds(started, ended)
        if i == 0:
            seconds["import jax"] = jax_s
            seconds["imports"] += started - first - jax_s
        runs.append({"wall": ended - started, **seconds})
    Path(report).write_text(json.dumps({"first": first, "runs": runs}))


# --- the driver ------------------------------------------------------------------------------


GEMSIM_TREE: list[str] = []  # `--gemsim`: another gemsim source tree for the children


def _env(cache: Path) -> dict[str, str]:
    # Bytecode as a user's installation writes it: where the shell says not to write any
    # (PYTHONDONTWRITEBYTECODE), every gemsim module was compiled anew in every process
    # (0.6 s more of imports in the middle study).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JAX_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["GEMSIM_CACHE_DIR"] = str(cache)
    if GEMSIM_TREE:
        env[TREE_ENV] = GEMSIM_TREE[0]
    return env


TREE_ENV = "GEMSIM_BENCH_TREE"


def use_tree() -> None:
    """In a child: import gemsim from the tree `--gemsim` named, not the installed one (an
    editable install's finder comes before sys.path)."""
    tree = os.environ.get(TREE_ENV)
    if tree:
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in str(f)]
        sys.path.insert(0, tree)


def _spawn(args: list[str], env=None) -> tuple[float, float]:
    """A child process's wall seconds and start (it must succeed)."""
    started = time.time()
    done = subprocess.run(args, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.time() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, started


def run_reference(tree: Path, size: str, lrs: list[float], tmp: Path) -> dict:
    n, d, seconds = SIZES[size]
    out = tmp / f"ref-{size}-{len(lrs)}-{time.monotonic_ns()}.npz"
    args = [sys.executable, __file__, "--child-reference", str(tree), str(n), str(d)]
    wall, _ = _spawn([*args, str(seconds), str(out), "--", *map(repr, lrs)])
    return {"wall": wall, "out": out}


def run_cli(scenario: Path, out: Path, cache: Path, extra: list[str], tmp: Path) -> dict:
    report = tmp / f"report-{time.monotonic_ns()}.json"
    args = [sys.executable, __file__, "--child-cli", str(report), "--", str(scenario)]
    wall, started = _spawn([*args, "--out", str(out), *extra], env=_env(cache))
    got = json.loads(report.read_text())
    stages = {k: got.get(k, 0.0) for k in STAGES if k != "other"}
    stages["interpreter"] = got["first"] - started
    stages["other"] = wall - sum(stages.values())  # the exit and the process's end included
    return {"wall": wall, "stages": stages, "out": out}


def run_notebook(scenario: Path, out: Path, cache: Path, tmp: Path) -> dict:
    report = tmp / f"report-{time.monotonic_ns()}.json"
    args = [sys.executable, __file__, "--child-notebook", str(report), str(scenario), str(out)]
    _, started = _spawn(args, env=_env(cache))
    got = json.loads(report.read_text())
    second = got["runs"][1]
    stages = {k: second.get(k, 0.0) for k in STAGES}
    return {"wall": second["wall"], "stages": stages, "out": out / "run1"}


def final_points(folder: Path) -> list:
    """The final parameters of every run under `folder`, in the sweep's order (by lr)."""
    import numpy as np

    found = []
    for manifest in folder.glob("**/manifest.json"):
        meta = json.loads(manifest.read_text())
        lr = meta["config"]["optimizer"]["lr"]
        with np.load(manifest.parent / "params.npz") as params:
            found.append((lr, params[params.files[0]], meta["n_commits"]))
    return sorted(found, key=lambda x: x[0])


def compare(reference: Path, folder: Path) -> dict:
    """The largest relative difference between the reference's final points and gemsim's,
    and whether the numbers of updates are equal."""
    import numpy as np

    ours = final_points(folder)
    with np.load(reference) as ref:
        theirs = [(ref[f"run{r}"], int(ref[f"updates{r}"])) for r in range(len(ours))]
    diffs = [
        float(np.linalg.norm(a - b) / np.linalg.norm(b))
        for (_, a, _), (b, _) in zip(ours, theirs, strict=True)
    ]
    same = all(k == u for (_, _, k), (_, u) in zip(ours, theirs, strict=True))
    return {"max_rel_diff": max(diffs), "same_updates": same}


def write_scenarios(tmp: Path, sizes: list[str]) -> dict[str, Path]:
    paths = {}
    for size in sizes:
        n, d, seconds = SIZES[size]
        doc = scenario_doc(f"tridiagonal-{size}", n, d, seconds)
        paths[size] = tmp / f"{size}.yaml"
        paths[size].write_text(yaml.safe_dump(doc))
        study = {**doc, "name": f"tridiagonal-{size}-study"}
        study["sweep"] = {"optimizer.lr": study_lrs(n)}
        paths[f"{size}-study"] = tmp / f"{size}-study.yaml"
        paths[f"{size}-study"].write_text(yaml.safe_dump(study))
    return paths


def one_round(r: int, args, tree: Path, tmp: Path, paths: dict[str, Path]) -> dict:
    """Every measurement of one round, interleaved size by size."""
    got: dict = {}
    cache = tmp / f"cache-{r}"
    for size in args.sizes:
        n = SIZES[size][0]
        folder = tmp / f"r{r}-{size}"
        ref = run_reference(tree, size, [lr_of(n)], tmp)
        cold = run_cli(paths[size], folder / "cold", cache, [], tmp)
        warm = run_cli(paths[size], folder / "warm", cache, [], tmp)
        notebook = run_notebook(paths[size], folder / "notebook", cache, tmp)
        got[size] = {
            "reference": ref["wall"],
            "cold": cold,
            "warm": warm,
            "notebook": notebook,
            "same_work": compare(ref["out"], warm["out"]),
        }
    if "study" in args.parts:
        for size in args.study_sizes:
            n = SIZES[size][0]
            folder = tmp / f"r{r}-{size}-study"
            ref = run_reference(tree, size, study_lrs(n), tmp)
            study = {"reference": ref["wall"]}
            for setting in ("auto", "off"):
                extra = ["--set", f"engine.many_runs={setting}"]
                path = paths[f"{size}-study"]
                # The round's compilation cache warm, as for a user's second study.
                run_cli(path, folder / f"{setting}-first", cache, extra, tmp)
                study[setting] = run_cli(path, folder / setting, cache, extra, tmp)
            study["same_work"] = compare(ref["out"], folder / "auto")
            got[f"{size}-study"] = study
    return got


def eval_cost(size: str, rounds: int) -> dict:
    """The engine alone on `size`: microseconds per commit with eval.every 1 and 100, the
    evaluations inside the commit loop (the default there) and between segments (as before
    they could be inside), compiled beforehand, interleaved rounds in this process (the slow
    way at every commit once: it takes about 0.3 ms an evaluation)."""
    import jax  # noqa: F401

    from gemsim import config, engine
    from gemsim.app import RunIdentity, build_problem
    from gemsim.types import RunKind

    identity = _module("gemsim.app.record._identity", "gemsim.app._record")
    trace_store = _module("gemsim.app.sweep._traces", "gemsim.app._trace_store")

    n, d, seconds = SIZES[size]
    doc = scenario_doc("eval", n, d, seconds)
    scenario = config.parse_scenario(doc, "eval.yaml")
    who = RunIdentity.of(identity.expanded_of(scenario), RunKind.SIM)
    rule, problem = config.build_rule(scenario), build_problem(scenario)
    (trace, _), _ = trace_store.Traces().timed_for(who)
    plans = {every: engine.plan_of(trace, eval_every=every) for every in (1, EVAL_EVERY)}
    kw = dict(params=problem.init_params, n_workers=n)
    executors = {
        way: engine.SequentialExecutor(rule, problem, evals_in_loop=way == "loop", **kw)
        for way in ("loop", "host")
    }
    cases = [("loop", 1), ("loop", EVAL_EVERY), ("host", EVAL_EVERY)]
    for way, every in [*cases, ("host", 1)]:  # compiles; the host at every commit, once
        started = time.perf_counter()
        executors[way].execute(plans[every], problem=problem)
        host_every_1 = time.perf_counter() - started
    times: dict[tuple, list[float]] = {case: [] for case in cases}
    for _ in range(rounds):
        for way, every in cases:
            started = time.perf_counter()
            executors[way].execute(plans[every], problem=problem)
            times[way, every].append(time.perf_counter() - started)
    commits = len(plans[1])
    per = {
        f"{way} {every}": statistics.median(t) / commits * 1e6 for (way, every), t in times.items()
    }
    per["host 1"] = host_every_1 / commits * 1e6
    evals = {every: plans[every].evals.size for every in plans}

    def extra(way: str) -> float:  # the microseconds the extra evaluations took
        return (per[f"{way} 1"] - per[f"{way} {EVAL_EVERY}"]) * commits

    return {
        "size": size,
        "commits": commits,
        "us_per_commit": per,
        "ratio_1_to_100": per["loop 1"] / per[f"host {EVAL_EVERY}"],
        "us_per_evaluation": {
            way: extra(way) / (evals[1] - evals[EVAL_EVERY]) for way in ("loop", "host")
        },
        "rounds": {f"{w} {e}": [x / commits * 1e6 for x in t] for (w, e), t in times.items()},
    }


def medians(rounds: list[dict]) -> dict:
    """Medians over rounds of every figure the report shows."""

    def med(values):
        return statistics.median(values)

    out: dict = {}
    for key in rounds[0]:
        items = [r[key] for r in rounds]
        entry: dict = {"reference": med([x["reference"] for x in items])}
        for variant in ("cold", "warm", "notebook", "auto", "off"):
            if variant in items[0]:
                entry[variant] = {
                    "wall": med([x[variant]["wall"] for x in items]),
                    "stages": {
                        s: med([x[variant]["stages"].get(s, 0.0) for x in items]) for s in STAGES
                    },
                    "speedup": med([x["reference"] / x[variant]["wall"] for x in items]),
                }
        entry["same_work"] = {
            "max_rel_diff": max(x["same_work"]["max_rel_diff"] for x in items),
            "same_updates": all(x["same_work"]["same_updates"] for x in items),
        }
        out[key] = entry
    return out


def table(report: dict) -> str:
    from _common import environment_line

    lines = [
        environment_line(report["environment"])
        + f" | load after {', '.join(f'{x:.2f}' for x in report['load_average_after'])}"
    ]
    figures = report.get("figures", {})
    sizes = [k for k in figures if not k.endswith("-study")]
    if "costs" in report["parts"] and sizes:
        lines += ["", f"costs by stage, seconds (medians of {report['rounds']} rounds)"]
        head = f"{'size / variant':<20}" + "".join(f"{s[:9]:>10}" for s in STAGES)
        lines += [head + f"{'wall':>9}"]
        for size in sizes:
            for variant in ("cold", "warm", "notebook"):
                v = figures[size][variant]
                cells = "".join(f"{v['stages'][s]:>10.3f}" for s in STAGES)
                lines.append(f"{size + ' ' + variant:<20}{cells}{v['wall']:>9.2f}")
    if "versus" in report["parts"] and sizes:
        lines += ["", "end to end, wall seconds (speedup = reference / gemsim, median of rounds)"]
        lines.append(
            f"{'size':<8}{'reference':>10}{'run, new':>10}{'speedup':>9}"
            f"{'2nd run':>9}{'speedup':>9}  same work"
        )
        for size in sizes:
            f = figures[size]
            w, nb = f["warm"], f["notebook"]
            lines.append(
                f"{size:<8}{f['reference']:>10.2f}{w['wall']:>10.2f}{w['speedup']:>8.2f}x"
                f"{nb['wall']:>9.2f}{nb['speedup']:>8.2f}x  {_same(f['same_work'])}"
            )
    studies = [k for k in figures if k.endswith("-study")]
    if studies:
        lines += ["", f"{STUDY_RUNS} runs as one study, by stage (seconds)"]
        lines += [f"{'study / many_runs':<20}" + "".join(f"{s[:9]:>10}" for s in STAGES)]
        for key in studies:
            for variant in ("auto", "off"):
                v = figures[key][variant]
                cells = "".join(f"{v['stages'][s]:>10.3f}" for s in STAGES)
                lines.append(f"{key.split('-')[0] + ' ' + variant:<20}{cells}{v['wall']:>9.2f}")
        lines += ["", f"{STUDY_RUNS} runs as one study, wall seconds"]
        lines.append(
            f"{'size':<14}{'reference':>10}{'auto':>8}{'speedup':>9}{'off':>8}{'speedup':>9}"
            "  same work"
        )
        for key in studies:
            f = figures[key]
            a, o = f["auto"], f["off"]
            lines.append(
                f"{key:<14}{f['reference']:>10.2f}{a['wall']:>8.2f}{a['speedup']:>8.2f}x"
                f"{o['wall']:>8.2f}{o['speedup']:>8.2f}x  {_same(f['same_work'])}"
            )
    if "eval" in report:
        e = report["eval"]
        per, each = e["us_per_commit"], e["us_per_evaluation"]
        lines += [
            "",
            f"evaluation, {e['size']} ({e['commits']:,} commits, engine alone), us per commit:",
            f"  every {EVAL_EVERY}: {per[f'host {EVAL_EVERY}']:.1f} between segments, "
            f"{per[f'loop {EVAL_EVERY}']:.1f} inside the loop",
            f"  every 1: {per['host 1']:.1f} between segments (one execution), "
            f"{per['loop 1']:.1f} inside the loop ({e['ratio_1_to_100']:.2f}x every "
            f"{EVAL_EVERY} between segments)",
            f"  an evaluation: {each['host']:.1f} us between segments, {each['loop']:.1f} inside",
        ]
    return "\n".join(lines)


def _same(same: dict) -> str:
    updates = "same updates" if same["same_updates"] else "UPDATES DIFFER"
    return f"{updates}, final points within {same['max_rel_diff']:.1e}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["--child-cli"], ["--child-notebook"]):
        use_tree()
    if argv[:1] == ["--child-reference"]:
        tree, n, d, seconds, out = argv[1:6]
        reference_child(tree, int(n), int(d), float(seconds), [float(x) for x in argv[7:]], out)
        return 0
    if argv[:1] == ["--child-cli"]:
        cli_child(argv[1], argv[3:])
        return 0
    if argv[:1] == ["--child-notebook"]:
        notebook_child(*argv[1:4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="a git clone of vectozavr/ringmaster-lmo")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--study-sizes", nargs="+", default=["middle"], choices=list(SIZES))
    parser.add_argument("--eval-size", default="large", choices=list(SIZES))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--gemsim", type=Path, help="run this gemsim source tree (a checkout) instead: before/after"
    )
    args = parser.parse_args(argv)
    if args.gemsim is not None:
        GEMSIM_TREE.append(str(args.gemsim.resolve()))
    from _common import environment

    report: dict = {"environment": environment(), "rounds": args.rounds, "parts": args.parts}
    if {"costs", "versus", "study"} & set(args.parts):
        if args.reference is None:
            parser.error("--reference: a git clone of github.com/vectozavr/ringmaster-lmo")
        if not {"costs", "versus"} & set(args.parts):
            args.sizes = []
        with tempfile.TemporaryDirectory(prefix="gemsim-fixed-costs-") as name:
            tmp = Path(name)
            tree = reference_tree(args.reference, tmp / "reference")
            paths = write_scenarios(tmp, sorted({*args.sizes, *args.study_sizes}))
            rounds = [one_round(r, args, tree, tmp, paths) for r in range(args.rounds)]
        report["figures"] = medians(rounds)
    if "eval" in args.parts:
        report["eval"] = eval_cost(args.eval_size, args.rounds)
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
