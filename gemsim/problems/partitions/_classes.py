"""Partitions that deal whole classes, or runs of a label-sorted training set, to workers:
McMahan et al.'s shards (`LabelShards`), Flower's pathological classes (`Pathological`) and
the round robin of classes (`RoundRobin`). Each returns every example's owner in
``[0, m)``, -1 for an example nobody holds; loops run over classes, never over workers."""

from __future__ import annotations

import numpy as np

from ._cuts import class_members, even_pieces
from ._label_specs import ClassMode, LabelShards, Pathological, RoundRobin
from ._partition_base import PartitionError

__all__ = ["label_shards", "pathological", "round_robin"]


def label_shards(
    spec: LabelShards, labels: np.ndarray, m: int, rng: np.random.Generator
) -> np.ndarray:
    """Owners of McMahan et al.'s shards (see `LabelShards`)."""
    n, dealt_count = labels.size, m * spec.per_worker
    size = spec.shard_size if spec.shard_size is not None else n // dealt_count
    if size < 1:
        raise PartitionError(
            "per_worker",
            f"{m} workers with {spec.per_worker} shards each need {dealt_count} shards of at "
            f"least one example, but {n} are shared: lower per_worker or use fewer workers",
        )
    usable = n // size
    if usable < dealt_count:
        raise PartitionError(
            "shard_size",
            f"{m} workers with {spec.per_worker} shards of {size} examples need "
            f"{dealt_count * size}, but {n} are shared: lower shard_size or per_worker",
        )
    # The first draw, as Flower's: which shards each worker gets.
    dealt = rng.permutation(usable)[:dealt_count]
    shard_owner = np.full(usable, -1, np.int64)
    shard_owner[dealt] = np.arange(dealt_count, dtype=np.int64) // spec.per_worker
    by_label = np.lexsort((rng.random(n), labels))  # sorted by label, random within a class
    owner = np.full(n, -1, np.int64)
    cut = usable * size  # the incomplete last shard is dropped
    owner[by_label[:cut]] = shard_owner[np.arange(cut) // size]
    return owner


def pathological(
    spec: Pathological, labels: np.ndarray, m: int, rng: np.random.Generator, n_classes: int
) -> np.ndarray:
    """Owners of Flower's pathological partition (see `Pathological`)."""
    members = class_members(labels, n_classes)
    present = np.fromiter(members, np.int64, len(members))
    n_present, p = present.size, spec.per_worker
    _check_per_worker(p, present)
    workers = np.arange(m, dtype=np.int64)
    if spec.mode is ClassMode.DETERMINISTIC:
        chosen = (workers[:, None] + np.arange(p)) % n_present
    elif p == n_present:  # every worker holds every class: nothing to draw
        chosen = np.broadcast_to(np.arange(n_present), (m, n_present))
    else:
        # One uniform key per (worker, class): the p smallest are a uniform p-subset, the
        # law of Flower's per-worker choice without replacement, drawn at once.
        keys = rng.random((m, n_present))
        if spec.mode is ClassMode.FIRST_DETERMINISTIC:
            keys[workers, workers % n_present] = -1.0  # always among the chosen
        chosen = np.argpartition(keys, p - 1, axis=1)[:, :p]
    holds = np.zeros((m, n_present), bool)
    holds[workers[:, None], chosen] = True
    owner = np.full(labels.size, -1, np.int64)
    for j, k in enumerate(present):
        holders = np.flatnonzero(holds[:, j])
        if not holders.size:  # nobody holds the class: it is dropped
            continue
        idx = members[k]
        if holders.size > idx.size:
            raise PartitionError(
                "per_worker",
                f"class {k} has {idx.size} training examples but {holders.size} workers hold "
                "it: use fewer workers or fewer classes per worker (or mode deterministic, "
                "which spreads the classes evenly)",
            )
        owner[rng.permutation(idx)] = holders[even_pieces(idx.size, holders.size)]
    return owner


def round_robin(
    spec: RoundRobin, labels: np.ndarray, m: int, rng: np.random.Generator, n_classes: int
) -> np.ndarray:
    """Owners of the round robin of classes (see `RoundRobin`; the draws of earlier
    releases' ``Classes``)."""
    members = class_members(labels, n_classes)
    n_present, p = len(members), spec.per_worker
    _check_per_worker(p, np.fromiter(members, np.int64, n_present))
    perm = rng.permutation(np.fromiter(members, np.int64, n_present))
    owner = np.full(labels.size, -1, np.int64)
    for q, k in enumerate(perm):
        # Slot s = w * p + j is worker w's j-th class, perm[s % C]: class q's slots in order.
        holders = np.arange(q, m * p, n_present, dtype=np.int64) // p
        if holders.size:  # else nobody holds the class: it is dropped
            idx = rng.permutation(members[k])
            owner[idx] = holders[even_pieces(idx.size, holders.size)]
    return owner


def _check_per_worker(p: int, present: np.ndarray) -> None:
    if p > present.size:
        raise PartitionError(
            "per_worker",
            f"{p} classes per worker, but the training examples to share hold only "
            f"{present.size} classes ({', '.join(map(str, present))}): allowed 1 to "
            f"{present.size}",
        )
