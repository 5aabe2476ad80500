"""Cuts the partitions share: pieces of equal size, each class's examples, and the check
that every worker can hold an example."""

from __future__ import annotations

import numpy as np

from ._partition_base import PartitionError

__all__ = ["class_members", "even_pieces", "offsets", "require_examples"]


def even_pieces(total: int, k: int) -> np.ndarray:
    """int64 [total]: the piece (0..k-1) of each position when cutting ``total`` consecutive
    items into ``k`` pieces whose sizes differ by at most 1 (the larger ones first, as
    ``np.array_split``)."""
    sizes = np.full(k, total // k, np.int64)
    sizes[: total % k] += 1
    return np.repeat(np.arange(k, dtype=np.int64), sizes)


def offsets(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def require_examples(n_train: int, m: int) -> None:
    if m > n_train:
        raise PartitionError(
            "n_workers",
            f"{m} workers share {n_train} training examples: every worker needs at least one "
            "(use fewer workers)",
        )


def class_members(labels: np.ndarray, n_classes: int) -> dict[int, np.ndarray]:
    """Each class present -> its example indices (increasing), classes in increasing order."""
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=n_classes)
    ends = np.cumsum(counts)
    return {k: order[ends[k] - counts[k] : ends[k]] for k in np.flatnonzero(counts)}
