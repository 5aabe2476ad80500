"""Shared pieces of the plots: axes, column checks, grouping and averaged curves."""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.axes import Axes

from gemsim.results.load import sweep_columns_of

X_LABELS = {
    "commit": "commits",
    "worker_step": "steps of the committing worker",
    "mean_worker_step": "steps per worker",
    "time": "virtual time (s)",
}


def ensure_axes(ax: Axes | None) -> Axes:
    """``ax``, or the axes of a new pyplot figure (so that notebooks show it)."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt  # only when no axes were given: keeps Agg/servers pyplot-free

    return plt.subplots()[1]


def require_columns(results: pd.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in results.columns]
    if missing:
        raise ValueError(
            f"{what} needs columns {missing}, which this frame lacks; "
            f"it has {list(results.columns)}"
        )


def primary_sweep(results: pd.DataFrame) -> list[str]:
    """Swept paths, leaving out the leaf columns of a swept sub-table (``optimizer.lr``)."""
    cols = sweep_columns_of(results)
    return [c for c in cols if not any(c.startswith(f"{p}.") for p in cols if p != c)]


def _config_in_sweep_order(results: pd.DataFrame) -> pd.Categorical:
    # Configurations ordered by their sweep values (2, 4, 16 workers), not as text.
    runs = results.drop_duplicates("config")
    order = runs.sort_values([*primary_sweep(results), "config"], na_position="last")["config"]
    return pd.Categorical(results["config"], categories=list(order), ordered=True)


def with_group(results: pd.DataFrame, hue: str | None, default: str = "config") -> pd.DataFrame:
    """``results`` with a ``_group`` column: the ``hue`` column, or ``default`` when None."""
    group = default if hue is None else hue
    require_columns(results, [group], "hue")
    if group == "config":
        return results.assign(_group=_config_in_sweep_order(results))
    values = results[group]
    # Numbers keep their type so that legends sort 2, 4, 16 rather than "16", "2", "4".
    if not pd.api.types.is_numeric_dtype(values) or values.isna().any():
        values = values.astype(str)
    return results.assign(_group=values)


def mean_curves(frame: pd.DataFrame, x: str, y: str, align: str) -> pd.DataFrame:
    """Per (group, aligned point): mean x, mean y, std of y over the runs of the group."""
    grouped = frame.groupby(["_group", align], sort=True, observed=True)
    return grouped.agg(x=(x, "mean"), y=(y, "mean"), y_std=(y, "std"), n=(y, "count"))


def draw_curves(ax: Axes, curves: pd.DataFrame, band: bool, kw: dict[str, Any]) -> None:
    for label, curve in curves.groupby(level="_group", sort=True, observed=True):
        curve = curve.sort_values("x")
        (line,) = ax.plot(curve["x"], curve["y"], label=str(label), **kw)
        if band and (curve["n"] > 1).any():
            low, high = curve["y"] - curve["y_std"], curve["y"] + curve["y_std"]
            ax.fill_between(curve["x"], low, high, color=line.get_color(), alpha=0.2, lw=0)


def add_legend(ax: Axes, title: str | None) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title=title, fontsize="small")


def per_commit_plot(
    results: pd.DataFrame,
    values: pd.Series,
    x: str,
    hue: str | None,
    smooth: int,
    ax: Axes,
    kw: dict[str, Any],
) -> Axes:
    """Shared body of the per-commit diagnostics: smooth per run, then average over runs."""
    require_columns(results, [x, "run_id", "commit"], "this plot")
    frame = with_group(results, hue).assign(_value=values).dropna(subset=["_value"])
    frame = frame.sort_values(["run_id", "commit"], kind="stable")
    if smooth > 1:
        rolling = frame.groupby("run_id", sort=False)["_value"].rolling(smooth, min_periods=1)
        frame = frame.assign(_value=rolling.mean().reset_index(level=0, drop=True))
    frame = frame.assign(_commit=frame["commit"])  # a group key cannot also be aggregated
    draw_curves(ax, mean_curves(frame, x, "_value", "_commit"), band=False, kw=kw)
    ax.axhline(1.0, color="gray", lw=0.8, ls="--")
    ax.set_xlabel(X_LABELS.get(x, x))
    add_legend(ax, hue or "configuration")
    return ax
