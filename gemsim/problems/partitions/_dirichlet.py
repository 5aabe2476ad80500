"""Dirichlet partitions of disjoint shards: each class cut across the workers (`Dirichlet`,
Flower's ``DirichletPartitioner``), and each worker's own label mix filling shards of given
sizes (`InnerDirichlet`, Flower's ``InnerDirichletPartitioner``). Each returns every
example's owner in ``[0, m)``; loops run over classes and attempts, never over workers."""

from __future__ import annotations

import numpy as np

from ._cuts import class_members
from ._label_specs import InnerDirichlet
from ._partition_base import PartitionError
from ._partition_sizes import shard_sizes
from ._specs import MAX_DIRICHLET_ATTEMPTS, Dirichlet

__all__ = ["class_alpha", "dirichlet_owners", "inner_dirichlet_owners"]


def dirichlet_owners(
    spec: Dirichlet,
    labels: np.ndarray,
    alpha: np.ndarray,
    rng: np.random.Generator,
    n_classes: int,
    batch_size: int | None,
) -> np.ndarray:
    """Owners of a Dirichlet cut among ``alpha.size`` workers (``alpha``: each one's
    concentration), drawn again until every shard holds ``max(min_size, batch_size)``."""
    m, n = alpha.size, labels.size
    need, why, lower = _min_size(spec.min_size, batch_size)
    if m * need > n:
        raise PartitionError(
            "min_size",
            f"{m} workers with at least {why} examples each need {m * need}, but {n} are "
            f"shared: lower {lower} or use fewer workers",
        )
    members = class_members(labels, n_classes)
    workers = np.arange(m, dtype=np.int64)
    average = n / m  # Flower's threshold for self-balancing
    best = -1
    for _ in range(MAX_DIRICHLET_ATTEMPTS):
        owner = np.empty(n, np.int64)
        sizes = np.zeros(m, np.int64)
        counts = {}
        for k, idx in members.items():
            if not spec.flower_order:  # earlier releases' order: shuffle, then draw
                idx = rng.permutation(idx)
            share = rng.dirichlet(alpha)
            if spec.self_balancing:
                share = _balanced(share, sizes > average)
            cuts = np.floor(np.cumsum(share)[:-1] * idx.size).astype(np.int64)
            # A cumulative sum a rounding above 1 must not cut past the class's end.
            counts[k] = np.diff(np.minimum(cuts, idx.size), prepend=0, append=idx.size)
            if not spec.flower_order:
                owner[idx] = np.repeat(workers, counts[k])
            sizes += counts[k]
        smallest = int(sizes.min())
        best = max(best, smallest)
        if smallest >= need:
            break
    else:
        alphas = f"{alpha[0]:g}" if np.all(alpha == alpha[0]) else _span(alpha)
        raise PartitionError(
            "min_size",
            f"{MAX_DIRICHLET_ATTEMPTS} draws with alpha={alphas} never gave each of the {m} "
            f"workers {why} examples (the smallest shard reached {best} at best): raise "
            f"alpha, lower {lower} or use fewer workers",
        )
    if spec.flower_order:  # which examples: drawn once the counts are kept
        for k, idx in members.items():
            owner[rng.permutation(idx)] = np.repeat(workers, counts[k])
    return owner


def _min_size(min_size: int, batch_size: int | None) -> tuple[int, str, str]:
    """The smallest shard a draw may keep, how to name it and what to lower: a shard below
    the batch size is refused when the problem is built, so drawing again beats refusing."""
    if batch_size is not None and batch_size > min_size:
        why = f"min_size={batch_size} (the batch size, above min_size={min_size})"
        return batch_size, why, "the batch size"
    return min_size, f"min_size={min_size}", "min_size"


def _balanced(share: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Flower's self-balancing: no share for a worker above the average, the rest rescaled
    (uniform over the others if their shares all underflowed to 0)."""
    share = np.where(full, 0.0, share)
    total = share.sum()
    if total > 0:
        return share / total
    return (~full) / np.count_nonzero(~full)


def _span(alpha: np.ndarray) -> str:
    return f"one per worker, {alpha.min():g} to {alpha.max():g}"


def class_alpha(alpha: float | tuple[float, ...], n_classes: int, present: np.ndarray):
    """An inner Dirichlet's concentration over the classes present: one number for all, or
    the entries of the classes present (one per class of the data set)."""
    if not isinstance(alpha, tuple):
        return np.full(present.size, alpha)
    if len(alpha) != n_classes:
        raise PartitionError(
            "alpha",
            f"{len(alpha)} values for the data set's {n_classes} classes: give one per class "
            "or a single number",
        )
    return np.asarray(alpha, np.float64)[present]


def inner_dirichlet_owners(
    spec: InnerDirichlet, labels: np.ndarray, m: int, rng: np.random.Generator, n_classes: int
) -> np.ndarray:
    """Owners of an inner Dirichlet partition (see `InnerDirichlet`)."""
    members = class_members(labels, n_classes)
    present = np.fromiter(members, np.int64, len(members))
    concentration = class_alpha(spec.alpha, n_classes, present)
    sizes = shard_sizes(spec.sizes, labels.size, m, rng)
    mixes = rng.dirichlet(concentration, size=m)  # [m, C]: each worker's label mix
    slot_worker = np.repeat(np.arange(m, dtype=np.int64), sizes)
    # Flower's turns, a uniform choice among the shards not yet full, are the jumps of
    # independent rate-1 Poisson processes, one per shard, each stopping when it is full.
    gaps = rng.exponential(size=slot_worker.size)
    ends = np.cumsum(sizes)
    totals = np.cumsum(gaps)
    before = np.where(ends - sizes > 0, totals[np.maximum(ends - sizes - 1, 0)], 0.0)
    pending = np.argsort(totals - np.repeat(before, sizes), kind="stable")  # in turn order
    left = np.array([members[k].size for k in present], np.int64)
    slot_class = np.empty(slot_worker.size, np.int64)
    while pending.size:
        drawn = _categorical(mixes, left > 0, slot_worker[pending], rng)
        by_class = np.argsort(drawn, kind="stable")
        rank = np.empty(drawn.size, np.int64)
        first = np.searchsorted(drawn[by_class], np.arange(present.size))
        rank[by_class] = np.arange(drawn.size) - first[drawn[by_class]]
        over = rank >= left[drawn]  # the class is gone by this slot's turn
        cut = int(np.argmax(over)) if over.any() else drawn.size
        # Draws up to the first class to run out stand; the later slots draw again, from
        # the classes left (unused draws, so discarding them biases nothing).
        slot_class[pending[:cut]] = drawn[:cut]
        left -= np.bincount(drawn[:cut], minlength=present.size)
        pending = pending[cut:]
    owner = np.full(labels.size, -1, np.int64)
    order = np.argsort(slot_class, kind="stable")
    bounds = np.searchsorted(slot_class[order], np.arange(present.size + 1))
    for j, k in enumerate(present):
        holders = slot_worker[order[bounds[j] : bounds[j + 1]]]
        owner[rng.permutation(members[k])[: holders.size]] = holders
    return owner


def _categorical(
    mixes: np.ndarray, live: np.ndarray, rows: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One class per entry of ``rows``, drawn from that row's mix over the live classes
    (uniform over them where the mix has no weight left there)."""
    weights = mixes * live
    total = weights.sum(axis=1, keepdims=True)
    weights = np.where(total > 0, weights, live.astype(np.float64))
    cdf = np.cumsum(weights, axis=1)
    cdf /= cdf[:, -1:]
    cdf[:, -1] = 1.0
    # All rows in one increasing array: row r's cdf lies in (r, r + 1].
    flat = (cdf + np.arange(mixes.shape[0])[:, None]).ravel()
    at = np.searchsorted(flat, rows + rng.random(rows.size), side="right")
    return at - rows * mixes.shape[1]
