"""Partitions of a training set among workers: which examples each worker streams.

A partition is a pure function of (spec, labels, worker count, seed): the same arguments give
the same shards, and its generator, ``SeedSequence(seed, spawn_key=(PARTITION_KEY,))``, is
shared with no other use of the seed. Everything is numpy and vectorised over workers (Python
loops run over classes and claims, never over workers), so a population of a million workers
is partitioned in seconds, in memory linear in ``n_train + n_workers * n_classes``.

Each spec computes an *owner* per training example (a worker, or -1 for an example nobody
holds); :func:`partition` then groups the examples by owner into :class:`Shards`, each shard
in a seeded random order. Specs, and the reference each matches (docs/heterogeneity.md has
the table):

- :class:`Iid`: equal disjoint shards of a shuffled training set;
- :class:`Dirichlet`: label skew, each class cut across the workers, Flower Datasets'
  ``DirichletPartitioner`` (Hsu, Qi and Brown 2019, arXiv 1909.06335), self-balancing and one
  alpha per worker included;
- :class:`InnerDirichlet`: each worker's own label mix filling shards of given sizes, Flower's
  ``InnerDirichletPartitioner`` (label and quantity skew together);
- :class:`LabelShards`: McMahan et al. 2017's shards (arXiv 1602.05629), Flower's
  ``ShardPartitioner``;
- :class:`Pathological`: ``per_worker`` classes per worker, Flower's
  ``PathologicalPartitioner`` in its three modes;
- :class:`RoundRobin` (formerly ``Classes``): classes dealt round a random permutation;
- :class:`Quantity`: IID labels, shard sizes drawn from a law or Flower's linear, square and
  exponential sizes (quantity skew);
- :class:`FromFile`: the user's own mapping; :class:`Groups`: the data set's natural groups,
  several per worker where there are more groups than workers (Flower's
  ``GroupedNaturalIdPartitioner``).

:class:`Claim` ties speed and data on purpose: a group of workers alone holds some classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from gemsim._checks import check_int

from ._claims import check_claims, split_pool, whole
from ._classes import label_shards, pathological, round_robin
from ._cuts import even_pieces, offsets, require_examples
from ._dirichlet import dirichlet_owners, inner_dirichlet_owners
from ._label_specs import ClassMode
from ._order import (
    SpeedData,
    copula_spearman,
    order_strength,
    ranks_by_speed,
    shard_owners,
    spearman,
    speed_data,
)
from ._partition_base import PARTITION_KEY
from ._partition_files import read_owners
from ._partition_sizes import quantity_owners
from ._sampled import sampled_shards
from ._specs import (
    LABEL_SPECS,
    MAX_DIRICHLET_ATTEMPTS,
    BySpeed,
    Claim,
    Classes,
    Dirichlet,
    FromFile,
    Groups,
    IdSizes,
    Iid,
    InnerDirichlet,
    LabelShards,
    Order,
    PartitionError,
    PartitionSpec,
    Pathological,
    Quantity,
    RoundRobin,
    Shards,
    SizeLaw,
    check_labels,
    checked,
)
from ._summary import (
    PartitionSummary,
    check_shards,
    describe,
    format_summary,
    histogram,
    tv_distance,
)

# The specs, shards and summaries live in their own modules; they are re-exported here so
# that a caller imports the whole partition API from one place.
__all__ = [
    "LABEL_SPECS",
    "MAX_DIRICHLET_ATTEMPTS",
    "BySpeed",
    "DataSplit",
    "split_shards",
    "PARTITION_KEY",
    "Claim",
    "ClassMode",
    "Classes",
    "Dirichlet",
    "FromFile",
    "Groups",
    "IdSizes",
    "Iid",
    "InnerDirichlet",
    "LabelShards",
    "Order",
    "PartitionError",
    "PartitionSpec",
    "PartitionSummary",
    "Pathological",
    "Quantity",
    "RoundRobin",
    "Shards",
    "SizeLaw",
    "SpeedData",
    "check_shards",
    "copula_spearman",
    "describe",
    "format_summary",
    "order_strength",
    "partition",
    "ranks_by_speed",
    "spearman",
    "speed_data",
]


class DataSplit(NamedTuple):
    """How the training set is split among a run's workers: the partition (None: every worker
    streams all of it), the groups of workers that alone hold some classes, and each worker's
    slowness (its mean compute time per mini-batch, for ``order="by_speed"``)."""

    spec: PartitionSpec | None
    claims: tuple[Claim, ...] = ()
    slowness: tuple[float, ...] | None = None

    @property
    def splits(self) -> bool:
        """Whether the workers stream shards of their own (else the whole training set)."""
        return self.spec is not None or bool(self.claims)


def split_shards(
    split: DataSplit,
    labels: np.ndarray,
    n_workers: int,
    seed: int,
    *,
    n_classes: int,
    groups: np.ndarray | None = None,
    batch_size: int | None = None,
) -> Shards:
    """`partition` of a `DataSplit`."""
    slowness = None if split.slowness is None else np.asarray(split.slowness, np.float64)
    return partition(
        split.spec,
        labels,
        n_workers,
        seed,
        n_classes=n_classes,
        groups=groups,
        slowness=slowness,
        claims=split.claims,
        batch_size=batch_size,
    )


# ----------------------------------------------------------------------------- partition


def partition(
    spec: PartitionSpec | None,
    labels: np.ndarray,
    n_workers: int,
    seed: int,
    *,
    n_classes: int,
    groups: np.ndarray | None = None,
    slowness: np.ndarray | None = None,
    claims: Sequence[Claim] = (),
    batch_size: int | None = None,
) -> Shards:
    """Each worker's shard of the training set.

    Claimed examples (all of a claim's classes) leave the pool first; each claim splits its
    examples IID (shuffled, sizes differing by at most 1) among its workers. The rest is
    partitioned by ``spec`` among the workers in no claim. If every worker is in a claim, the
    unclaimed examples are dropped (nobody trains on them). `FromFile` and `Groups` assign
    every example themselves, so they take no claims. With ``samples`` (shards drawn with
    replacement) each claim worker draws its ``samples`` from its claim's examples instead.

    ``spec=None`` means no partition: every worker outside the claims holds every unclaimed
    example and every claim worker every example of its claim, in increasing order (shards
    overlap; memory ``n_workers * n_train``). Without claims that is every worker streaming
    the whole training set.

    Args:
        spec: how to partition the pool, or None (above).
        labels: int [n_train], each training example's class in ``[0, n_classes)``.
        n_workers: the number of workers.
        seed: the scenario's seed (>= 0).
        n_classes: the data set's number of classes.
        groups: int or str [n_train], each example's natural group (for `Groups`).
        slowness: float [n_workers], larger = slower (e.g. each worker's mean compute time
            per mini-batch); needed by ``order="by_speed"`` and `BySpeed` (whose copula
            draws from its own stream of ``seed``, `_order`).
        claims: groups of workers that alone hold the named classes.
        batch_size: the run's mini-batch size, if known: `Dirichlet` draws again until every
            shard holds at least ``max(min_size, batch_size)`` (a smaller shard would be
            refused when the problem is built; only draws that would be refused change).

    Returns:
        The shards, one per worker.

    Raises:
        PartitionError: an impossible partition, naming the field, value and what is allowed.
    """
    n = checked("n_workers", check_int, n_workers, 1)
    seed = checked("seed", check_int, seed, 0)
    labels = check_labels(labels, n_classes)
    if spec is not None and not isinstance(spec, PartitionSpec):
        raise PartitionError("spec", f"must be a partition spec or None, got {spec!r}")
    if batch_size is not None:
        batch_size = checked("batch_size", check_int, batch_size, 1)
    by_speed = spec is not None and ranks_by_speed(spec.order)
    speed = _check_slowness(slowness, n) if by_speed else None
    _check_worker_alpha(spec, n)
    claims = check_claims(claims, labels, n, n_classes, spec)
    if getattr(spec, "samples", None) is not None:
        return sampled_shards(
            spec, labels, n, _rng(seed), n_classes, speed, seed=seed, claims=claims
        )
    pool, rest = split_pool(labels, claims, n, n_classes)
    if spec is None:
        return whole(labels, claims, pool, rest, n)

    rng = _rng(seed)
    owner = np.full(labels.size, -1, np.int64)
    for claim in claims:
        members = rng.permutation(np.flatnonzero(np.isin(labels, claim.classes)))
        owner[members] = np.asarray(claim.workers)[even_pieces(members.size, len(claim.workers))]
    if rest.size:
        local = _draw(spec, labels[pool], rest, rng, n_classes, groups, batch_size)
        if speed is not None:
            local = _by_speed(spec, local, labels[pool], n_classes, speed[rest], seed)
        # -1 (held by nobody) stays -1; it indexes nothing.
        owner[pool] = np.where(local >= 0, rest[np.maximum(local, 0)], -1)
    return _group(owner, n, rng)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PARTITION_KEY,)))


def _draw(
    spec: PartitionSpec,
    labels: np.ndarray,
    rest: np.ndarray,
    rng: np.random.Generator,
    n_classes: int,
    groups: np.ndarray | None,
    batch_size: int | None,
) -> np.ndarray:
    """The pool's owners in ``[0, m)`` (-1: held by nobody), shards in drawn order; ``rest``
    the pool's workers (for a per-worker alpha)."""
    m = rest.size
    if isinstance(spec, Iid):
        require_examples(labels.size, m)
        owner = np.empty(labels.size, np.int64)
        owner[rng.permutation(labels.size)] = even_pieces(labels.size, m)
        return owner
    if isinstance(spec, Dirichlet):
        alpha = np.asarray(spec.alpha, np.float64)
        alpha = alpha[rest] if alpha.ndim else np.full(m, spec.alpha)
        return dirichlet_owners(spec, labels, alpha, rng, n_classes, batch_size)
    if isinstance(spec, InnerDirichlet):
        return inner_dirichlet_owners(spec, labels, m, rng, n_classes)
    if isinstance(spec, RoundRobin):
        return round_robin(spec, labels, m, rng, n_classes)
    if isinstance(spec, LabelShards):
        return label_shards(spec, labels, m, rng)
    if isinstance(spec, Pathological):
        return pathological(spec, labels, m, rng, n_classes)
    if isinstance(spec, Quantity):
        return quantity_owners(spec, labels.size, m, rng)
    if isinstance(spec, FromFile):
        return read_owners(spec, labels.size, m)
    return _groups(groups, labels.size, m)


def _group(owner: np.ndarray, n: int, rng: np.random.Generator) -> Shards:
    """Shards from each example's owner, each shard in a random order (one sort, no loop)."""
    keys = rng.random(owner.size)
    held = np.flatnonzero(owner >= 0)
    indices = held[np.lexsort((keys[held], owner[held]))]
    sizes = np.bincount(owner[held], minlength=n)
    return Shards(indices.astype(np.int64), offsets(sizes))


def _groups(groups: np.ndarray | None, n_train: int, m: int) -> np.ndarray:
    if groups is None:
        raise PartitionError(
            "groups",
            "the data set has no groups array: the groups partition needs an arrays data set "
            "with a `groups` array aligned with the training set",
        )
    groups = np.asarray(groups)
    wrong = PartitionError(
        "groups",
        f"must be integer or string ids, one per training example ({n_train}), got "
        f"{groups.dtype} of shape {groups.shape}",
    )
    if groups.shape != (n_train,) or groups.dtype.kind not in "iuUSO":
        raise wrong
    try:
        ids, owner = np.unique(groups, return_inverse=True)
    except TypeError:  # objects that do not compare, e.g. mixed strings and numbers
        raise wrong from None
    if ids.size < m:
        raise PartitionError(
            "groups",
            f"the data set has {ids.size} groups but there are {m} workers: at least one "
            f"group per worker (use at most {ids.size} workers)",
        )
    # Consecutive runs of the sorted ids, one per worker (one id each when as many).
    return even_pieces(ids.size, m)[owner].astype(np.int64)


def _by_speed(
    spec: PartitionSpec,
    owner: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    slowness: np.ndarray,
    seed: int,
) -> np.ndarray:
    """Relabel drawn shards: the most skewed (or largest) go to the slowest workers, or to
    a copula's ranking of them (`_order`)."""
    m = slowness.size
    held = owner >= 0
    if isinstance(spec, LABEL_SPECS):
        hist = histogram(owner[held], labels[held], m, n_classes)
        key = tv_distance(hist, np.bincount(labels, minlength=n_classes))
        key = np.nan_to_num(key, nan=-1.0)  # an empty shard has no skew: to the fastest
    else:
        key = np.bincount(owner[held], minlength=m).astype(np.float64)
    new = shard_owners(key, slowness, spec.order, seed)
    return np.where(held, new[np.maximum(owner, 0)], -1)


# ----------------------------------------------------------------------------- checks


def _check_worker_alpha(spec: PartitionSpec | None, n: int) -> None:
    if isinstance(spec, Dirichlet) and isinstance(spec.alpha, tuple) and len(spec.alpha) != n:
        raise PartitionError(
            "alpha",
            f"{len(spec.alpha)} values for {n} workers: give one per worker (each data owner, "
            "in order) or a single number",
        )


def _check_slowness(slowness: np.ndarray | None, n: int) -> np.ndarray:
    if slowness is None:
        raise PartitionError(
            "order",
            "by_speed needs each worker's slowness (e.g. its mean compute time); none was given",
        )
    slowness = np.asarray(slowness, dtype=np.float64)
    if slowness.shape != (n,) or not np.isfinite(slowness).all():
        raise PartitionError(
            "slowness",
            f"must be {n} finite numbers, one per worker, got shape {slowness.shape} with "
            f"{np.count_nonzero(~np.isfinite(slowness))} non-finite values",
        )
    return slowness
