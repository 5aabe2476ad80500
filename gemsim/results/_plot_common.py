"""Shared pieces of the plots: axes, column checks, grouping, averaged curves, frame helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import cbook, colormaps, ticker
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from gemsim.results._run_columns import format_value, sweep_columns_of
from gemsim.results._run_folder import PARAMS_FILE, read_params
from gemsim.types import Status

_PI_LEAF = re.compile(r"pi_leaf_(\d+)$")

X_LABELS = {
    "commit": "commits",
    "worker_step": "steps of the committing worker",
    "mean_worker_step": "steps per worker",
    "time": "virtual time (s)",
    "tokens": "characters processed",
}


class PlainLogFormatter(ticker.LogFormatterSciNotation):
    """Log-axis labels as plain numbers (0.05, 2, 100) on the ticks matplotlib labels."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


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


def _label_columns(results: pd.DataFrame) -> list[str]:
    """Sweep columns that tell the frame's configurations apart: scalar sweep values and
    the leaves of swept sub-tables (``optimizer.rule``) that take several values."""
    cols = sweep_columns_of(results)
    leaves = [c for c in cols if not any(o.startswith(f"{c}.") for o in cols if o != c)]
    return [c for c in leaves if results[c].dropna().astype(str).nunique() > 1]


def short_labels(results: pd.DataFrame) -> dict[str, str]:
    """Config label -> a shorter one naming only the values that differ between the
    frame's configurations (``optimizer.rule=gem, workers.count=8``); the full label
    where that would not tell two configurations apart."""
    runs = results.drop_duplicates("config")
    label_cols = _label_columns(results)
    if not label_cols:
        return {c: c for c in runs["config"]}
    short = {}
    for _, run in runs.iterrows():
        parts = [f"{c}={format_value(run[c])}" for c in label_cols if not pd.isna(run[c])]
        short[run["config"]] = ", ".join(parts)
    if len(set(short.values())) < len(short) or "" in short.values():
        return {c: c for c in runs["config"]}
    return short


def _config_in_sweep_order(results: pd.DataFrame) -> pd.Categorical:
    # Configurations ordered by their sweep values (2, 4, 16 workers), not as text,
    # and named by what differs between them.
    runs = results.drop_duplicates("config")
    order = runs.sort_values([*primary_sweep(results), "config"], na_position="last")["config"]
    short = short_labels(results)
    labels = results["config"].map(short)
    return pd.Categorical(labels, categories=[short[c] for c in order], ordered=True)


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


LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")
MARKS_PER_LINE = 8


def series_style(i: int, n: int = 1) -> dict[str, Any]:
    """The look of the i-th of a figure's series: a colour of the default ten, a line style
    that changes with each ten and a marker with each forty, so that no two series share all
    three, however many there are; the markers of the n series sit at different points of
    their lines, so that series which coincide stay visible."""
    colour = colormaps["tab10"].colors[i % 10]
    marker = MARKERS[(i // 10) % len(MARKERS)] if n > 10 else MARKERS[i % len(MARKERS)]
    return {"color": colour, "linestyle": LINESTYLES[(i // 10) % 4], "marker": marker}


def _marks(i: int, n: int, points: int) -> tuple[int, int]:
    """``markevery`` for series i of n on a line of ``points``: about MARKS_PER_LINE marks,
    each series's shifted along the line."""
    step = max(1, points // MARKS_PER_LINE)
    return (int(round(i * step / max(n, 1))) % step, step)


def draw_curves(ax: Axes, curves: pd.DataFrame, band: bool, kw: dict[str, Any]) -> None:
    kw = cbook.normalize_kwargs(kw, Line2D)  # `lw=` given overrides our linewidth
    groups = list(curves.groupby(level="_group", sort=True, observed=True))
    for i, (label, curve) in enumerate(groups):
        curve = curve.sort_values("x")
        style = {**series_style(i, len(groups)), "markersize": 4}
        style["markevery"] = _marks(i, len(groups), len(curve))
        # Later series are drawn thinner on top: a series equal to an earlier one shows both.
        style["linewidth"] = max(0.8, 2.2 - 1.4 * i / max(len(groups) - 1, 1))
        style = {k: v for k, v in style.items() if k not in kw}
        (line,) = ax.plot(curve["x"], curve["y"], label=str(label), **style, **kw)
        if band and (curve["n"] > 1).any():
            low, high = curve["y"] - curve["y_std"], curve["y"] + curve["y_std"]
            ax.fill_between(curve["x"], low, high, color=line.get_color(), alpha=0.2, lw=0)


def add_legend(ax: Axes, title: str | None) -> None:
    """A legend inside the axes, or beside them when it is large (more than six entries
    or labels longer than 45 characters)."""
    handles, labels = ax.get_legend_handles_labels()
    if len(handles) > 6 or max(map(len, labels), default=0) > 45:
        ax.legend(title=title, fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    elif handles:
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


# --------------------------------------------------------------------------- frame helpers


def final_values(results: pd.DataFrame, y: str, keep: list[str]) -> pd.DataFrame:
    """Last evaluation of each run; a diverged run counts as +inf (it has no final loss)."""
    evals = results.dropna(subset=[y]).sort_values("commit", kind="stable")
    last = evals.groupby("run_id", sort=True).last()
    final = last[y].astype(float).where(last["status"] != Status.DIVERGED.value, np.inf)
    return last[keep].assign(final=final)


def others_label(results: pd.DataFrame, workers_col: str) -> pd.Series:
    """Per row, the differing sweep values other than ``workers_col`` as one label."""
    others = [c for c in _label_columns(results) if c != workers_col]
    if not others:
        return pd.Series("all runs", index=results.index)
    parts = [results[c].map(format_value).radd(f"{c}=") for c in others]
    return parts[0].str.cat(parts[1:], sep=", ") if len(parts) > 1 else parts[0]


def pi_leaf_columns(results: pd.DataFrame) -> list[str]:
    """``pi_leaf_0, pi_leaf_1, ...`` in leaf order (GEM's per-tensor median pi)."""
    found = [(int(m.group(1)), c) for c in results.columns if (m := _PI_LEAF.match(str(c)))]
    return [c for _, c in sorted(found)]


def binned_medians(run: pd.DataFrame, leaves: list[str], bins: int) -> tuple[np.ndarray, Any]:
    """Commit-bin edges and the ``[leaf, bin]`` medians of one run's leaf columns."""
    commits = run["commit"].to_numpy()
    bins = max(1, min(bins, len(commits)))
    edges = np.linspace(commits.min(), commits.max() + 1, bins + 1)
    index = np.clip(np.searchsorted(edges, commits, side="right") - 1, 0, bins - 1)
    medians = run[leaves].groupby(index).median().reindex(range(bins))
    return edges, medians.to_numpy().T


def geometric_law(n_workers: int, kmax: int) -> np.ndarray:
    """``P(tau = k) = (1/n)(1 - 1/n)^k`` for k = 0..kmax: the staleness of n homogeneous
    workers with exponential compute times and an instantaneous server (docs/design.md §4)."""
    if n_workers < 1:
        raise ValueError(f"n_workers = {n_workers}; it must be >= 1")
    k = np.arange(kmax + 1)
    return (1 / n_workers) * (1 - 1 / n_workers) ** k


def single_value(results: pd.DataFrame, column: str) -> Any:
    """The one value ``column`` takes in the frame, or None (absent, NaN or several values)."""
    if column not in results.columns:
        return None
    values = results[column].dropna().unique()
    return values[0] if len(values) == 1 else None


# --------------------------------------------------------------------------- run manifests


def timing_key(manifest: dict[str, Any]) -> str:
    """What sets a run's commit timing, as text: the workers (but their count), network
    and server blocks, whether rounds are synchronous, and the batches per commit."""
    config = manifest.get("config") or {}
    workers = {k: v for k, v in (config.get("workers") or {}).items() if k != "count"}
    optimizer = config.get("optimizer") or {}
    rounds = [optimizer.get("rule") == "sync", optimizer.get("window", 1)]
    return json.dumps(
        [workers, config.get("network"), config.get("server"), rounds], sort_keys=True
    )


def is_exponential(manifest: dict[str, Any]) -> bool:
    """Homogeneous exponential compute, no failures, late joins, churn or slowdowns, and the
    async protocol: the geometric law holds."""
    config = manifest.get("config") or {}
    workers = config.get("workers") or {}
    compute = workers.get("compute") or {}
    kinds = ("groups", "failures", "joins", "churn", "availability", "slowdowns")
    plain = not any(workers.get(k) for k in kinds)
    protocol = (config.get("server") or {}).get("protocol")
    rule = (config.get("optimizer") or {}).get("rule")
    asynchronous = protocol in ("async", {"name": "async"}) or (protocol is None and rule != "sync")
    return compute.get("dist") == "exponential" and plain and asynchronous


def law_text(block: dict[str, Any] | None) -> str:
    """A `<dist>` block as short text: ``lognormal(median=0.1, sigma=0.25)``."""
    law = dict(block or {})
    dist = law.pop("dist", "?")
    args = ", ".join(f"{k}={v}" for k, v in sorted(law.items()) if v is not None)
    return f"{dist}({args})"


def compute_text(manifest: dict[str, Any]) -> str:
    """The compute law of a run as short text: ``lognormal(median=0.1, sigma=0.25)``; with
    the population behind a run's slots: its clients and their speed law."""
    config = manifest.get("config") or {}
    workers = config.get("workers") or {}
    text = law_text(workers.get("compute")) + (" + groups" if workers.get("groups") else "")
    optimizer = config.get("optimizer") or {}
    text += ", synchronous rounds" if optimizer.get("rule") == "sync" else ""
    clients = config.get("clients")
    if clients:
        speed = clients.get("speed")
        text += f"\n{clients.get('population')} clients"
        text += f", speed factors {law_text(speed)}" if speed else ""
    return text


def leaf_names(run_dir: Path, count: int) -> list[str] | None:
    """Parameter paths of a run (``conv1/w``) from its params.npz, in leaf order."""
    try:
        keys = list(read_params(run_dir / PARAMS_FILE))
    except (OSError, ValueError):
        return None
    names = ["/".join(re.findall(r"\['([^']*)'\]", key)) or key for key in keys]
    return names if len(names) == count else None
