"""What a partition gives each worker: sizes, label histograms and their distance from the
training set's label distribution, as values (:func:`describe`) and as a short text table
(:func:`format_summary`) for ``gemsim trace`` and ``gemsim show``; and the load-time check that
every shard can fill a mini-batch (:func:`check_shards`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gemsim._checks import check_int

from ._specs import PartitionError, Shards, check_labels, checked

__all__ = [
    "PartitionSummary",
    "check_shards",
    "describe",
    "format_summary",
    "histogram",
    "tv_distance",
]


def check_shards(shards: Shards, batch_size: int) -> None:
    """Every worker holds at least ``batch_size`` examples, else `PartitionError`."""
    batch_size = checked("batch_size", check_int, batch_size, 1)
    sizes = shards.sizes
    small = np.flatnonzero(sizes < batch_size)
    if small.size:
        w = small[0]
        raise PartitionError(
            "shards",
            f"worker {w} holds {sizes[w]} examples, fewer than the batch size {batch_size} "
            f"({small.size} of the {sizes.size} workers below it): lower the batch size, raise "
            "min_size or use fewer workers",
        )


class PartitionSummary(NamedTuple):
    """What a partition gives each worker, for printing and for metrics."""

    sizes: np.ndarray  # int64 [n]: examples per worker
    histogram: np.ndarray  # int64 [n, n_classes]: each worker's examples per class
    distance: np.ndarray  # float64 [n]: total-variation distance from the global labels
    label_counts: np.ndarray  # int64 [n_classes]: the training set's examples per class
    held: int  # distinct training examples that at least one worker holds


def describe(shards: Shards, labels: np.ndarray, n_classes: int) -> PartitionSummary:
    """Sizes, label histograms and each worker's total-variation distance between its label
    distribution and the training set's (NaN for an empty shard)."""
    labels = check_labels(labels, n_classes)
    n = shards.n_workers
    owner = np.repeat(np.arange(n, dtype=np.int64), shards.sizes)
    hist = histogram(owner, labels[shards.indices], n, n_classes)
    counts = np.bincount(labels, minlength=n_classes)
    held = int(np.count_nonzero(np.bincount(shards.indices, minlength=labels.size)))
    return PartitionSummary(shards.sizes, hist, tv_distance(hist, counts), counts, held)


def histogram(owner: np.ndarray, labels: np.ndarray, n: int, n_classes: int) -> np.ndarray:
    """int64 [n, n_classes]: examples per (worker, class), from each example's owner."""
    flat = np.bincount(owner * n_classes + labels, minlength=n * n_classes)
    return flat.reshape(n, n_classes).astype(np.int64)


def tv_distance(hist: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """0.5 * L1 distance between each row's distribution and ``reference``'s (NaN: empty)."""
    sizes = hist.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = hist / sizes
    return 0.5 * np.abs(share - reference / reference.sum()).sum(axis=1)


def format_summary(summary: PartitionSummary, max_rows: int = 20) -> str:
    """A short text table: one line per worker, or quantiles beyond ``max_rows`` workers."""
    sizes, hist, distance = summary.sizes, summary.histogram, summary.distance
    n, n_train = sizes.size, int(summary.label_counts.sum())
    n_held = (hist > 0).sum(axis=1)
    overlap = " (shards overlap)" if sizes.sum() > summary.held else ""
    lines = [f"{n} workers hold {summary.held} of {n_train} training examples{overlap}"]
    if n <= max_rows:
        lines.append(f"{'worker':>8} {'examples':>9} {'classes':>8} {'distance':>9}  main classes")
        for w in range(n):
            lines.append(
                f"{w:>8} {sizes[w]:>9} {n_held[w]:>8} {distance[w]:>9.3f}  {_main(hist[w])}"
            )
    else:
        lines.append(f"{'quantile':>8} {'examples':>9} {'classes':>8} {'distance':>9}")
        for q, name in ((0.0, "min"), (0.1, "10%"), (0.5, "median"), (0.9, "90%"), (1.0, "max")):
            d = np.nanquantile(distance, q) if np.isfinite(distance).any() else np.nan
            lines.append(
                f"{name:>8} {np.quantile(sizes, q):>9.0f} {np.quantile(n_held, q):>8.0f} {d:>9.3f}"
            )
    dropped = np.flatnonzero((summary.label_counts > 0) & (hist.sum(axis=0) == 0))
    if dropped.size:
        lost = int(summary.label_counts[dropped].sum())
        classes = ", ".join(map(str, dropped))
        lines.append(f"classes held by no worker: {classes} ({lost} examples never trained on)")
    return "\n".join(lines)


def _main(row: np.ndarray, top: int = 3) -> str:
    """The row's largest classes with their shares, e.g. ``3:41% 7:22% 0:10%``."""
    total = row.sum()
    if not total:
        return "-"
    best = np.argsort(-row, kind="stable")[:top]
    return " ".join(f"{k}:{100 * row[k] / total:.0f}%" for k in best if row[k])
