"""The authors' public toy of asynchronous local SGD beside gemsim, on the same data and speeds.

Liu, Douillard et al. 2024 ("Asynchronous Local-SGD Training for Language Modeling", arXiv
2401.09135) published a toy, the PyTorch notebook ``AsyncLocalSGDToyExample.ipynb`` of the
repository ``google-deepmind/asyncdiloco``: 4 simulated workers at 0.58, 0.75, 1.51 and
3.33 s per local step, H = 20 local AdamW steps, a Gaussian mixture to classify. This script
runs the authors' own code, read from a clone the user names, and gemsim's
``scenarios/lm/async_local_toy.yaml``, on one data file, and prints one table.

    python benchmarks/asyncdiloco_toy.py --authors PATH_TO_CLONE \\
        --authors-python PYTHON_WITH_TORCH [--seeds 3] [--commits 200] [--hidden 256]

The data: ``scenarios/lm/toy_mixture.py`` writes the scenario's mixture (its ``kwargs``) to an
``.npz``; both sides read that file.

The authors' side runs in a child process of ``--authors-python`` (an interpreter with
``torch`` and ``numpy``; gemsim does not depend on PyTorch), on the CPU, one torch thread.
Their notebook is read at run time; nothing of it is copied here. Of its code cells it runs
the one that defines ``seeding`` (``DEVICE`` is then set to ``"cpu"``), the one with the
simulation code (``Experiment``, ``SyncExperiment``, ``AsyncExperiment``, ``inner_loop``)
whole, and of its data cell only the definitions (the ``Dataset`` class and the constants,
checked against the data and the scenario); the statements that draw its own 128,000 points,
the plotting cells and the experiment cells are not run. Its code reads the data from module
globals, and the script puts ours there (the hook the notebook allows): ``X`` and ``Y`` hold
our training then test points, ``cluster_indices_iid`` four IID shards of the training points
(one permutation, seed 0: its data cell also draws them once), ``eval_indices`` the test
points. Each run is one of its experiments with its own arguments (``model_hidden_size``,
``total_phases``, ``seed``, optimizers, ``sync_method``, ``max_wait_time``,
``lr_schedule``), in these settings:

- ``notebook``: as its experiment cells run it: the inner rate on its cosine schedule (the
  default ``lr_schedule``), asynchronous runs with its default grace period
  (``max_wait_time``), the outer optimizer given ``momentum`` without ``nesterov``, as its
  cells pass it (torch's SGD is then heavy-ball momentum), and its shard sampler (each task
  takes the least visited shard).
- ``aligned``: gemsim's settings where the toy can take them: a constant inner rate
  (``lr_schedule=None``), Nesterov, no grace period (``max_wait_time=0``), and each worker
  always on its own shard (its ``sample_data`` replaced by the worker's shard, as gemsim's IID
  partition has it). ``--toy-shards`` adds the same with its own shard sampler.

In every setting its asynchronous ``vanilla`` synchronisation scales each pseudo-gradient by
its ``get_sync_weight`` (``sqrt(K)/K``, 0.5 for 4 workers) before the outer step: its outer
learning rate is set to the scenario's divided by that weight, so that both sides take the
same step. Delayed Nesterov is not in the notebook: its rows run the toy's loop with
``vanilla`` replaced by Algorithm 3, written here from the paper as
``gemsim.rules.delayed_nesterov`` is. Nor is a runnable DyLU: ``sample_train_task`` has a
``scale_steps`` path that no cell takes and that fails as published; ``tasks`` below makes it
run (see there), and gemsim's DyLU row takes the counts it gives per worker (its floor of 5
steps is not eq. 6's; at the toy's speeds 20, 15, 7 and 5 against 20, 15, 7 and 3) as group
windows (``workers.groups[i].window``), and the number of commits the toy made (it stops at
a number of local steps, gemsim at a number of commits). A last row is gemsim's DyLU by eq. 6
(``window: {dynamic: H}``), which the toy has no counterpart of.

gemsim's side: the scenario's synchronous DiLoCo (its first outer optimizer under ``sync``),
each of its outer optimizers under ``async``, and its Delayed Nesterov with DyLU,
``repeats`` = ``--seeds``, the model ``toy_mixture:make_model`` of ``--hidden`` units on the
``.npz`` (``problem.dataset``), in two settings: ``gemsim`` (the scenario: ``local`` keeps
each worker's AdamW state across its commits) and ``gemsim-fresh`` (``local_fresh_inner``
below: a new AdamW state at every commit, as the toy's ``inner_loop`` builds its optimizer
anew).

Both sides' final parameters are evaluated here by one numpy function: loss and accuracy on
the whole training set and on the test set. The table gives, per variant and setting, the
mean ± standard deviation over seeds of the final training loss and test accuracy, then each
setting's ordering of the variants. The commits of the asynchronous runs (worker and virtual
time of each) are compared between the toy's loop and gemsim's trace.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "lm" / "async_local_toy.yaml"
NOTEBOOK = "AsyncLocalSGDToyExample.ipynb"
COLUMNS = {
    "notebook": "authors' loop, as its notebook runs it",
    "toy-shards": "authors' loop, gemsim's settings, its shard sampler",
    "aligned": "authors' loop, gemsim's settings and shards",
    "gemsim-fresh": "gemsim, a new inner AdamW state each commit (the toy's)",
    "gemsim": "gemsim (the scenario)",
}

# ---------------------------------------------------------------------------------------------
# Shared by both sides (numpy only)


def metrics(params: dict[str, np.ndarray], data) -> dict[str, float]:
    """Loss (mean cross-entropy) and accuracy of the one-hidden-layer ReLU network ``params``
    (w1 [D, h], b1 [h], w2 [h, C], b2 [C]) on the training and on the test set."""
    out = {}
    for split in ("train", "test"):
        x, y = np.asarray(data[f"x_{split}"], np.float64), np.asarray(data[f"y_{split}"])
        z = np.maximum(x @ params["w1"] + params["b1"], 0.0) @ params["w2"] + params["b2"]
        z = z - z.max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        out[f"{split}_loss"] = float(-log_p[np.arange(len(y)), y].mean())
        out[f"{split}_accuracy"] = float((z.argmax(axis=1) == y).mean())
    return out


# ---------------------------------------------------------------------------------------------
# The authors' side (the child process: numpy and torch)


def code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def the_cell(cells: list[str], marker: str) -> tuple[int, str]:
    """The one code cell that contains ``marker``."""
    found = [(i, s) for i, s in enumerate(cells) if marker in s]
    if len(found) != 1:
        raise SystemExit(f"the notebook has {len(found)} code cells with {marker!r}, not one")
    return found[0]


def definitions(source: str) -> ast.Module:
    """Of a cell, its imports, definitions, literal constants and asserts: what its other
    cells use from it, without the statements that draw or shuffle data."""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assert)
    body = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            with contextlib.suppress(ValueError, TypeError, SyntaxError):
                ast.literal_eval(node.value)
                body.append(node)
        elif isinstance(node, keep):
            body.append(node)
    return ast.Module(body=body, type_ignores=[])


def load_notebook(path: Path) -> types.ModuleType:
    """The notebook's simulation code as a module (its data globals not yet set)."""
    cells = code_cells(path)
    module = types.ModuleType("asyncdiloco_notebook")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    for marker, whole in (("def seeding", True), ("def make_data", False),
                          ("class AsyncExperiment", True)):  # fmt: skip
        i, source = the_cell(cells, marker)
        code = source if whole else definitions(source)
        exec(compile(code, f"{path.name}, code cell {i}", "exec"), module.__dict__)  # noqa: S102
        module.DEVICE = "cpu"
    return module


def set_data(nb: types.ModuleType, data, spec: dict) -> None:
    """Our arrays where the notebook's code reads its own, after checking its constants."""
    expected = {"D": data["x_train"].shape[1], "NUM_CLASSES": int(data["y_train"].max()) + 1,
                "BATCHSIZE": spec["batch_size"], "NUM_WORKERS": spec["workers"],
                "NUM_DATA_SHARDS": spec["workers"]}  # fmt: skip
    for name, value in expected.items():
        if getattr(nb, name) != value:
            raise SystemExit(f"the notebook's {name} is {getattr(nb, name)}; ours: {value}")
    n_train = len(data["y_train"])
    nb.X = np.concatenate([data["x_train"], data["x_test"]])
    nb.Y = np.concatenate([data["y_train"], data["y_test"]]).astype(np.int64)
    order, size = np.random.default_rng(0).permutation(n_train), n_train // spec["workers"]
    nb.cluster_indices_iid = [order[k * size : (k + 1) * size].tolist()
                              for k in range(spec["workers"])]  # fmt: skip
    nb.eval_indices = list(range(n_train, len(nb.Y)))


@contextlib.contextmanager
def tasks(nb: types.ModuleType, exp, own: bool, dylu: bool):
    """The toy's tasks for one run, changed where asked. ``own``: each task of worker k takes
    shard k (gemsim's partition), not the least visited shard. ``dylu``: its own DyLU path,
    ``sample_train_task(..., scale_steps=True)``, which no cell takes and which does not run
    as published: the global ``workers`` it reads is set to the run's, and ``inner_loop`` is
    handed the task's ``num_train_steps`` where ``train`` passes ``default_inner_steps``."""
    task, sample, submit, last = nb.sample_train_task, nb.sample_data, exp.train_writer.submit, {}

    def tracked(worker, experiment, train_steps, scale_steps=False):
        last["worker"] = worker
        return task(worker, experiment, train_steps, scale_steps=scale_steps or dylu)

    def submit_own_steps(fn, model, dataset, indices, steps, *rest):
        return submit(fn, model, dataset, indices, last["worker"].num_train_steps, *rest)

    nb.sample_train_task = tracked
    if own:
        nb.sample_data = lambda shards: shards[last["worker"].worker_id].data_id
    if dylu:
        nb.workers, exp.train_writer.submit = exp.workers, submit_own_steps
    try:
        yield
    finally:
        nb.sample_train_task, nb.sample_data = task, sample
        if dylu:
            del nb.workers


def longer(indices: np.ndarray, spec: dict, seed: int) -> np.ndarray:
    """A shard's batch order, followed by more shuffled epochs of it: enough for one worker
    to make every commit on it (the toy draws about twice a shard's share)."""
    n = int(indices.max()) + 1
    epochs = spec["commits"] * spec["window"] * spec["batch_size"] // n + 1
    rng = np.random.default_rng(seed)
    return np.concatenate([indices, *(rng.permutation(n) for _ in range(epochs))])


def delayed_nesterov_step(exp, pseudo_gradient, lr: float, beta: float, n: int, c: float):
    """Algorithm 3 of the paper on the toy's server model (the notebook has no such step)."""
    import torch

    params = list(exp.server_model.parameters())
    if not hasattr(exp, "dn_count"):
        exp.dn_count = 0
        exp.dn_m = [torch.zeros_like(p) for p in params]
        exp.dn_buffer = [torch.zeros_like(p) for p in params]
    exp.dn_count += 1
    with torch.no_grad():
        for p, g, m, d in zip(params, pseudo_gradient, exp.dn_m, exp.dn_buffer, strict=True):
            if exp.dn_count % n == 0:
                m.mul_(beta).add_((d + g) / n)
                p.sub_(lr * ((1 - c * n + c) * beta * m + g / n))
                d.zero_()
            else:
                d.add_(g)
                p.sub_(lr * (c * beta * m + g / n))


def experiment_class(nb: types.ModuleType, variant: dict):
    """The notebook's experiment class for ``variant``, also keeping its final parameters and
    (asynchronously) the worker and time of each commit."""
    base = nb.SyncExperiment if variant["protocol"] == "sync" else nb.AsyncExperiment
    outer = variant["outer"]

    def close(self):
        net = self.server_model.net
        self.final = {
            "w1": net[1].weight.detach().numpy().T,
            "b1": net[1].bias.detach().numpy(),
            "w2": net[3].weight.detach().numpy().T,
            "b2": net[3].bias.detach().numpy(),
        }
        self.final = {k: v.astype(np.float64) for k, v in self.final.items()}  # fmt: skip
        base.close(self)

    def synchronize(self, w):
        self.commits.append((int(w.worker_id), float(self.time_now), int(w.num_train_steps)))
        base.synchronize(self, w)

    def vanilla(self, pseudo_gradient, sync_weight):
        del sync_weight  # Algorithm 3 weighs by 1/N itself
        delayed_nesterov_step(self, pseudo_gradient, outer["learning_rate"],
                              outer.get("momentum", 0.9), outer["period"],
                              outer.get("activation", 0.0))  # fmt: skip

    extra = {"close": close}
    if variant["protocol"] != "sync":
        extra["synchronize"] = synchronize
    if outer["name"] == "delayed_nesterov":
        extra["vanilla"] = vanilla
    return type(f"Toy{base.__name__}", (base,), extra)


def authors_arguments(nb: types.ModuleType, variant: dict, setting: str, spec: dict) -> dict:
    """The notebook experiment's arguments for one variant in one setting."""
    outer, aligned = variant["outer"], setting != "notebook"
    kwargs = {"model_hidden_size": spec["hidden"], "default_inner_steps": spec["window"],
              "total_phases": spec["commits"] // spec["workers"],
              "eval_every": spec["commits"], "inner_opt_name": "adamw",
              "inner_opt_kwargs": {"lr": spec["inner_lr"], "weight_decay": spec["weight_decay"],
                                   "betas": (0.9, 0.999)},
              "outer_opt_name": "nesterov"}  # fmt: skip
    momentum = {"momentum": outer.get("momentum", 0.0)}
    if aligned:
        kwargs["lr_schedule"] = None
        if outer["name"] != "delayed_nesterov":
            momentum["nesterov"] = outer["name"] == "buffered_nesterov" or bool(
                outer.get("nesterov")
            )
    kwargs["outer_opt_kwargs"] = {"lr": outer["learning_rate"], **momentum}
    if variant["protocol"] == "sync":
        return kwargs
    if aligned:
        kwargs["max_wait_time"] = 0.0  # the notebook's own setting keeps its default
    if outer["name"] == "buffered_nesterov" and outer["period"] != nb.NUM_WORKERS:
        raise SystemExit(f"the toy's buffer holds NUM_WORKERS = {nb.NUM_WORKERS} commits")
    kwargs["sync_method"] = "delayed_sgd" if outer["name"] == "buffered_nesterov" else "vanilla"
    return kwargs


def run_authors(nb: types.ModuleType, variant: dict, setting: str, seed: int, spec: dict):
    """One run of the toy's loop: its final parameters, its commits and its last evaluation."""
    kwargs = authors_arguments(nb, variant, setting, spec)
    with contextlib.redirect_stdout(sys.stderr):
        exp = experiment_class(nb, variant)(seed=seed, **kwargs)
    exp.commits = []
    with (
        contextlib.redirect_stdout(sys.stderr),
        tasks(nb, exp, setting == "aligned", variant["dylu"]),
    ):
        speeds = [w.device_sec_per_step for w in exp.workers]
        if speeds != spec["speeds"]:
            raise SystemExit(
                f"the notebook's workers take {speeds} s per step; ours {spec['speeds']}"
            )
        if setting == "aligned":  # its indices are sized for shards visited alike
            exp.train_indices = [longer(ix, spec, seed) for ix in exp.train_indices]
        if variant["protocol"] != "sync" and variant["outer"]["name"] == "sgd":
            for group in exp.server_optimizer.param_groups:  # its vanilla step weighs g
                group["lr"] = variant["outer"]["learning_rate"] / exp.get_sync_weight(0)
        exp.run()
    for shard, indices in zip(exp.data_shards, exp.train_indices, strict=True):
        if shard.local_updates * nb.BATCHSIZE > len(indices):  # its batches would run short
            raise SystemExit(f"shard {shard.data_id} ran out of its {len(indices)} indices")
    return exp.final, exp.commits, exp.stats[-1]


def authors_main(spec_path: Path) -> None:
    """The child process: every variant, setting and seed of the spec, as JSON in the spec's
    ``out`` file (the notebook's code prints as it goes: to stderr)."""
    import torch

    torch.set_num_threads(1)
    spec = json.loads(spec_path.read_text())
    data = dict(np.load(spec["data"]))
    with contextlib.redirect_stdout(sys.stderr):
        nb = load_notebook(Path(spec["notebook"]))
    set_data(nb, data, spec)
    out = []
    for variant in spec["variants"]:
        if variant["dylu"] == "eq6":
            continue  # the toy's DyLU has its own counts (see ``tasks``)
        for setting in spec["settings"]:
            for seed in range(spec["seeds"]):
                start = time.perf_counter()
                final, commits, last = run_authors(nb, variant, setting, seed, spec)
                out.append({"variant": variant["key"], "setting": setting, "seed": seed,
                            **metrics(final, data), "commits": commits, "own_eval": list(last),
                            "seconds": time.perf_counter() - start})  # fmt: skip
                print(
                    f"authors, {variant['key']}, {setting}, seed {seed}: training loss "
                    f"{out[-1]['train_loss']:.4f} ({out[-1]['seconds']:.1f} s)",
                    file=sys.stderr,
                )
    Path(spec["out"]).write_text(json.dumps(out))


# ---------------------------------------------------------------------------------------------
# gemsim's side and the table (the project's environment)


def local_fresh_inner(inner: dict, outer: dict, window: int):
    """gemsim's ``local`` with a new inner optimizer state at every commit, as the toy's
    ``inner_loop`` builds its AdamW anew (``local`` keeps each worker's across its commits).
    Named in a scenario as ``rule: {import: "asyncdiloco_toy:local_fresh_inner"}``."""
    import optax

    from gemsim import rules

    def built(spec: dict):
        own = {"delayed_nesterov": rules.delayed_nesterov,
               "buffered_nesterov": rules.buffered_nesterov}  # fmt: skip
        factory = own.get(spec["name"]) or getattr(optax, spec["name"])
        return factory(**{k: v for k, v in spec.items() if k != "name"})

    inner_tx = built(inner)
    rule = rules.local(inner_tx, built(outer), window)

    def commit(theta, server, ws, work, ctx):
        theta, server, _, info = rule.commit(theta, server, ws, work, ctx)
        return theta, server, rules.LocalWorkerState(inner_tx.init(theta)), info

    return rule._replace(commit=commit)


def outer_label(outer: dict) -> str:
    name, lr = outer["name"], f"{outer['learning_rate']:g}"
    if name == "sgd":
        return ("Nesterov " if outer.get("nesterov") else "SGD ") + lr
    if name == "buffered_nesterov":
        return f"buffered (N = {outer['period']}) {lr}"
    if name == "delayed_nesterov":
        return f"Delayed Nesterov (N = {outer['period']}, c = {outer.get('activation', 0):g}) {lr}"
    return name


def scenario_spec(args) -> dict:
    """What both sides take from the scenario: speeds, H, the inner optimizer, the variants:
    its first outer optimizer under ``sync``, each of them under ``async``, and its Delayed
    Nesterov with DyLU (the toy's own step counts; in gemsim also eq. 6's)."""
    from gemsim.config import read_document

    doc = read_document(SCENARIO)
    outers = doc["sweep"]["optimizer.outer"]
    if doc["sweep"]["server.protocol"] != ["sync", "async"]:
        raise SystemExit(f"{SCENARIO.name}: expected server.protocol [sync, async] in its sweep")
    (dn,) = [o for o in outers if o["name"] == "delayed_nesterov"]
    variants = [{"key": f"sync DiLoCo, {outer_label(outers[0])}", "protocol": "sync",
                 "outer": outers[0], "dylu": False}]  # fmt: skip
    variants += [{"key": f"async, {outer_label(o)}", "protocol": "async", "outer": o,
                  "dylu": False} for o in outers]  # fmt: skip
    variants += [{"key": f"async, {outer_label(dn)}, DyLU (the toy's counts)",
                  "protocol": "async", "outer": dn, "dylu": True},
                 {"key": f"async, {outer_label(dn)}, DyLU (eq. 6), gemsim only",
                  "protocol": "async", "outer": dn, "dylu": "eq6"}]  # fmt: skip
    inner = doc["optimizer"]["inner"]
    return {
        "workers": doc["workers"]["count"],
        "groups": doc["workers"]["groups"],
        "speeds": [g["compute"]["value"] for g in doc["workers"]["groups"]],
        "window": doc["optimizer"]["window"],
        "inner_lr": inner["learning_rate"],
        "weight_decay": inner["weight_decay"],
        "batch_size": doc["problem"]["batch_size"],
        "data_kwargs": doc["problem"]["model"]["kwargs"],
        "commits": args.commits or doc["budget"]["commits"],
        "hidden": args.hidden,
        "seeds": args.seeds,
        "settings": ["notebook", *(["toy-shards"] if args.toy_shards else []), "aligned"],
        "variants": variants,
    }


def write_data(spec: dict, work: Path) -> Path:
    """The mixture, written by the scenario's own generator (scenarios/lm/toy_mixture.py)."""
    path, kw = work / "toy_mixture.npz", spec["data_kwargs"]
    command = [sys.executable, str(SCENARIO.parent / "toy_mixture.py"), str(path),
               "--train", str(kw["n_train"]), "--test", str(kw["n_test"])]  # fmt: skip
    subprocess.run(command, check=True)
    return path


def toy_dylu(authors: list[dict], spec: dict) -> dict:
    """The toy's DyLU run (gemsim's settings, seed 0): its commits and each worker's steps."""
    key = next(v["key"] for v in spec["variants"] if v["dylu"] is True)
    commits = next(r["commits"] for r in authors if r["variant"] == key
                   and r["setting"] == "aligned" and r["seed"] == 0)  # fmt: skip
    steps = {w: {k for w_, _, k in commits if w_ == w} for w in range(spec["workers"])}
    if any(len(k) != 1 for k in steps.values()):
        raise SystemExit(f"the toy's DyLU run took varying steps per worker: {steps}")
    return {"commits": len(commits), "windows": [steps[w].pop() for w in sorted(steps)]}


def gemsim_runs(spec: dict, dylu: dict) -> list[tuple[list[dict], dict]]:
    """The variants in groups of one sweep each, with each group's overrides."""
    fixed = {(p, False) for p in ("sync", "async")}
    groups = [([v for v in spec["variants"] if (v["protocol"], v["dylu"]) == key], {})
              for key in sorted(fixed, reverse=True)]  # fmt: skip
    budget = {"budget.commits": dylu["commits"]}  # the toy's commits, for the same steps
    windows = [{**g, "window": k} for g, k in zip(spec["groups"], dylu["windows"], strict=True)]
    for v in spec["variants"]:
        if v["dylu"] is True:
            groups.append(([v], {**budget, "workers.groups": windows}))
        elif v["dylu"] == "eq6":
            groups.append(([v], {**budget, "optimizer.window": {"dynamic": spec["window"]}}))
    return [(vs, {**extra, "sweep": {"server.protocol": [vs[0]["protocol"]],
                                     "optimizer.outer": [v["outer"] for v in vs]}})
            for vs, extra in groups]  # fmt: skip


def run_gemsim(spec: dict, data_path: Path, work: Path, dylu: dict):
    """The variants, ``seeds`` repeats each, with ``local`` and with ``local_fresh_inner``:
    each run's evaluated final parameters, and the commits (worker, time, local steps) of one
    run of each variant."""
    import pandas as pd

    from gemsim import run_file

    data = dict(np.load(data_path))
    base = {"repeats": spec["seeds"], "budget.commits": spec["commits"],
            "problem.model": {"import": "toy_mixture:make_model",
                              "kwargs": {"hidden": spec["hidden"]}},
            "problem.dataset": {"name": "arrays", "path": str(data_path)}}  # fmt: skip
    fresh = {"optimizer.rule": {"import": "asyncdiloco_toy:local_fresh_inner"}}
    out, commits = [], {}
    for setting, extra in (("gemsim-fresh", fresh), ("gemsim", {})):
        for variants, overrides in gemsim_runs(spec, dylu):
            if setting == "gemsim-fresh" and variants[0]["dylu"] == "eq6":
                continue  # an imported rule is handed a dynamic window as it is written
            out_dir, rows = run_file(SCENARIO, out=work / setting, quiet=True,
                                     overrides={**base, **extra, **overrides})  # fmt: skip
            for row in rows:
                run_dir = out_dir / row.run_id
                seed = json.loads((run_dir / "manifest.json").read_text())["seed"]
                (v,) = [v for v in variants if v["outer"] == row.sweep["optimizer.outer"]]
                with np.load(run_dir / "params.npz") as npz:
                    params = {k.strip("[]'\""): npz[k].astype(np.float64) for k in npz.files}
                out.append({"variant": v["key"], "setting": setting, "seed": seed,
                            "status": row.status, **metrics(params, data)})  # fmt: skip
                trace = pd.read_parquet(run_dir / "trace.parquet")
                steps = (
                    trace["local_steps"]
                    if "local_steps" in trace
                    else [spec["window"]] * len(trace)
                )
                commits.setdefault(
                    v["key"], list(zip(trace["worker"], trace["time"], steps, strict=True))
                )
    return out, commits


def grace_commits(spec: dict, seconds: float) -> list[tuple[int, float]]:
    """gemsim's commits (worker, time) under a grace period of ``seconds`` (timing only)."""
    from gemsim import config
    from gemsim.app import simulate_timing

    overrides = {"sweep": {}, "budget.commits": spec["commits"],
                 "server.protocol": {"name": "grace", "seconds": seconds}}  # fmt: skip
    trace = simulate_timing(config.load_scenario(SCENARIO, overrides))
    return list(zip(trace.worker.tolist(), trace.time.tolist(), strict=True))


def compare_commits(ours: list, theirs: list) -> str:
    """How two commit sequences of (worker, time[, local steps]) agree."""
    n = min(len(ours), len(theirs))
    ours, theirs = ours[:n], theirs[:n]
    same = sum(a[0] == b[0] for a, b in zip(ours, theirs, strict=True))
    first = next((k for k in range(n) if ours[k][0] != theirs[k][0]), None)
    gap = max((abs(a[1] - b[1]) for a, b in zip(ours, theirs, strict=True)), default=0.0)
    where = "every one" if first is None else f"the first difference at commit {first}"
    steps = ""
    if all(len(a) > 2 and len(b) > 2 for a, b in zip(ours, theirs, strict=True)):
        alike = sum(int(a[2]) == int(b[2]) for a, b in zip(ours, theirs, strict=True))
        steps = f", {alike}/{n} with the same local steps"
    return (
        f"{same}/{n} commits by the same worker ({where}), times apart by at most "
        f"{gap:.3g} s{steps}; the last at {ours[-1][1]:.1f} s (gemsim), {theirs[-1][1]:.1f} s (toy)"
    )


def summarise(rows: list[dict], variants: list[dict]) -> dict:
    """Per (variant, setting): (mean, standard deviation) over seeds of each figure."""
    table = {}
    for v in variants:
        for setting in COLUMNS:
            runs = [r for r in rows if r["variant"] == v["key"] and r["setting"] == setting]
            if runs:
                table[v["key"], setting] = {
                    k: (float(np.mean([r[k] for r in runs])),
                        float(np.std([r[k] for r in runs], ddof=1)) if len(runs) > 1 else 0.0)
                    for k in ("train_loss", "train_accuracy", "test_loss", "test_accuracy")
                }  # fmt: skip
    return table


def print_table(table: dict, variants: list[dict], seeds: int) -> None:
    settings = [s for s in COLUMNS if any((v["key"], s) in table for v in variants)]

    def cell(key, setting):
        if (key, setting) not in table:
            return "n/a"
        t = table[key, setting]
        return (
            f"{t['train_loss'][0]:.3f} ± {t['train_loss'][1]:.3f} / "
            f"{t['test_accuracy'][0]:.3f} ± {t['test_accuracy'][1]:.3f}"
        )

    print(f"\nFinal training loss / test accuracy, mean ± sd over {seeds} seeds\n")
    print("| variant | " + " | ".join(COLUMNS[s] for s in settings) + " |")
    print("|---|" + "---|" * len(settings))
    for v in variants:
        print(f"| {v['key']} | " + " | ".join(cell(v["key"], s) for s in settings) + " |")
    print("\nOrdering by mean training loss (lowest first):")
    for s in settings:
        keys = [v["key"] for v in variants if (v["key"], s) in table]
        keys.sort(key=lambda k: table[k, s]["train_loss"][0])
        print(f"- {COLUMNS[s]}: " + " < ".join(keys))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--authors", type=Path, help=f"a clone of google-deepmind/asyncdiloco (or its {NOTEBOOK})"
    )
    parser.add_argument(
        "--authors-python",
        default=sys.executable,
        help="an interpreter with torch and numpy, for the authors' side",
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=None, help="default: the scenario's")
    parser.add_argument("--hidden", type=int, default=256, help="hidden units (the toy: 65,000)")
    parser.add_argument(
        "--toy-shards",
        action="store_true",
        help="also the authors' loop with gemsim's settings and its own shard sampler",
    )
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument("--authors-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.authors_side is not None:
        authors_main(args.authors_side)
        return 0
    if args.authors is None:
        parser.error("--authors PATH (a clone of google-deepmind/asyncdiloco) is required")
    notebook = args.authors / NOTEBOOK if args.authors.is_dir() else args.authors
    if not notebook.is_file():
        parser.error(f"--authors: no {NOTEBOOK} at {args.authors}")
    spec = scenario_spec(args)
    if spec["commits"] % spec["workers"]:
        parser.error(f"--commits must be a multiple of the {spec['workers']} workers")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # for local_fresh_inner
    with tempfile.TemporaryDirectory(prefix="asyncdiloco-toy-") as tmp:
        work = Path(tmp)
        data_path = write_data(spec, work)
        spec_path, result = work / "spec.json", work / "authors.json"
        spec_path.write_text(json.dumps({**spec, "data": str(data_path), "out": str(result),
                                         "notebook": str(notebook)}))  # fmt: skip
        start = time.perf_counter()
        child = subprocess.run([args.authors_python, __file__, "--authors-side", str(spec_path)],
                               check=False)  # fmt: skip
        if child.returncode != 0:
            print(f"the authors' side failed (exit {child.returncode}); has {args.authors_python} "
                  "torch and numpy?", file=sys.stderr)  # fmt: skip
            return 1
        authors, authors_s = json.loads(result.read_text()), time.perf_counter() - start
        start = time.perf_counter()
        dylu = toy_dylu(authors, spec)
        ours, our_commits = run_gemsim(spec, data_path, work, dylu)
        gemsim_s, grace = time.perf_counter() - start, grace_commits(spec, 0.5)
    print(f"\n{SCENARIO.relative_to(ROOT)}: {spec['commits']} commits of H = {spec['window']} "
          f"steps, {spec['hidden']} hidden units, workers at {spec['speeds']} s per step; "
          f"DyLU: the toy's {dylu['windows']} steps, {dylu['commits']} commits; wall time: "
          f"authors' side {authors_s:.0f} s, gemsim {gemsim_s:.0f} s")  # fmt: skip
    print_table(summarise(authors + ours, spec["variants"]), spec["variants"], spec["seeds"])
    print("\nCommits of the asynchronous runs, the toy's (gemsim's settings, seed 0) and gemsim's:")
    for v in spec["variants"]:
        theirs = {r["setting"]: r["commits"] for r in authors if r["variant"] == v["key"]}
        if v["protocol"] == "async" and theirs:
            print(f"- {v['key']}: {compare_commits(our_commits[v['key']], theirs['aligned'])}")
    plain = next(v["key"] for v in spec["variants"] if v["protocol"] == "async")
    theirs = next(r["commits"] for r in authors if r["variant"] == plain
                  and r["setting"] == "notebook")  # fmt: skip
    print(f"- the notebook's default grace period, 0.5 s, against gemsim's grace 0.5 s (timing "
          f"only): {compare_commits(grace, theirs)}")  # fmt: skip
    gap = max(abs(r["own_eval"][1] - r["test_loss"]) for r in authors)
    print(
        f"\nThe notebook's own last evaluation (test loss, float32) against ours: at most "
        f"{gap:.2g} apart"
    )
    if args.json:
        args.json.write_text(json.dumps(authors + ours, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
