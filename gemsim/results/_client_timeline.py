"""A Gantt chart of a population's tasks over a window of time (``clients_tasks.parquet``,
:func:`gemsim.results.load_tasks`).

A population run's K slots serve N clients one task at a time; the trace holds the committed
tasks only. ``plot_client_timeline`` draws a window of every task, one row per client (or per slot),
a bar per task from its start to its commit, to its client's going down (lost: hatched, with a
cross where it ended) or to the window's end (in flight at the end). It follows the other
plots' form, ``plot_x(..., ax=None, **kw) -> Axes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from gemsim.results._plot_common import ensure_axes, require_columns
from gemsim.results._tasks import load_tasks
from gemsim.types import Status

OUTCOME_LOOKS = {
    "committed": {"color": "tab:blue", "edgecolor": "white", "linewidth": 0.3},
    "lost": {"color": "tab:red", "edgecolor": "darkred", "hatch": "///", "linewidth": 0.5},
    "in_flight": {"color": "0.8", "edgecolor": "0.4", "linestyle": "--", "linewidth": 0.5},
}
"""How each outcome's bars look (a lost task also gets a cross where it ended)."""
OUTCOME_LABELS = {
    "committed": "committed",
    "lost": "lost (its client went down)",
    "in_flight": "in flight at the end",
}
MAX_TICKS = 40
"""Rows above which only some rows' ids are written on the axis."""


def _tasks_of(run: Any) -> pd.DataFrame:
    """One run's tasks from a `RunResult`, a run folder or a tasks frame."""
    if isinstance(run, pd.DataFrame):
        frame = run
    elif hasattr(run, "manifest") and hasattr(run, "tasks"):  # a RunResult
        frame = run.tasks
        if frame is None:
            raise ValueError(
                f"plot_client_timeline: run {run.manifest.run_id} has no tasks (not a "
                "population's run, or a replay)"
            )
    else:
        frame = load_tasks(Path(run), statuses=list(Status))
    if "run_id" in frame.columns and frame["run_id"].nunique() > 1:
        runs = sorted(frame["run_id"].unique())
        raise ValueError(
            f"plot_client_timeline draws one run; this frame holds {len(runs)} ({runs[:4]}"
            f"{' ...' if len(runs) > 4 else ''}): select one, e.g. "
            "frame[frame.run_id == ...], or give its run folder"
        )
    require_columns(frame, ["client", "slot", "start", "end", "outcome"], "plot_client_timeline")
    if frame.empty:
        raise ValueError(f"plot_client_timeline: no tasks in {run!r}")
    return frame


def _row_ids(shown: pd.DataFrame, by: str, clients: int | Sequence[int] | None) -> list[int]:
    """The rows' ids (clients or slots), top to bottom."""
    if by == "client" and clients is not None and not isinstance(clients, int):
        return [int(c) for c in clients]  # in the order given
    return sorted(int(i) for i in shown[by].unique())


def _selected(window: pd.DataFrame, clients: int | Sequence[int] | None) -> pd.DataFrame:
    """The window's tasks of the chosen clients: all (None), the first ``clients`` ids of
    those with a task there (an int), or those named (a sequence)."""
    if clients is None:
        return window
    if isinstance(clients, bool) or (isinstance(clients, int) and clients < 1):
        raise ValueError(
            f"plot_client_timeline: clients must be a number >= 1 or a list of client ids, "
            f"got {clients!r}"
        )
    if isinstance(clients, int):
        chosen = np.sort(window["client"].unique())[:clients]
    else:
        chosen = np.asarray(list(clients), dtype=np.int64)
    return window[window["client"].isin(chosen)]


def plot_client_timeline(
    run: Any,
    *,
    start: float | None = None,
    end: float | None = None,
    clients: int | Sequence[int] | None = None,
    by: str = "client",
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """A Gantt chart of a population run's tasks between ``start`` and ``end``: one row per
    client (or slot), a bar per task from its start to its end, coloured by outcome:
    committed (solid), lost when its client went down (hatched, a cross at the loss) and in
    flight at the run's end (grey, drawn to the window's end). The legend counts each; each
    bar's gid is its task's outcome (``committed``, ``lost``, ``in_flight``).

    Args:
        run: a `RunResult`, a run folder, or one run's :func:`load_tasks` frame.
        start, end: the window, in seconds since the run's start (virtual time for a
            simulated run); default: from the first task's start to the last end or start.
            A task drawn is one that overlaps the window.
        clients: the clients drawn: None (all with a task in the window), a number n (the
            n lowest ids among them) or a list of ids (rows in that order).
        by: ``"client"`` (a row per client) or ``"slot"`` (a row per slot: what each of the
            K slots did; the bars of the chosen clients only).
        **kw: passed to matplotlib's ``barh`` (``height=``, ``alpha=``).
    """
    if by not in ("client", "slot"):
        raise ValueError(f"plot_client_timeline: by must be 'client' or 'slot', got {by!r}")
    frame = _tasks_of(run)
    known = np.concatenate([frame["start"].to_numpy(float), frame["end"].dropna().to_numpy()])
    lo = float(known.min()) if start is None else float(start)
    hi = float(known.max()) if end is None else float(end)
    if not hi > lo:
        raise ValueError(f"plot_client_timeline: end ({hi:g}) must be after start ({lo:g})")
    ends = frame["end"].fillna(np.inf)
    window = frame[(frame["start"] <= hi) & (ends >= lo)]
    shown = _selected(window, clients)
    ids = _row_ids(shown, by, clients)
    row = {i: r for r, i in enumerate(ids)}
    ax = ensure_axes(ax)
    outcome = shown["outcome"].astype(str)
    for name, look in OUTCOME_LOOKS.items():
        part = shown[outcome == name]
        if part.empty:
            continue
        left = part["start"].to_numpy(float)
        right = part["end"].fillna(hi).to_numpy(float)
        y = part[by].map(row).to_numpy(float)
        label = f"{OUTCOME_LABELS[name]} ({len(part):,})"
        look = {**look, "gid": name}  # each bar names its outcome
        ax.barh(y, right - left, left=left, height=0.8, label=label, **{**look, **kw})
        if name == "lost":
            ax.plot(right, y, linestyle="none", marker="x", color="black", markersize=5)
    _row_axis(ax, ids, by)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("time since the run's start (s; virtual for a simulated run)")
    ax.set_title(f"{len(shown):,} tasks of {len(ids):,} {by}s, {lo:.4g} s to {hi:.4g} s")
    # Beside the axes: inside, it would hide bars.
    ax.legend(title="tasks", fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return ax


def _row_axis(ax: Axes, ids: list[int], by: str) -> None:
    """Rows top to bottom in order, labelled by id (every k-th beyond `MAX_TICKS` rows)."""
    step = max(1, -(-len(ids) // MAX_TICKS))
    ticks = list(range(0, len(ids), step))
    ax.set_yticks(ticks, [str(ids[t]) for t in ticks])
    ax.set_ylim(len(ids) - 0.5, -0.5)
    ax.set_ylabel(by)
