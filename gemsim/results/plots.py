"""Figures of the GEM paper from a :func:`gemsim.results.load_results` frame.

Each ``plot_x(results, ..., ax=None, **kw) -> Axes`` draws on ``ax`` (a new
pyplot figure when None, so it shows in notebooks) and passes ``kw`` on to the
main matplotlib call. Filter the frame first to plot a subset of runs.
Curves are averaged over the runs of one group (by default one configuration,
i.e. its repeats); a shaded band shows one standard deviation across them.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from gemsim.results._plot_common import (
    X_LABELS,
    add_legend,
    draw_curves,
    ensure_axes,
    mean_curves,
    per_commit_plot,
    primary_sweep,
    require_columns,
    with_group,
)
from gemsim.results.load import load_results
from gemsim.results.run_folder import atomic_write_bytes
from gemsim.types import Status

_PI_LEAF = re.compile(r"pi_leaf_(\d+)$")


# --------------------------------------------------------------------------- the figures


def plot_loss(
    results: pd.DataFrame,
    x: str = "commit",
    hue: str | None = None,
    *,
    y: str = "train_loss",
    band: bool = True,
    logy: bool = False,
    ax: Axes | None = None,
    **kw: Any,
) -> Axes:
    """Evaluation loss against commits, worker steps or virtual time (paper figure 1).

    Args:
        results: frame from ``load_results``.
        x: ``"commit"``, ``"mean_worker_step"`` (steps per worker, the smooth
            choice), ``"worker_step"`` (steps of the worker that committed) or
            ``"time"``; any numeric column works.
        hue: column whose values get one line each, averaged over every run that
            shares the value; None means one line per configuration (``config``),
            averaged over its repeats. Runs are matched by evaluation index, so
            with ``x="time"`` both time and loss are averaged.
        y: evaluation column (``train_loss``, ``test_loss``, ``test_accuracy``).
        band: shade one standard deviation across runs.
        logy: log-scale the y axis.
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
    add_legend(ax, hue or "configuration")
    return ax


def _final_values(results: pd.DataFrame, y: str, keep: list[str]) -> pd.DataFrame:
    """Last evaluation of each run; a diverged run counts as +inf (it has no final loss)."""
    evals = results.dropna(subset=[y]).sort_values("commit", kind="stable")
    last = evals.groupby("run_id", sort=True).last()
    final = last[y].astype(float).where(last["status"] != Status.DIVERGED.value, np.inf)
    return last[keep].assign(final=final)


def _others_label(results: pd.DataFrame, workers_col: str) -> pd.Series:
    others = [c for c in primary_sweep(results) if c != workers_col]
    if not others:
        return pd.Series("all runs", index=results.index)
    parts = [results[c].astype(str).radd(f"{c}=") for c in others]
    return parts[0].str.cat(parts[1:], sep=", ") if len(parts) > 1 else parts[0]


def plot_final_loss_vs_workers(
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
        results, [workers_col, y, "run_id", "commit", "status"], "plot_final_loss_vs_workers"
    )
    ax = ensure_axes(ax)
    if hue is None:
        frame = results.assign(_group=_others_label(results, workers_col))
    else:
        frame = with_group(results, hue)
    final = _final_values(frame, y, ["_group", workers_col])
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
    ax.set_xlabel(workers_col)
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
    """Central over proxy energy per commit (<= 1 where pi is not clipped at the top).

    A commit with zero proxy energy has no ratio and is left out.
    """
    require_columns(results, ["central_energy", "proxy_energy"], "plot_energy_ratio")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = results["central_energy"] / results["proxy_energy"]
    ratio = ratio.where(np.isfinite(ratio))
    ax = per_commit_plot(results, ratio, x, hue, smooth, ensure_axes(ax), kw)
    ax.set_ylabel("central / proxy energy")
    return ax


def _pi_leaf_columns(results: pd.DataFrame) -> list[str]:
    found = [(int(m.group(1)), c) for c in results.columns if (m := _PI_LEAF.match(str(c)))]
    return [c for _, c in sorted(found)]


def _binned_medians(run: pd.DataFrame, leaves: list[str], bins: int) -> tuple[np.ndarray, Any]:
    commits = run["commit"].to_numpy()
    bins = max(1, min(bins, len(commits)))
    edges = np.linspace(commits.min(), commits.max() + 1, bins + 1)
    index = np.clip(np.searchsorted(edges, commits, side="right") - 1, 0, bins - 1)
    medians = run[leaves].groupby(index).median().reindex(range(bins))
    return edges, medians.to_numpy().T


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
    leaves = _pi_leaf_columns(results)
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
    edges, matrix = _binned_medians(run, leaves, bins)
    extent = (edges[0], edges[-1], -0.5, len(leaves) - 0.5)
    kw = {"aspect": "auto", "origin": "lower", "interpolation": "nearest", **kw}
    image = ax.imshow(matrix, extent=extent, **kw)
    ax.figure.colorbar(image, ax=ax, label="median π")
    if len(leaves) <= 40:
        ax.set_yticks(range(len(leaves)), leaf_names or [str(i) for i in range(len(leaves))])
    ax.set_xlabel("commits")
    ax.set_ylabel("parameter tensor")
    ax.set_title(f"{run_id}: {run['config'].iloc[0]}" if "config" in run else str(run_id))
    return ax


def plot_staleness_histogram(
    results: pd.DataFrame, n_workers: int | None = None, *, ax: Axes | None = None, **kw: Any
) -> Axes:
    """Fraction of commits at each staleness, over every row of the frame.

    With ``n_workers`` the geometric law ``(1/n)(1-1/n)^k`` is overlaid: the exact
    staleness distribution for n homogeneous workers with exponential compute
    times and an instantaneous server (DESIGN.md section 4).
    """
    require_columns(results, ["staleness"], "plot_staleness_histogram")
    values = results["staleness"].dropna().to_numpy().astype(np.int64)
    if values.size == 0 or values.min() < 0:
        raise ValueError("staleness must be present and non-negative")
    ax = ensure_axes(ax)
    probs = np.bincount(values) / values.size
    edges = np.arange(probs.size + 1) - 0.5
    ax.stairs(probs, edges, fill=True, alpha=0.6, **{"label": "observed", **kw})
    ax.axvline(values.mean(), color="k", ls=":", lw=1, label=f"mean {values.mean():.3g}")
    if n_workers is not None:
        if n_workers < 1:
            raise ValueError(f"n_workers = {n_workers}; it must be >= 1")
        k = np.arange(probs.size)
        theory = (1 / n_workers) * (1 - 1 / n_workers) ** k
        ax.plot(k, theory, "k-", lw=1.2, label=f"geometric law, n = {n_workers}")
    ax.set_xlabel("staleness τ")
    ax.set_ylabel("fraction of commits")
    add_legend(ax, None)
    return ax


# --------------------------------------------------------------------------- a whole folder


def _save(dest: Path, name: str, draw) -> Path:
    # A bare Figure (not pyplot) so a command that plots a large sweep keeps no
    # global figure registry alive.
    figure = Figure(figsize=(6.4, 4.8))
    draw(figure.add_subplot())
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    return atomic_write_bytes(dest / name, buffer.getvalue())


def _workers_per_run(results: pd.DataFrame) -> pd.Series:
    """Number of workers of each run: the swept ``workers.count``, else the highest id + 1."""
    runs = results.groupby("run_id")
    seen = runs["worker"].max() + 1
    if "workers.count" not in results.columns:
        return seen.astype(int)
    return runs["workers.count"].first().fillna(seen).astype(int)


def _folder_jobs(results: pd.DataFrame) -> list[tuple[str, Any]]:
    """(file name, draw function) for every standard plot whose columns exist."""
    cols = set(results.columns)
    jobs: list[tuple[str, Any]] = []
    if "train_loss" in cols and results["train_loss"].notna().any():
        files = {"commit": "commits", "mean_worker_step": "worker_steps", "time": "time"}
        for x, stem in files.items():
            if x in cols:
                jobs.append((f"loss_vs_{stem}.png", lambda ax, x=x: plot_loss(results, x, ax=ax)))
        if "workers.count" in cols:
            jobs.append(("final_loss_vs_workers.png",
                         lambda ax: plot_final_loss_vs_workers(results, ax=ax)))  # fmt: skip
    if "pi_median" in cols and results["pi_median"].notna().any():
        jobs.append(("pi_median.png", lambda ax: plot_pi_median(results, ax=ax)))
    if {"central_energy", "proxy_energy"} <= cols:
        jobs.append(("energy_ratio.png", lambda ax: plot_energy_ratio(results, ax=ax)))
    if _pi_leaf_columns(results):
        with_pi = results.dropna(subset=[_pi_leaf_columns(results)[0]])
        for run_id in with_pi.sort_values("repeat").groupby("config").run_id.first():
            draw = lambda ax, r=run_id: plot_pi_heatmap(results, r, ax=ax)
            jobs.append((f"pi_heatmap_{run_id}.png", draw))
    if {"staleness", "worker"} <= cols:
        per_run_n = _workers_per_run(results)
        for n in sorted(per_run_n.unique()):
            subset = results[results["run_id"].isin(per_run_n.index[per_run_n == n])]
            draw = lambda ax, s=subset, n=int(n): plot_staleness_histogram(s, n, ax=ax)
            jobs.append((f"staleness_n{n}.png", draw))
    return jobs


def plot_run_folder(
    out_dir: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Write the standard PNGs for a results folder (for ``gemsim plot DIR``).

    Plots whose columns are absent are skipped: loss against commits, worker
    steps and time; final loss against ``workers.count`` when it was swept;
    median pi and energy ratio for GEM runs; a pi heat map for the first repeat
    of each GEM configuration; a staleness histogram per number of
    workers (the swept ``workers.count``, else the highest worker id + 1), with the
    geometric law (exact only for exponential compute) overlaid.

    Args:
        out_dir: the results folder.
        dest: where to write; default ``out_dir/plots``.

    Returns:
        The written files, sorted; empty when the folder holds no finished run.
    """
    dest = Path(out_dir) / "plots" if dest is None else Path(dest)
    results = load_results(out_dir)
    if results.empty:
        return []
    return sorted(_save(dest, name, draw) for name, draw in _folder_jobs(results))
