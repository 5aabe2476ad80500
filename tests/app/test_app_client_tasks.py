"""A population run's tasks (`clients_tasks.parquet`): written in its folder from the timing
model's one run, row for row with its trace, summed into its per-client counts; kept in the
trace store beside the trace, so that a trace read from the store still yields them; counted
in what `gemsim trace` prints."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scenario_docs import write_doc
from typer.testing import CliRunner

import gemsim
from gemsim import config, results, timing
from gemsim.app import trace_scenario
from gemsim.app.sweep._stored_clients import read_client_report, write_client_report
from gemsim.app.sweep._trace_store import READ, SIMULATED, STORE_FOLDER, TimingInputs, TraceStore
from gemsim.cli import app

K, N = 4, 30


def population_doc(**top) -> dict:
    """GEM on the heterogeneous quadratic, 4 slots serving 30 churning clients."""
    return {
        "name": "tasks",
        "seed": 5,
        "workers": {"compute": {"dist": "exponential", "mean": 1.0}},
        "clients": {
            "population": N,
            "concurrency": K,
            "speed": {"dist": "lognormal", "median": 1.0, "sigma": 0.5},
            "churn": {
                "uptime": {"dist": "exponential", "mean": 10.0},
                "downtime": {"dist": "exponential", "mean": 5.0},
            },
        },
        "budget": {"commits": 120},
        "problem": {"model": {"name": "quadratic", "dim": 4, "heterogeneity": 1.0}},
        "optimizer": {"rule": "gem", "lr": 0.05},
        "eval": {"every": 120, "clients": 5},
        **top,
    }


def check_tasks(tasks: pd.DataFrame, trace: timing.CommitTrace, summary: pd.DataFrame) -> None:
    """The tasks against the run's trace and per-client counts."""
    assert list(tasks.columns[-8:]) == list(results.TASK_COLUMNS)
    committed = tasks[tasks.outcome == "committed"].sort_values("commit")
    np.testing.assert_array_equal(committed.commit, np.arange(len(trace)))
    np.testing.assert_array_equal(committed.client, trace.client)
    np.testing.assert_array_equal(committed.slot, trace.worker)
    np.testing.assert_array_equal(committed.end, trace.time)
    np.testing.assert_array_equal(committed.staleness, trace.staleness)
    others = tasks[tasks.outcome != "committed"]
    assert (others.commit == -1).all() and (others.staleness == -1).all()
    in_flight = tasks.outcome == "in_flight"
    assert in_flight.sum() <= K and tasks.end[in_flight].isna().all()
    assert (tasks.end[~in_flight] >= tasks.start[~in_flight]).all()

    def per_client(outcome=None):
        chosen = tasks if outcome is None else tasks[tasks.outcome == outcome]
        return np.bincount(chosen.client, minlength=N)

    np.testing.assert_array_equal(summary.started, per_client())
    np.testing.assert_array_equal(summary.commits, per_client("committed"))
    np.testing.assert_array_equal(summary.lost, per_client("lost"))
    assert summary.lost.sum() > 0


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two learning rates (one timing) run into one folder."""
    root = tmp_path_factory.mktemp("tasks")
    doc = population_doc(sweep={"optimizer.lr": [0.02, 0.05]}, engine={"many_runs": "off"})
    path = write_doc(root, doc)
    gemsim.run_file(path, out=root / "out", quiet=True)
    return root


def _folders(out):
    return sorted(p for p in out.iterdir() if (p / "manifest.json").is_file())


def test_a_population_runs_folder_holds_its_tasks_row_for_row_with_its_trace(sweep):
    folders = _folders(sweep / "out")
    assert len(folders) == 2
    for folder in folders:
        run = results.read_run(folder)
        check_tasks(results.load_tasks(folder), run.trace, run.worker_summary)
        pd.testing.assert_frame_equal(run.tasks, pd.read_parquet(folder / "clients_tasks.parquet"))
    # One trace for both runs: the same tasks, and load_tasks gives a row per (run, task).
    a, b = (f / results.CLIENT_TASKS_FILE for f in folders)
    assert a.read_bytes() == b.read_bytes()
    frame = results.load_tasks(sweep / "out")
    assert len(frame) == 2 * len(pd.read_parquet(a)) and frame.run_id.nunique() == 2


def test_the_store_keeps_the_tasks_so_that_a_stored_trace_still_yields_them(sweep, tmp_path):
    store = sweep / "out" / STORE_FOLDER
    assert len(list(store.glob("*.clients.npz"))) == 1
    first = {f.name: (f / results.CLIENT_TASKS_FILE).read_bytes() for f in _folders(sweep / "out")}
    # The same runs again into the same folder: the trace and its tasks read from the store.
    doc = population_doc(sweep={"optimizer.lr": [0.02, 0.05]}, engine={"many_runs": "off"})
    path = write_doc(tmp_path, doc)
    gemsim.run_file(path, out=sweep / "out", quiet=True)
    for folder in _folders(sweep / "out"):
        note = json.loads((folder / "manifest.json").read_text())["provenance"]["trace_store"]
        assert note["trace"] == "reused from the store"
        assert (folder / results.CLIENT_TASKS_FILE).read_bytes() == first[folder.name]


def _inputs(**top) -> TimingInputs:
    return TimingInputs.of(config.parse_scenario(population_doc(**top), "t"))


def test_stored_client_reports_are_checked_and_simulated_again_when_missing_or_bad(tmp_path):
    inputs = _inputs()
    store = TraceStore(tmp_path / STORE_FOLDER)
    made, note = store.timed_of(inputs)
    assert note["trace"] == SIMULATED and made.tasks is not None
    (tasks_file,) = store.client_files(inputs.key)

    def same(a, b):
        assert a.trace.sha256() == b.trace.sha256()
        for x, y in zip(a.tasks, b.tasks, strict=True):
            np.testing.assert_array_equal(x, y)
        for name in ("speed", "started", "completed", "lost", "up_seconds"):
            np.testing.assert_array_equal(getattr(a.clients, name), getattr(b.clients, name))

    read, note = store.timed_of(inputs)
    assert note["trace"] == READ
    same(read, made)
    # Missing (a store written before tasks were kept): simulated again, and stored.
    tasks_file.unlink()
    again, note = store.timed_of(inputs)
    assert note["trace"] == SIMULATED and "corrupt_copy" not in note
    same(again, made)
    assert store.client_files(inputs.key) == [tasks_file]
    # A flipped byte: deleted, simulated again.
    data = bytearray(tasks_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tasks_file.write_bytes(bytes(data))
    again, note = store.timed_of(inputs)
    assert note["trace"] == SIMULATED and "sha256" in note["corrupt_copy"]
    same(again, made)
    # A timing process ahead stores both; a store that has both is left alone.
    assert store.ensure(inputs) == READ
    tasks_file.unlink()
    assert store.ensure(inputs) == SIMULATED and store.client_files(inputs.key) == [tasks_file]


def test_tasks_of_another_trace_are_refused(tmp_path):
    ours = _inputs().simulate_timed()
    other = _inputs(seed=6).simulate_timed()
    path = tmp_path / "clients.npz"
    write_client_report(ours.clients, path)
    read = read_client_report(path.read_bytes(), ours.trace)
    assert read.tasks.commit.tolist() == ours.tasks.commit.tolist()
    for name in ("speed", "started", "completed", "lost", "up_seconds"):
        np.testing.assert_array_equal(getattr(read, name), getattr(ours.clients, name))
    with pytest.raises(ValueError, match="not those of the trace"):
        read_client_report(path.read_bytes(), other.trace)


def test_a_persistent_workers_trace_is_stored_alone(tmp_path):
    doc = population_doc()
    del doc["clients"]
    doc["workers"]["count"] = 3
    inputs = TimingInputs.of(config.parse_scenario(doc, "p"))
    store = TraceStore(tmp_path / STORE_FOLDER)
    timed, _ = store.timed_of(inputs)
    assert timed.clients is None and store.client_files(inputs.key) == []
    assert store.timed_of(inputs)[1]["trace"] == READ


def test_gemsim_trace_counts_the_lost_tasks_and_writes_them_beside_the_clients(tmp_path):
    path = write_doc(tmp_path, population_doc())
    (report,) = trace_scenario(path, out=tmp_path / "t")
    population = report["population"]
    part = population["participation"]
    deciles = population["staleness_by_speed_decile"]
    assert sum(d["lost"] for d in deciles) == part["tasks_lost"] > 0
    assert sum(d["started"] for d in deciles) == part["tasks_started"]
    clients = pd.read_parquet(report["clients_path"])
    tasks = pd.read_parquet(tmp_path / "t" / results.CLIENT_TASKS_FILE)
    np.testing.assert_array_equal(
        clients.lost, np.bincount(tasks.client[tasks.outcome == "lost"], minlength=N)
    )
    np.testing.assert_array_equal(clients.started, np.bincount(tasks.client, minlength=N))
    shown = CliRunner().invoke(app, ["trace", str(path)])
    assert shown.exit_code == 0, shown.output
    share = f"{part['tasks_lost']} lost ({100 * part['loss_rate']:.3g} %)"
    assert share in shown.output
    assert "mean staleness  started     lost" in shown.output


def test_a_replay_has_no_tasks(sweep):
    folder = _folders(sweep / "out")[0]
    trace = results.read_run(folder).trace
    doc = population_doc(engine={"many_runs": "off"})
    replay = gemsim.run(config.parse_scenario(doc, "r"), trace=trace)
    assert replay.tasks is None and "started" not in replay.worker_summary.columns


def test_a_population_runs_per_client_report_comes_from_its_one_timing_run(tmp_path, monkeypatch):
    """The worker summary's per-client columns (speed, started, lost, time up) and `gemsim
    trace`'s report are the timing model's one run's: nothing after it draws the speeds or
    the churn again, and a trace read from the store brings them with it."""
    from gemsim.timing import _population_run

    calls = {"simulate_run": 0, "client_up_seconds": 0, "client_speeds": 0}

    def counted(owner, name):
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)

    counted(timing, "simulate_run")
    for name in ("client_up_seconds", "client_speeds"):
        counted(timing, name)
        counted(_population_run, name)
    doc = population_doc(engine={"many_runs": "off"})
    path = write_doc(tmp_path, doc)
    gemsim.run_file(path, out=tmp_path / "out", quiet=True)
    assert calls == {"simulate_run": 1, "client_up_seconds": 1, "client_speeds": 1}
    (folder,) = _folders(tmp_path / "out")
    run = results.read_run(folder)
    # The reference: each client's time up recomputed from the scenario's population alone.
    scenario = config.parse_scenario(doc, "t")
    population = config.build_cluster(scenario).population
    monkeypatch.undo()
    up = timing.client_up_seconds(population, scenario.seed, run.trace.duration)
    np.testing.assert_array_equal(run.worker_summary.up_seconds, up)
    assert (up < run.trace.duration).any()  # churn: some clients were down a while
    np.testing.assert_array_equal(
        run.worker_summary.speed, timing.client_speeds(population, scenario.seed)
    )
    # Again into the same folder with another learning rate: the trace and its per-client
    # report come from the store, and nothing of the timing model runs.
    counted(timing, "simulate_run")
    for name in ("client_up_seconds", "client_speeds"):
        counted(timing, name)
        counted(_population_run, name)
    calls.update(dict.fromkeys(calls, 0))
    again = write_doc(tmp_path, population_doc(engine={"many_runs": "off"}, name="again"))
    gemsim.run_file(again, out=tmp_path / "out", quiet=True, overrides=["optimizer.lr=0.02"])
    assert calls == {"simulate_run": 0, "client_up_seconds": 0, "client_speeds": 0}
    other = next(f for f in _folders(tmp_path / "out") if f != folder)
    np.testing.assert_array_equal(results.read_run(other).worker_summary.up_seconds, up)
