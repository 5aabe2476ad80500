"""A model and a data set written outside the repository, named in a scenario by import path
and npz file: `gemsim run` against an independent numpy computation, `gemsim replay`,
`--resume` that follows the code, failures that exit 2 before any run, and one copy of the
data set for all the runs of a sweep."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "problems"))
from user_modules import regression_arrays, write_module  # noqa: E402

import gemsim  # noqa: E402
from gemsim.app import build_problem, trace_scenario  # noqa: E402
from gemsim.cli import app  # noqa: E402
from gemsim.config import expand  # noqa: E402
from gemsim.results import read_run  # noqa: E402

LR = 0.05
RUNNER = CliRunner()


def _scenario(module: str, **problem) -> dict:
    return {
        "name": "byo",
        "seed": 4,
        "workers": {"count": 3, "compute": {"dist": "exponential", "mean": 0.1}},
        "budget": {"commits": 96},
        "problem": {
            "model": {"import": f"{module}:make", "kwargs": {"dim": 3}},
            "dataset": {"name": "arrays", "path": "data.npz"},
            "batch_size": 8,
            **problem,
        },
        "optimizer": {"rule": "downpour", "lr": LR},
        "eval": {"every": 48, "subset": 40},
        "engine": {"chunk": 64},
    }


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A scenario folder outside the repository: module, data and scenario file."""
    folder = tmp_path_factory.mktemp("study")
    module = write_module(folder)
    np.savez(folder / "data.npz", **regression_arrays())
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario(module)))
    return folder, module, path


@pytest.fixture(scope="module")
def first_run(study, tmp_path_factory):
    _, _, path = study
    out = tmp_path_factory.mktemp("out")
    result = RUNNER.invoke(app, ["run", str(path), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return out, folder


def _numpy_async_sgd(problem, trace) -> dict[str, np.ndarray]:
    """Asynchronous SGD on the trace, gradients by hand: commit k applies the gradient of
    worker w's next batch at the central variable of version pulled_version[k]."""
    theta = [np.asarray(problem.init_params["w"], np.float64)]
    bias = [float(problem.init_params["b"])]
    steps = np.zeros(trace.n_workers, int)
    for w, version in zip(trace.worker, trace.pulled_version, strict=True):
        batch = problem.batch(int(w), int(steps[w]))
        steps[w] += 1
        x, y = np.asarray(batch.x, np.float64), np.asarray(batch.y, np.float64)
        r = x @ theta[version] + bias[version] - y
        theta.append(theta[-1] - LR * x.T @ r / len(y))
        bias.append(bias[-1] - LR * np.mean(r))
    return {"['w']": theta[-1], "['b']": np.asarray(bias[-1])}


def test_run_matches_an_independent_computation(study, first_run):
    _, _, path = study
    _, folder = first_run
    run = read_run(folder)
    assert run.manifest["status"] == "ok"
    scenario = gemsim.load_scenario(path)
    expected = _numpy_async_sgd(build_problem(scenario), run.trace)
    params = dict(np.load(folder / "params.npz"))
    for key, value in expected.items():
        np.testing.assert_allclose(params[key], value, rtol=2e-5, atol=1e-6)
    model = run.manifest["config"]["problem"]["model"]
    assert model["import"].endswith(":make") and len(model["sha256"]) == 64
    assert Path(model["path"]).is_absolute()
    assert len(run.manifest["config"]["problem"]["dataset"]["sha256"]) == 64


def test_replay_of_the_run_is_bit_identical(study, first_run, tmp_path):
    _, _, path = study
    _, folder = first_run
    result = RUNNER.invoke(app, ["replay", str(folder), str(path), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (replayed,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    a, b = np.load(folder / "params.npz"), np.load(replayed / "params.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_resume_follows_the_code(study, first_run):
    folder, module, path = study
    out, run_folder = first_run
    again = RUNNER.invoke(app, ["run", str(path), "--out", str(out), "--resume", "--json"])
    assert again.exit_code == 0 and '"skipped": true' in again.output
    source = folder / f"{module}.py"
    source.write_text(source.read_text() + "\n# a changed comment is changed code\n")
    changed = RUNNER.invoke(app, ["run", str(path), "--out", str(out), "--resume", "--json"])
    assert changed.exit_code == 0 and '"skipped": false' in changed.output
    assert len([p for p in out.iterdir() if p.is_dir()]) == 2  # a new identity, a new folder
    a = np.load(run_folder / "params.npz")
    (new,) = [p for p in out.iterdir() if p.is_dir() and p != run_folder]
    b = np.load(new / "params.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)  # same math, new identity


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"model": {"import": "absent_module_q:make"}},
            "problem.model.import: .*'absent_module_q' not found",
        ),
        ({"model": {"import": "{mod}:absent"}}, "problem.model: .*no attribute 'absent'"),
        ({"model": {"import": "{mod}:make", "kwargs": {"depth": 2}}}, r"kwargs \{'depth': 2\}"),
        ({"dataset": {"name": "arrays", "path": "short.npz"}}, "problem.dataset: .*lengths"),
        ({"dataset": {"name": "arrays", "path": "nan.npz"}}, "problem.dataset: .*NaN"),
        ({"dataset": {"name": "arrays", "path": "absent.npz"}}, "problem.dataset.*absent.npz"),
        (
            {"model": "logistic", "dataset": {"name": "arrays", "path": "labels.npz"}},
            r"label 7 is out of range.*\[0, 5\)",
        ),
    ],
)
def test_bad_models_and_data_exit_2_before_any_run(study, tmp_path, change, message):
    folder, module, _ = study
    arrays = regression_arrays()
    np.savez(folder / "short.npz", **{**arrays, "y_train": arrays["y_train"][:-1]})
    np.savez(folder / "nan.npz", **{**arrays, "x_test": np.full_like(arrays["x_test"], np.nan)})
    labels = {
        **arrays,
        "y_train": np.arange(80) % 8,
        "y_test": np.zeros(20, int),
        "n_classes": np.int64(5),
    }
    np.savez(folder / "labels.npz", **labels)
    doc = _scenario(module)
    for key, value in change.items():
        if isinstance(value, dict) and "import" in value:
            value = {**value, "import": value["import"].format(mod=module)}
        doc["problem"][key] = value
    path = folder / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = RUNNER.invoke(app, ["run", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert re.search(message, result.output), result.output
    assert not out.exists()  # nothing ran


def test_runs_of_a_sweep_share_one_copy_of_the_data(study):
    _, _, path = study
    scenario = gemsim.load_scenario(path, overrides={"repeats": 3})
    problems = [build_problem(run.scenario) for run in expand(scenario, base_dir=path.parent)]
    first = problems[0].data
    for p in problems[1:]:
        for name in ("x_train", "y_train", "x_test", "y_test"):
            assert p.data[name] is first[name]
        assert p.model is problems[0].model  # one imported model: shared compiled code
    subset = lambda p: p.data["eval"]["full"]  # per seed: only indices
    assert not np.array_equal(subset(problems[0]), subset(problems[1]))
    pointer = lambda p: p.data["x_train"].unsafe_buffer_pointer()
    assert len({pointer(p) for p in problems}) == 1
    live = [a for a in jax.live_arrays() if a.shape == first["x_train"].shape]
    assert len({a.unsafe_buffer_pointer() for a in live}) == 1


def test_trace_imports_no_model_and_reads_only_headers(tmp_path):
    module = write_module(tmp_path)
    np.savez(tmp_path / "data.npz", **regression_arrays())
    doc = _scenario(module)
    doc["budget"] = {"epochs_per_worker": 2}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    (report,) = trace_scenario(path)
    assert report["commits"] == 3 * 2 * (80 // 8)
    assert module not in sys.modules
