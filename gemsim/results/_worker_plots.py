"""Figures of workers with data of their own: what the bias of an asynchronous rule looks like.

``plot_class_accuracy`` draws each class's test accuracy against virtual time, from a
:func:`gemsim.results.load_results` frame: a class that only slow workers hold lags behind
under a rule that follows the fast workers. ``plot_worker_accuracy`` draws each worker's
accuracy on its own data at the last evaluation against its mean compute time, from a
:func:`gemsim.results.load_worker_evals` frame (the speed-data picture).
``plot_participation`` draws a population's tasks per client against the client's speed, from
a :func:`gemsim.results.load_worker_summary` frame. All follow the other plots' form,
``plot_x(frame, ..., ax=None, **kw) -> Axes``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.axes import Axes

from gemsim.results._frames import class_accuracy_columns
from gemsim.results._plot_common import (
    X_LABELS,
    add_legend,
    draw_curves,
    ensure_axes,
    mean_curves,
    require_columns,
    series_style,
    with_group,
)

WORKER_X_LABELS = {
    "mean_step_time": "worker's mean compute time per local step (s)",
    "mean_compute_time": "worker's mean compute time per commit (s, all its local steps)",
    "commit_share": "worker's share of the commits",
    "accepted_share": "worker's share of the accepted commits",
    "shard_size": "training examples the worker holds",
}


def plot_class_accuracy(
    results: pd.DataFrame,
    x: str = "time",
    *,
    classes: list[int] | None = None,
    band: bool = True,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Test accuracy of each class against virtual time (or ``x``), one line per class.

    Each line is the mean over the frame's runs, matched by evaluation index (filter the
    frame to one configuration first: its repeats give the band, one standard deviation).

    Args:
        results: frame from ``load_results`` with ``test_accuracy_class_<k>`` columns (runs
            of a classifier).
        x: ``"time"`` (virtual seconds), ``"commit"``, ``"mean_worker_step"`` or any numeric
            column.
        classes: the classes to draw (default all).
        band: shade one standard deviation across runs.
    """
    columns = class_accuracy_columns(results.columns)
    if classes is not None:
        columns = [c for c in columns if int(c.rsplit("_", 1)[1]) in set(classes)]
    if not columns:
        raise ValueError(
            "plot_class_accuracy needs test_accuracy_class_<k> columns (runs of a classifier); "
            f"this frame has {list(results.columns)}"
        )
    require_columns(results, [x, "run_id"], "plot_class_accuracy")
    ax = ensure_axes(ax)
    evals = results.dropna(subset=columns, how="all")
    evals = evals.assign(_eval=evals.groupby("run_id").cumcount())
    long = pd.concat(
        [evals.assign(_group=int(c.rsplit("_", 1)[1]), _value=evals[c]) for c in columns],
        ignore_index=True,
    ).dropna(subset=["_value"])  # a class the test set lacks has no accuracy: no line
    draw_curves(ax, mean_curves(long, x, "_value", "_eval"), band, kw)
    ax.set_xlabel(X_LABELS.get(x, x))
    ax.set_ylabel("test accuracy of the class")
    ax.set_ylim(-0.02, 1.02)
    add_legend(ax, "class")
    return ax


def plot_worker_accuracy(
    workers: pd.DataFrame,
    x: str | None = None,
    hue: str | None = None,
    *,
    y: str = "accuracy",
    logx: bool = False,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Each worker's accuracy on its own data at its run's last evaluation against its mean
    compute time per local step (the speed-data picture: a worker's speed, whatever its
    rule's local steps): one point per (run, worker), a colour and marker per group.

    Args:
        workers: frame from ``load_worker_evals`` (its ``commit, worker, accuracy, loss`` and
            the summary's ``mean_compute_time, commit_share, accepted_share, shard_size``).
        x: ``"mean_step_time"`` (per local step: the default, where the frame has it),
            ``"mean_compute_time"`` (per commit: its local steps together; the default of a
            frame without ``mean_step_time``), ``"commit_share"``, ``"accepted_share"``,
            ``"shard_size"`` or any numeric column.
        hue: column whose values get one colour each; None: one per configuration.
        y: ``"accuracy"`` or ``"loss"`` (the quadratic's, whose accuracy is undefined).
        logx: log-scale the x axis.
    """
    if x is None:
        x = "mean_step_time" if "mean_step_time" in workers.columns else "mean_compute_time"
    require_columns(workers, [x, y, "run_id", "commit", "worker"], "plot_worker_accuracy")
    ax = ensure_axes(ax)
    last = workers.groupby("run_id")["commit"].transform("max")
    final = with_group(workers[workers["commit"] == last], hue).dropna(subset=[x, y])
    groups = list(final.groupby("_group", sort=True, observed=True))
    for i, (label, points) in enumerate(groups):
        style = series_style(i, len(groups))
        # Later groups smaller on top: points that coincide show every group.
        size = 60 - 40 * i / max(len(groups) - 1, 1)
        look = {"color": style["color"], "marker": style["marker"], "alpha": 0.8, "s": size}
        ax.scatter(points[x], points[y], label=str(label), **{**look, **kw})
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(WORKER_X_LABELS.get(x, x))
    ax.set_ylabel(f"{y} on the worker's own data (last evaluation)")
    add_legend(ax, hue or "configuration")
    return ax


PARTICIPATION_Y_LABELS = {
    "commits": "tasks completed (committed)",
    "started": "tasks started",
    "lost": "tasks lost (the client went down)",
}


def plot_participation(
    summary: pd.DataFrame,
    x: str = "speed",
    y: str = "commits",
    hue: str | None = None,
    *,
    bins: int = 10,
    logx: bool = True,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """A population's participation against client speed: one faint point per (run,
    client), and per group a line through the mean of ``y`` in each of ``bins`` equal-count
    bins of ``x`` (deciles by default), at the bin's median ``x``. Under uniform selection a
    slow client is chosen as often as a fast one but holds its slot longer, so fewer of the
    tasks completed are its; churn adds tasks lost.

    Args:
        summary: frame from ``load_worker_summary`` of population runs (its ``speed``,
            ``started``, ``lost``, ``up_seconds`` columns; the rows are clients).
        x: ``"speed"`` (the client's speed factor), ``"up_seconds"`` or any numeric column.
        y: ``"commits"``, ``"started"``, ``"lost"`` or any numeric column.
        hue: column whose values get one colour each; None: one per configuration.
        bins: equal-count bins of ``x`` for the mean line.
        logx: log-scale the x axis (speed factors are usually log-normal).
    """
    require_columns(summary, [x, y, "run_id"], "plot_participation")
    ax = ensure_axes(ax)
    points = with_group(summary.dropna(subset=[x, y]), hue)
    groups = list(points.groupby("_group", sort=True, observed=True))
    for i, (label, rows) in enumerate(groups):
        size = 8 - 4 * i / max(len(groups) - 1, 1)  # later groups smaller, on top
        style = {**series_style(i, len(groups)), "markersize": size}
        (line,) = ax.plot([], [], label=str(label), **{**style, **kw})
        colour = line.get_color()
        ax.scatter(rows[x], rows[y], s=4, alpha=0.15, color=colour, linewidths=0)
        binned = pd.qcut(rows[x].rank(method="first"), min(bins, len(rows)), labels=False)
        means = rows.groupby(binned).agg(x=(x, "median"), y=(y, "mean"))
        line.set_data(means["x"], means["y"])
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("client's speed factor" if x == "speed" else x)
    ax.set_ylabel(f"{PARTICIPATION_Y_LABELS.get(y, y)} per client")
    add_legend(ax, hue or "configuration")
    return ax
