"""`plot_run_folder` (``gemsim plot DIR``): which standard figures fit a results folder or one
run folder, each drawn on a bare matplotlib Figure and written as PNG."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from gemsim.results._frames import class_accuracy_columns, load_results
from gemsim.results._plot_common import (
    compute_text,
    is_exponential,
    leaf_names,
    pi_leaf_columns,
    short_labels,
    timing_key,
)
from gemsim.results._plots import (
    plot_energy_ratio,
    plot_final_vs_workers,
    plot_loss,
    plot_pi_heatmap,
    plot_pi_median,
    plot_staleness_hist,
)
from gemsim.results._run_columns import run_manifests
from gemsim.results._run_folder import MANIFEST_FILE, atomic_write_bytes
from gemsim.results._worker_frames import load_worker_evals, load_worker_summary
from gemsim.results._worker_plots import (
    plot_class_accuracy,
    plot_participation,
    plot_worker_accuracy,
)


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


def _staleness_jobs(results: pd.DataFrame, runs: dict[str, tuple[Path, dict]]) -> list:
    """One histogram per (number of workers, timing setting); the law where it holds."""
    jobs = []
    per_run_n = _workers_per_run(results)
    for n in sorted(per_run_n.unique()):
        ids = [r for r in per_run_n.index[per_run_n == n] if r in runs]
        by_timing: dict[str, list[str]] = {}
        for run_id in ids:
            by_timing.setdefault(timing_key(runs[run_id][1]), []).append(run_id)
        for group in by_timing.values():
            tag = "" if len(by_timing) == 1 else f"_{group[0]}"
            manifest = runs[group[0]][1]
            geometric = all(is_exponential(runs[r][1]) for r in group)
            slots = "slots" if (manifest.get("config") or {}).get("clients") else "workers"
            title = f"{n} {slots}, compute {compute_text(manifest)}"
            subset = results[results["run_id"].isin(group)]

            def draw(ax, s=subset, n=int(n), g=geometric, t=title):
                plot_staleness_hist(s, n, geometric=g, ax=ax).set_title(t, fontsize="medium")

            jobs.append((f"staleness_n{n}{tag}.png", draw))
    return jobs


def _folder_jobs(results: pd.DataFrame, runs: dict[str, tuple[Path, dict]]) -> list:
    """(file name, draw function) for every standard plot whose columns exist."""
    cols = set(results.columns)
    jobs: list[tuple[str, Any]] = []
    if "train_loss" in cols and results["train_loss"].notna().any():
        files = {"commit": "commits", "mean_worker_step": "worker_steps", "time": "time"}
        for x, stem in files.items():
            if x in cols:
                jobs.append((f"loss_vs_{stem}.png", lambda ax, x=x: plot_loss(results, x, ax=ax)))
        if "workers.count" in cols and results["workers.count"].nunique() > 1:
            jobs.append(("final_vs_workers.png", lambda ax: plot_final_vs_workers(results, ax=ax)))
    if "test_bits_per_char" in cols and results["test_bits_per_char"].notna().any():
        files = {"commit": "commits", "tokens": "tokens", "time": "time"}
        for x, stem in files.items():
            if x in cols:
                draw = lambda ax, x=x: plot_loss(
                    results, x, y="test_bits_per_char", logy=False, ax=ax
                )
                jobs.append((f"bits_per_char_vs_{stem}.png", draw))
    if "pi_median" in cols and results["pi_median"].notna().any():
        # Against steps per worker so that runs with different n line up; smoothed
        # over 8 diagnosed commits since single commits scatter widely.
        steps = {"x": "mean_worker_step", "smooth": 8}
        jobs.append(("pi_median.png", lambda ax: plot_pi_median(results, **steps, ax=ax)))
        jobs.append(("energy_ratio.png", lambda ax: plot_energy_ratio(results, **steps, ax=ax)))
    if leaves := pi_leaf_columns(results):
        with_pi = results.dropna(subset=[leaves[0]])
        for run_id in with_pi.sort_values("repeat").groupby("config").run_id.first():
            names = leaf_names(runs[run_id][0], len(leaves)) if run_id in runs else None
            draw = lambda ax, r=run_id, ln=names: plot_pi_heatmap(results, r, leaf_names=ln, ax=ax)
            jobs.append((f"pi_heatmap_{run_id}.png", draw))
    if {"staleness", "worker"} <= cols:
        jobs.extend(_staleness_jobs(results, runs))
    return jobs


def _worker_data_jobs(results: pd.DataFrame, workers: pd.DataFrame, summary: pd.DataFrame) -> list:
    """Per-class accuracy against time, one figure per configuration (its repeats averaged);
    each worker's accuracy (the quadratic: loss) on its own data against its speed; a
    population's tasks per client against the client's speed."""
    jobs: list[tuple[str, Any]] = []
    if class_accuracy_columns(results.columns) and "time" in results.columns:
        labels = short_labels(results)
        firsts = results.sort_values("repeat").groupby("config").run_id.first()
        for config, run_id in firsts.items():
            subset, title = results[results["config"] == config], labels.get(config, config)

            def draw(ax, s=subset, t=title):
                plot_class_accuracy(s, ax=ax).set_title(t, fontsize="medium")

            jobs.append((f"class_accuracy_{run_id}.png", draw))
    if not workers.empty and "mean_compute_time" in workers.columns:
        y = "accuracy" if workers["accuracy"].notna().any() else "loss"
        draw = lambda ax: plot_worker_accuracy(workers, y=y, ax=ax)
        jobs.append((f"worker_{y}_vs_speed.png", draw))
    if not summary.empty and "speed" in summary.columns:
        jobs.append(("participation_vs_speed.png", lambda ax: plot_participation(summary, ax=ax)))
    return jobs


def plot_run_folder(
    out_dir: str | os.PathLike[str], dest: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Write the standard PNGs for a results folder or one run folder (``gemsim plot DIR``).

    Plots whose columns are absent are skipped: loss against commits, worker
    steps and virtual time (``loss_vs_*.png``); a language model's test bits per
    character against commits, characters processed and virtual time
    (``bits_per_char_vs_*.png``); final loss against the number of
    workers when ``workers.count`` was swept (``final_vs_workers.png``); median pi
    and the central/target energy ratio for GEM runs (against steps per worker,
    rolling mean over 8 diagnosed commits); a per-tensor pi heat map for
    the first repeat of each GEM configuration, its rows named by the parameter
    paths in ``params.npz``; a staleness histogram per number of workers (per timing
    setting when several share one n), with the geometric law overlaid where every
    run had homogeneous exponential compute (from the run manifests); for classifiers,
    each class's test accuracy against virtual time per configuration
    (``class_accuracy_<run_id>.png``, named by its first repeat); where workers have
    data of their own, each worker's accuracy on it (the quadratic: its loss) at the
    last evaluation against its mean compute time (``worker_accuracy_vs_speed.png``); for
    a population, each client's tasks completed against its speed factor
    (``participation_vs_speed.png``).

    Args:
        out_dir: a results folder of run folders, or one run folder (with its
            ``manifest.json``), whose siblings are then left out.
        dest: where to write; default ``out_dir/plots``.

    Returns:
        The written files, sorted; empty when the folder holds no finished run.
    """
    out_dir = Path(out_dir)
    dest = out_dir / "plots" if dest is None else Path(dest)
    one_run = (out_dir / MANIFEST_FILE).is_file()
    root = out_dir.parent if one_run else out_dir
    runs = {str(m.get("run_id")): (path, m) for path, m in run_manifests(root)}
    if one_run:
        runs = {r: v for r, v in runs.items() if v[0].resolve() == out_dir.resolve()}
    results = load_results(root)
    workers = load_worker_evals(out_dir if one_run else root)
    summary = load_worker_summary(out_dir if one_run else root)
    results = results[results["run_id"].isin(runs)] if one_run else results
    if results.empty:
        return []
    jobs = _folder_jobs(results, runs) + _worker_data_jobs(results, workers, summary)
    return sorted(_save(dest, name, draw) for name, draw in jobs)
