"""Figures of the GEM paper from a :func:`gemsim.results.load_results` frame.

Each ``plot_x(results, ..., ax=None, **kw) -> Axes`` draws on ``ax`` (a new
pyplot figure when None, so it shows in notebooks) and passes ``kw`` on to the
main matplotlib call. Filter the frame first to plot a subset of runs.
Curves are averaged over the runs of one group (by default one configuration,
i.e. its repeats); a shaded band shows one standard deviation across them.
:func:`plot_run_folder` (gemsim/results/_folder_plots.py) writes every figure that fits a
results folder as PNG.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator

from gemsim.results._plot_common import (
    X_LABELS,
    PlainLogFormatter,
    add_legend,
    binned_medians,
    draw_curves,
    ensure_axes,
    final_values,
    geometric_law,
    mean_curves,
    others_label,
    per_commit_plot,
    pi_leaf_columns,
    require_columns,
    short_labels,
    single_value,
    with_group,
)


def plot_loss(
    results: pd.DataFrame,
    x: str = "commit",
    hue: str | None = None,
    *,
    y: str = "train_loss",
    band: bool = True,
    logy: bool = True,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Evaluation loss against commits, worker steps or virtual seconds (paper figure 1).

    Args:
        results: frame from ``load_results``.
        x: ``"commit"``, ``"mean_worker_step"`` (steps per worker, the smooth
            choice), ``"worker_step"`` (steps of the worker that committed) or
            ``"time"``; any numeric column works.
        hue: column whose values get one line each, averaged over every run that
            shares the value; None means one line per configuration (``config``),
            averaged over its repeats and labelled by the sweep values that differ.
            Runs are matched by evaluation index, so with ``x="time"`` both time and
            loss are averaged.
        y: evaluation column (``train_loss``, ``test_loss``, ``test_accuracy``).
        band: shade one standard deviation across runs.
        logy: log-scale the y axis (default; pass False for accuracy).
    """
    require_columns(results, [x, y, "run_id"], "plot_loss")
    ax = ensure_axes(ax)
    evals = with_group(results, hue).dropna(subset=[y])
    evals = evals.assign(_eval=evals.groupby("run_id").cumcount())
    draw_curves(ax, mean_curves(evals, x, y, "_eval"), band, kw)
    ax.set_xlabel(X_LABELS.get(x, x))
    ax.set_ylabel(y.replace("_", " "))
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(PlainLogFormatter())
        ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))
    add_legend(ax, hue or "configuration")
    return ax


def plot_final_vs_workers(
    results: pd.DataFrame,
    workers_col: str = "workers.count",
    hue: str | None = None,
    *,
    y: str = "train_loss",
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Final evaluation loss against the number of workers (paper figure 1d).

    One line per ``hue`` value (None: per combination of the other swept fields),
    mean over repeats with one-standard-deviation error bars. A point where a run
    diverged has no finite mean and is marked with an ``x`` at the top.
    """
    require_columns(
        results, [workers_col, y, "run_id", "commit", "status"], "plot_final_vs_workers"
    )
    ax = ensure_axes(ax)
    if hue is None:
        frame = results.assign(_group=others_label(results, workers_col))
    else:
        frame = with_group(results, hue)
    final = final_values(frame, y, ["_group", workers_col])
    stats = (
        final.groupby(["_group", workers_col], observed=True)["final"]
        .agg(["mean", "std"])
        .reset_index()
    )
    for label, points in stats.groupby("_group", sort=True, observed=True):
        points = points.sort_values(workers_col)
        ok = np.isfinite(points["mean"])
        bar = ax.errorbar(
            points[workers_col][ok], points["mean"][ok], yerr=points["std"][ok].fillna(0),
            marker="o", capsize=3, label=str(label), **kw,
        )  # fmt: skip
        if (~ok).any():
            color = bar.lines[0].get_color()
            x_top = points[workers_col][~ok]
            top = ax.get_xaxis_transform()  # x in data units, y as a fraction of the axes
            ax.plot(x_top, [0.97] * len(x_top), "x", color=color, transform=top)
    ax.set_xlabel("number of workers" if workers_col == "workers.count" else workers_col)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(f"final {y.replace('_', ' ')}")
    add_legend(ax, hue)
    return ax


def plot_pi_median(
    results: pd.DataFrame,
    x: str = "commit",
    hue: str | None = None,
    *,
    smooth: int = 1,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Median GEM scaling pi over commits (paper figure 3); dashed line at pi = 1.

    ``smooth`` is a rolling mean over that many commits of each run before the
    runs of a group are averaged commit by commit.
    """
    require_columns(results, ["pi_median"], "plot_pi_median")
    ax = per_commit_plot(results, results["pi_median"], x, hue, smooth, ensure_axes(ax), kw)
    ax.set_ylabel("median π")
    return ax


def plot_energy_ratio(
    results: pd.DataFrame,
    x: str = "commit",
    hue: str | None = None,
    *,
    smooth: int = 1,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Central over target energy per commit, over commits or virtual time (``x``).

    The target is the energy GEM matches the central variable's motion to,
    ``0.5 * sum((kappa*m)**2)`` (``target_energy``; runs written before that column
    existed stored it as ``proxy_energy``). Where ``0 < pi`` GEM makes
    ``|d + pi*dtheta| <= kappa*|m|`` per parameter, so the ratio is <= 1 unless some
    parameters have pi clipped at 0: there the displacement ``d`` since the worker's
    previous pull alone exceeds the amplified proxy, and the ratio can pass 1 (it does at
    large n). A commit with zero target energy has no ratio and is left out.
    """
    target = "target_energy" if "target_energy" in results.columns else "proxy_energy"
    require_columns(results, ["central_energy", target], "plot_energy_ratio")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = results["central_energy"] / results[target]
    ratio = ratio.where(np.isfinite(ratio))
    ax = per_commit_plot(results, ratio, x, hue, smooth, ensure_axes(ax), kw)
    ax.set_ylabel("central / target energy")
    return ax


def plot_pi_heatmap(
    results: pd.DataFrame,
    run_id: str | None = None,
    *,
    bins: int = 50,
    leaf_names: list[str] | None = None,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Per-tensor median pi of one run: parameter leaves x commit bins (paper figures 9-10).

    Args:
        run_id: the run to draw; None takes the first run (by id) with pi columns.
        bins: number of equal commit bins; each cell is the median over its commits.
        leaf_names: labels for the leaves (``pi_leaf_0`` ...), e.g. the param paths.
    """
    leaves = pi_leaf_columns(results)
    if not leaves:
        raise ValueError("plot_pi_heatmap needs pi_leaf_0, pi_leaf_1, ... columns (GEM runs)")
    require_columns(results, ["run_id", "commit"], "plot_pi_heatmap")
    with_pi = results.dropna(subset=[leaves[0]])
    if run_id is None:
        if with_pi.empty:
            raise ValueError("no run in this frame has per-tensor pi values")
        run_id = sorted(with_pi["run_id"].unique())[0]
    run = with_pi[with_pi["run_id"] == run_id].sort_values("commit")
    if run.empty:
        raise ValueError(f"run {run_id!r} has no per-tensor pi values in this frame")
    ax = ensure_axes(ax)
    edges, matrix = binned_medians(run, leaves, bins)
    extent = (edges[0], edges[-1], -0.5, len(leaves) - 0.5)
    kw = {"aspect": "auto", "origin": "lower", "interpolation": "nearest", **kw}
    image = ax.imshow(matrix, extent=extent, **kw)
    ax.figure.colorbar(image, ax=ax, label="median π")
    if len(leaves) <= 40:
        ax.set_yticks(range(len(leaves)), leaf_names or [str(i) for i in range(len(leaves))])
    ax.set_xlabel("commits")
    ax.set_ylabel("parameter tensor")
    if "config" in run:
        config = run["config"].iloc[0]
        ax.set_title(f"{run_id}: {short_labels(results).get(config, config)}", fontsize="medium")
    else:
        ax.set_title(str(run_id), fontsize="medium")
    return ax


def _exponential_compute(results: pd.DataFrame) -> bool:
    """Whether the frame's own columns say every run had homogeneous exponential compute
    (the compute law swept as a sub-table, no worker groups)."""
    groups = single_value(results, "workers.groups")
    homogeneous = "workers.groups" not in results.columns or groups == "[]"
    return single_value(results, "workers.compute.dist") == "exponential" and homogeneous


def plot_staleness_hist(
    results: pd.DataFrame,
    n_workers: int | None = None,
    *,
    geometric: bool | None = None,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Fraction of commits at each staleness, over every row of the frame, and its mean.

    The geometric law ``P(tau = k) = (1/n)(1-1/n)^k`` is overlaid when compute is
    exponential: it is the exact staleness distribution for n homogeneous workers
    with exponential compute times and an instantaneous server (docs/design.md §4;
    network and service times shift it slightly).

    Args:
        n_workers: n of the law; None takes the frame's single ``workers.count``,
            else the highest worker id + 1.
        geometric: overlay the law; None (default) overlays it when ``n_workers`` is
            given or the frame's ``workers.compute.dist`` column says every run had
            exponential compute (``gemsim plot`` decides from the run manifests).
    """
    require_columns(results, ["staleness"], "plot_staleness_hist")
    values = results["staleness"].dropna().to_numpy().astype(np.int64)
    if values.size == 0 or values.min() < 0:
        raise ValueError("staleness must be present and non-negative")
    ax = ensure_axes(ax)
    probs = np.bincount(values) / values.size
    edges = np.arange(probs.size + 1) - 0.5
    ax.stairs(probs, edges, fill=True, alpha=0.6, **{"label": "observed", **kw})
    ax.axvline(values.mean(), color="k", ls=":", lw=1, label=f"mean {values.mean():.3g}")
    if geometric is None:
        geometric = n_workers is not None or _exponential_compute(results)
    if geometric:
        if n_workers is None:
            n_workers = single_value(results, "workers.count")
        if n_workers is None:
            require_columns(results, ["worker"], "plot_staleness_hist (to infer n_workers)")
            n_workers = int(results["worker"].max()) + 1
        theory = geometric_law(int(n_workers), probs.size - 1)
        label = f"geometric law, n = {int(n_workers)}"
        ax.plot(np.arange(probs.size), theory, "k-", lw=1.2, label=label)
    ax.set_xlabel("staleness τ")
    ax.set_ylabel("fraction of commits")
    add_legend(ax, None)
    return ax
