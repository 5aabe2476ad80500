"""`plot_client_timeline`: a Gantt chart of a population run's tasks, checked from its
artists on a tiny simulated run (a bar per task in the window, lost ones hatched and
crossed, rows in order)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gemsim import timing
from gemsim.app.record._tables import tasks_frame
from gemsim.results import CLIENT_TASKS_FILE, load_tasks, plot_client_timeline

K = 3


@pytest.fixture(scope="module")
def tasks() -> pd.DataFrame:
    """Three slots serving 12 churning clients for 60 virtual seconds."""
    population = timing.Population(
        12,
        speed=timing.LogNormal(1.0, 0.5),
        churn=timing.Churn(timing.Exponential(8.0), timing.Exponential(4.0)),
    )
    spec = timing.ClusterSpec(
        workers=(timing.WorkerSpec(timing.Exponential(1.0)),) * K,
        budget=timing.SecondsBudget(60.0),
        population=population,
    )
    run = timing.simulate_run(spec, seed=2)
    frame = tasks_frame(run.clients.tasks, run.trace)
    assert set(frame.outcome) == {"committed", "lost", "in_flight"}
    return frame


def _bars(ax):
    """The bars by outcome (their gid), in drawing order."""
    found: dict[str, list] = {}
    for bar in ax.patches:
        found.setdefault(bar.get_gid(), []).append(bar)
    return found


def test_a_bar_per_task_in_the_window_lost_ones_hatched_and_crossed(tasks):
    ax = plot_client_timeline(tasks, start=10.0, end=40.0)
    end = tasks.end.fillna(np.inf)
    window = tasks[(tasks.start <= 40.0) & (end >= 10.0)]
    assert len(ax.patches) == len(window)
    bars = _bars(ax)
    for name in ("committed", "lost", "in_flight"):
        assert len(bars.get(name, [])) == (window.outcome == name).sum(), name
    assert all(bar.get_hatch() == "///" for bar in bars["lost"])
    assert not any(bar.get_hatch() for bar in bars["committed"])
    (crosses,) = [line for line in ax.lines if line.get_marker() == "x"]
    lost = window[window.outcome == "lost"].sort_values("task")
    np.testing.assert_array_equal(crosses.get_xdata(), lost.end)
    # Each committed bar spans its task, on its client's row (rows in client order).
    rows = sorted(window.client.unique())
    committed = window[window.outcome == "committed"]
    for bar, (_, task) in zip(bars["committed"], committed.iterrows(), strict=True):
        assert bar.get_x() == task.start
        assert bar.get_width() == pytest.approx(task.end - task.start, abs=1e-12)
        assert bar.get_y() + bar.get_height() / 2 == rows.index(task.client)
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(c) for c in rows]
    assert ax.get_xlim() == (10.0, 40.0)


def test_tasks_in_flight_at_the_end_reach_the_windows_end(tasks):
    ax = plot_client_timeline(tasks)
    last = float(np.nanmax(tasks.end.to_numpy()))
    flying = _bars(ax)["in_flight"]
    assert len(flying) == (tasks.outcome == "in_flight").sum() <= K
    assert all(bar.get_x() + bar.get_width() == pytest.approx(last) for bar in flying)


def test_rows_per_slot_and_chosen_clients(tasks):
    ax = plot_client_timeline(tasks, by="slot")
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(w) for w in range(K)]
    assert len(ax.patches) == len(tasks)
    ax = plot_client_timeline(tasks, clients=3)
    lowest = sorted(tasks.client.unique())[:3]
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(c) for c in lowest]
    assert len(ax.patches) == tasks.client.isin(lowest).sum()
    ax = plot_client_timeline(tasks, clients=[7, 2])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["7", "2"]


def test_a_run_folder_is_read_and_a_frame_of_two_runs_refused(tasks, tmp_path, make_run):
    for run_id in ("a", "b"):
        folder = make_run(tmp_path / "out", run_id)
        tasks.to_parquet(folder / CLIENT_TASKS_FILE, index=False)
    ax = plot_client_timeline(tmp_path / "out" / "a", end=30.0)
    assert len(ax.patches) == (tasks.start <= 30.0).sum()
    both = load_tasks(tmp_path / "out")
    assert len(both) == 2 * len(tasks)
    with pytest.raises(ValueError, match="draws one run; this frame holds 2"):
        plot_client_timeline(both)
    with pytest.raises(ValueError, match="by must be 'client' or 'slot'"):
        plot_client_timeline(tasks, by="worker")
    with pytest.raises(ValueError, match="must be after start"):
        plot_client_timeline(tasks, start=5.0, end=5.0)
