"""A model and a data set written outside the repository, named in a scenario by import path
and npz file: `gemsim run` against an independent numpy computation, `gemsim replay`,
`--resume` that follows the code, failures that exit 2 before any run, and one copy of the
data set for all the runs of a sweep."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "problems"))
from user_modules import LINEAR, regression_arrays, write_module  # noqa: E402

import gemsim  # noqa: E402
from gemsim.app import build_problem, trace_scenario  # noqa: E402
from gemsim.cli import app  # noqa: E402
from gemsim.config import (  # noqa: E402
    ScenarioError,
    apply_overrides,  # noqa: E402
    expand,
    parse_scenario,
    resolved_config,
)
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
    (folder,) = _run_folders(out)
    return out, folder


def _run_folders(out):
    """The run folders of a results folder (not its hidden trace store)."""
    return [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]


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
    assert model["path"] == str(study[0].resolve())  # the folder searched first
    assert model["file"] == str((study[0] / f"{study[1]}.py").resolve())  # where it was found
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
    assert len(_run_folders(out)) == 2  # a new identity, a new folder
    a = np.load(run_folder / "params.npz")
    (new,) = [p for p in _run_folders(out) if p != run_folder]
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


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recorded(out: Path) -> dict[str, tuple[str, str, str, str]]:
    """Per run folder: (module file, its recorded sha256, npz file, its recorded sha256)."""
    found = {}
    for manifest in out.glob("*/manifest.json"):
        problem = json.loads(manifest.read_text())["config"]["problem"]
        model, data = problem["model"], problem["dataset"]
        found[manifest.parent.name] = (model["file"], model["sha256"], data["path"], data["sha256"])
    return found


@pytest.mark.parametrize("field", ["problem.model.import", "problem.dataset.path"])
def test_a_sweep_over_files_records_each_file_and_resumes_the_edited_one(tmp_path, field):
    """Sweeping the one field that names a file: every point is validated against its own
    file (not the base configuration's digest), and its manifest records that file."""
    modules = [write_module(tmp_path), write_module(tmp_path, LINEAR + "\n# another file\n")]
    for seed, name in enumerate(["d0.npz", "d1.npz"]):
        np.savez(tmp_path / name, **regression_arrays(seed=seed))
    doc = _scenario(modules[0])
    doc["problem"]["dataset"]["path"] = "d0.npz"
    doc.update(budget={"commits": 24}, eval={"every": 24, "subset": 40})
    if field == "problem.model.import":
        files = [tmp_path / f"{m}.py" for m in modules]
        doc["sweep"] = {field: [f"{m}:make" for m in modules]}
    else:
        files = [tmp_path / "d0.npz", tmp_path / "d1.npz"]
        doc["sweep"] = {field: ["d0.npz", "d1.npz"]}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    result = RUNNER.invoke(app, ["run", str(path), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    runs = _recorded(out)
    assert len(runs) == 2
    for module, module_sha, data, data_sha in runs.values():
        assert module_sha == _sha256(Path(module)) and data_sha == _sha256(Path(data))
    swept = 0 if field == "problem.model.import" else 2
    assert sorted(run[swept] for run in runs.values()) == sorted(str(f) for f in files)

    edited = files[1]
    if edited.suffix == ".py":
        edited.write_text(edited.read_text() + "\n# edited\n")
    else:
        np.savez(edited, **regression_arrays(seed=7))
    again = RUNNER.invoke(app, ["run", str(path), "--out", str(out), "--resume", "--json"])
    assert again.exit_code == 0, again.output
    rows = [json.loads(line) for line in again.output.splitlines() if line.startswith("{")]
    value = lambda f: f"{f.stem}:make" if f.suffix == ".py" else f.name
    assert {row["sweep"][field]: row["skipped"] for row in rows} == {
        value(files[0]): True,
        value(edited): False,
    }
    new = {k: v for k, v in _recorded(out).items() if k not in runs}
    assert [run[swept + 1] for run in new.values()] == [_sha256(edited)]


def test_a_set_that_names_another_file_records_that_file(study, tmp_path):
    """A `--set` on a resolved configuration (which holds its files' digests) that changes
    `import` or `path` records the new file's digest; an edited file is still refused."""
    folder, module, path = study
    other = write_module(folder, LINEAR + "\n# a second module\n")
    np.savez(tmp_path / "other.npz", **regression_arrays(seed=3))
    resolved = resolved_config(gemsim.load_scenario(path))
    changed = apply_overrides(
        resolved,
        {
            "problem.model.import": f"{other}:make",
            "problem.dataset.path": str(tmp_path / "other.npz"),
        },
    )
    problem = parse_scenario(changed, "resolved").problem
    assert problem.model.sha256 == _sha256(folder / f"{other}.py")
    assert problem.model.file == str((folder / f"{other}.py").resolve())
    assert problem.dataset.sha256 == _sha256(tmp_path / "other.npz")
    source = folder / f"{other}.py"
    resolved = resolved_config(parse_scenario(changed, "resolved"))
    source.write_text(source.read_text() + "\n# edited\n")
    with pytest.raises(ScenarioError, match="changed since this configuration was resolved"):
        parse_scenario(resolved, "resolved")


def test_a_module_found_on_the_python_path_is_recorded_where_it_is(tmp_path, monkeypatch):
    elsewhere, study_dir = tmp_path / "lib", tmp_path / "study"
    module = write_module(elsewhere)
    study_dir.mkdir()
    np.savez(study_dir / "data.npz", **regression_arrays())
    (study_dir / "s.yaml").write_text(yaml.safe_dump(_scenario(module)))
    monkeypatch.syspath_prepend(str(elsewhere))
    model = resolved_config(gemsim.load_scenario(study_dir / "s.yaml"))["problem"]["model"]
    assert model["path"] == str(study_dir.resolve())  # searched first, not holding it
    assert model["file"] == str((elsewhere / f"{module}.py").resolve())
    assert model["sha256"] == _sha256(elsewhere / f"{module}.py")


def test_runs_of_a_sweep_share_one_copy_of_the_data(study):
    folder, _, path = study
    arrays = regression_arrays()
    n_train = 72  # a training-set shape no other test's data has: its buffers are countable
    x_train = arrays["x_train"][:n_train]
    np.savez(
        folder / "share.npz",
        **{**arrays, "x_train": x_train, "y_train": arrays["y_train"][:n_train]},
    )
    scenario = gemsim.load_scenario(
        path, overrides={"repeats": 3, "problem.dataset.path": "share.npz"}
    )
    runs = expand(scenario, base_dir=path.parent)
    problems = [build_problem(run.scenario) for run in runs]
    first = problems[0].data
    for p in problems[1:]:
        for name in ("x_train", "y_train", "x_test", "y_test"):
            assert p.data[name] is first[name]
        assert p.model is problems[0].model  # one imported model: shared compiled code
    subset = lambda p: p.data["eval"]["full"]  # per seed: only indices
    assert not np.array_equal(subset(problems[0]), subset(problems[1]))
    pointer = lambda p: p.data["x_train"].unsafe_buffer_pointer()
    assert len({pointer(p) for p in problems}) == 1
    # Executing runs (every worker gathers its batches from the data) makes no copy either.
    done = [gemsim.app.run(run) for run in runs[:2]]
    assert [r.status.value for r in done] == ["ok", "ok"]
    assert not np.array_equal(done[0].tree()["w"], done[1].tree()["w"])  # two seeds, two runs
    live = [a for a in jax.live_arrays() if a.shape == x_train.shape and a.dtype == x_train.dtype]
    assert len({a.unsafe_buffer_pointer() for a in live}) == 1
    np.testing.assert_array_equal(np.asarray(live[0]), x_train)


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
