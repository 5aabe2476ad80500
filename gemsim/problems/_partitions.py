"""Partitions of a training set among workers: which examples each worker streams.

A partition is a pure function of (spec, labels, worker count, seed): the same arguments give
the same shards, and its generator, ``SeedSequence(seed, spawn_key=(PARTITION_KEY,))``, is
shared with no other use of the seed. Everything is numpy and vectorised over workers (Python
loops run over classes and claims, never over workers), so a population of a million workers
is partitioned in seconds, in memory linear in ``n_train + n_workers * n_classes``.

Each spec computes an *owner* per training example (a worker, or -1 for an example nobody
holds); :func:`partition` then groups the examples by owner into :class:`Shards`, each shard
in a seeded random order. Specs:

- :class:`Iid`: equal disjoint shards of a shuffled training set;
- :class:`Dirichlet`: label skew, the semantics of Flower Datasets' ``DirichletPartitioner``
  (Hsu, Qi and Brown 2019, arXiv 1909.06335);
- :class:`Classes`: ``per_worker`` classes per worker (McMahan et al. 2017, arXiv 1602.05629;
  Flower's ``PathologicalPartitioner``);
- :class:`Quantity`: IID labels, shard sizes drawn from a law (quantity skew);
- :class:`FromFile`: the user's own mapping; :class:`Groups`: the data set's natural groups.

:class:`Claim` ties speed and data on purpose: a group of workers alone holds some classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from gemsim._checks import check_int

from ._partition_files import read_owners
from ._partition_sampled import sampled_shards
from ._partition_specs import (
    MAX_DIRICHLET_ATTEMPTS,
    Claim,
    Classes,
    Dirichlet,
    FromFile,
    Groups,
    Iid,
    Order,
    PartitionError,
    PartitionSpec,
    Quantity,
    Shards,
    SizeLaw,
    check_labels,
    checked,
)
from ._partition_summary import (
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
    "MAX_DIRICHLET_ATTEMPTS",
    "DataSplit",
    "split_shards",
    "PARTITION_KEY",
    "Claim",
    "Classes",
    "Dirichlet",
    "FromFile",
    "Groups",
    "Iid",
    "Order",
    "PartitionError",
    "PartitionSpec",
    "PartitionSummary",
    "Quantity",
    "Shards",
    "SizeLaw",
    "check_shards",
    "describe",
    "format_summary",
    "partition",
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
    )


PARTITION_KEY = 0x9A27
"""Spawn key of the partition generator, apart from the timing model's ``(0, w)`` and ``(1,)``
and the problem's ``(0x9E, tag)`` streams (the value is part of the format)."""

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
) -> Shards:
    """Each worker's shard of the training set.

    Claimed examples (all of a claim's classes) leave the pool first; each claim splits its
    examples IID (shuffled, sizes differing by at most 1) among its workers. The rest is
    partitioned by ``spec`` among the workers in no claim. If every worker is in a claim, the
    unclaimed examples are dropped (nobody trains on them). `FromFile` and `Groups` assign
    every example themselves, so they take no claims.

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
            per mini-batch); needed by ``order="by_speed"``.
        claims: groups of workers that alone hold the named classes.

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
    by_speed = spec is not None and spec.order is Order.BY_SPEED
    speed = _check_slowness(slowness, n) if by_speed else None
    claims = _check_claims(claims, labels, n, n_classes, spec)
    if getattr(spec, "samples", None) is not None:
        if claims:
            raise PartitionError(
                "samples",
                "shards drawn with replacement cannot be combined with groups that hold "
                "classes: leave out `samples`, or the groups' `data`",
                claim=0,
            )
        return sampled_shards(spec, labels, n, _rng(seed), n_classes, speed)
    pool, rest = _split_pool(labels, claims, n, n_classes)
    if spec is None:
        return _whole(labels, claims, pool, rest, n)

    rng = _rng(seed)
    owner = np.full(labels.size, -1, np.int64)
    for claim in claims:
        members = rng.permutation(np.flatnonzero(np.isin(labels, claim.classes)))
        owner[members] = np.asarray(claim.workers)[_even_pieces(members.size, len(claim.workers))]
    if rest.size:
        local = _draw(spec, labels[pool], rest.size, rng, n_classes, groups)
        if speed is not None:
            local = _by_speed(spec, local, labels[pool], n_classes, speed[rest])
        # -1 (held by nobody) stays -1; it indexes nothing.
        owner[pool] = np.where(local >= 0, rest[np.maximum(local, 0)], -1)
    return _group(owner, n, rng)


def _split_pool(
    labels: np.ndarray, claims: tuple[Claim, ...], n: int, n_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """The unclaimed examples and the workers in no claim (increasing)."""
    claimed_classes = np.zeros(n_classes, bool)
    in_claim = np.zeros(n, bool)
    for claim in claims:
        claimed_classes[list(claim.classes)] = True
        in_claim[list(claim.workers)] = True
    pool = np.flatnonzero(~claimed_classes[labels])
    rest = np.flatnonzero(~in_claim)
    if rest.size and not pool.size:
        raise PartitionError(
            "classes",
            f"the claims hold every training example, leaving none for the {rest.size} "
            f"workers in no claim (worker {rest[0]} first): claim fewer classes",
        )
    return pool, rest


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PARTITION_KEY,)))


def _draw(
    spec: PartitionSpec,
    labels: np.ndarray,
    m: int,
    rng: np.random.Generator,
    n_classes: int,
    groups: np.ndarray | None,
) -> np.ndarray:
    """The pool's owners in ``[0, m)`` (-1: held by nobody), shards in drawn order."""
    if isinstance(spec, Iid):
        _require_examples(labels.size, m)
        owner = np.empty(labels.size, np.int64)
        owner[rng.permutation(labels.size)] = _even_pieces(labels.size, m)
        return owner
    if isinstance(spec, Dirichlet):
        return _dirichlet(spec, labels, m, rng, n_classes)
    if isinstance(spec, Classes):
        return _classes(spec, labels, m, rng, n_classes)
    if isinstance(spec, Quantity):
        return _quantity(spec, labels.size, m, rng)
    if isinstance(spec, FromFile):
        return read_owners(spec, labels.size, m)
    return _groups(groups, labels.size, m)


def _group(owner: np.ndarray, n: int, rng: np.random.Generator) -> Shards:
    """Shards from each example's owner, each shard in a random order (one sort, no loop)."""
    keys = rng.random(owner.size)
    held = np.flatnonzero(owner >= 0)
    indices = held[np.lexsort((keys[held], owner[held]))]
    sizes = np.bincount(owner[held], minlength=n)
    return Shards(indices.astype(np.int64), _offsets(sizes))


def _offsets(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _even_pieces(total: int, k: int) -> np.ndarray:
    """int64 [total]: the piece (0..k-1) of each position when cutting ``total`` consecutive
    items into ``k`` pieces whose sizes differ by at most 1 (the larger ones first)."""
    sizes = np.full(k, total // k, np.int64)
    sizes[: total % k] += 1
    return np.repeat(np.arange(k, dtype=np.int64), sizes)


def _require_examples(n_train: int, m: int) -> None:
    if m > n_train:
        raise PartitionError(
            "n_workers",
            f"{m} workers share {n_train} training examples: every worker needs at least one "
            "(use fewer workers)",
        )


def _class_members(labels: np.ndarray, n_classes: int) -> dict[int, np.ndarray]:
    """Each class present -> its example indices (increasing), classes in increasing order."""
    order = np.argsort(labels, kind="stable")
    counts = np.bincount(labels, minlength=n_classes)
    ends = np.cumsum(counts)
    return {k: order[ends[k] - counts[k] : ends[k]] for k in np.flatnonzero(counts)}


def _dirichlet(
    spec: Dirichlet, labels: np.ndarray, m: int, rng: np.random.Generator, n_classes: int
) -> np.ndarray:
    if m * spec.min_size > labels.size:
        raise PartitionError(
            "min_size",
            f"{m} workers with at least min_size={spec.min_size} examples each need "
            f"{m * spec.min_size}, but {labels.size} are shared: lower min_size or use fewer "
            "workers",
        )
    members = _class_members(labels, n_classes)
    alpha = np.full(m, spec.alpha)
    workers = np.arange(m, dtype=np.int64)
    smallest = 0
    for _ in range(MAX_DIRICHLET_ATTEMPTS):
        owner = np.empty(labels.size, np.int64)
        sizes = np.zeros(m, np.int64)
        for idx in members.values():
            idx = rng.permutation(idx)
            cuts = np.floor(np.cumsum(rng.dirichlet(alpha))[:-1] * idx.size).astype(np.int64)
            # A cumulative sum a rounding above 1 must not cut past the class's end.
            counts = np.diff(np.minimum(cuts, idx.size), prepend=0, append=idx.size)
            owner[idx] = np.repeat(workers, counts)
            sizes += counts
        smallest = int(sizes.min())
        if smallest >= spec.min_size:
            return owner
    raise PartitionError(
        "min_size",
        f"{MAX_DIRICHLET_ATTEMPTS} draws with alpha={spec.alpha:g} never gave each of the {m} "
        f"workers min_size={spec.min_size} examples (the smallest shard reached {smallest}): "
        "raise alpha, lower min_size or use fewer workers",
    )


def _classes(
    spec: Classes, labels: np.ndarray, m: int, rng: np.random.Generator, n_classes: int
) -> np.ndarray:
    members = _class_members(labels, n_classes)
    n_present, p = len(members), spec.per_worker
    if p > n_present:
        raise PartitionError(
            "per_worker",
            f"{p} classes per worker, but the training examples to share hold only "
            f"{n_present} classes ({', '.join(map(str, members))}): allowed 1 to {n_present}",
        )
    perm = rng.permutation(np.fromiter(members, np.int64, n_present))
    owner = np.full(labels.size, -1, np.int64)
    for q, k in enumerate(perm):
        # Slot s = w * p + j is worker w's j-th class, perm[s % C]: class q's slots in order.
        holders = np.arange(q, m * p, n_present, dtype=np.int64) // p
        if holders.size:  # else nobody holds the class: it is dropped
            idx = rng.permutation(members[k])
            owner[idx] = holders[_even_pieces(idx.size, holders.size)]
    return owner


def _quantity(spec: Quantity, n_train: int, m: int, rng: np.random.Generator) -> np.ndarray:
    _require_examples(n_train, m)
    draws = np.asarray(spec.sizes.sample(rng, m), dtype=np.float64)
    bad = ~(np.isfinite(draws) & (draws > 0))
    if draws.shape != (m,) or bad.any():
        shown = draws[bad][0] if draws.shape == (m,) else f"shape {draws.shape}"
        raise PartitionError(
            "sizes",
            f"{spec.sizes!r} drew {shown}; allowed: a law of finite numbers > 0",
        )
    sizes = 1 + _largest_remainder(draws * ((n_train - m) / draws.sum()), n_train - m)
    owner = np.empty(n_train, np.int64)
    owner[rng.permutation(n_train)] = np.repeat(np.arange(m, dtype=np.int64), sizes)
    return owner


def _largest_remainder(quotas: np.ndarray, total: int) -> np.ndarray:
    """Integers summing to ``total``: the quotas' floors, plus one for the largest remainders
    (ties to the lower index)."""
    base = np.floor(quotas).astype(np.int64)
    short = total - int(base.sum())
    base[np.argsort(base - quotas, kind="stable")[:short]] += 1
    return base


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
    if ids.size != m:
        raise PartitionError(
            "groups",
            f"the data set has {ids.size} groups but there are {m} workers: one worker per "
            f"group (use {ids.size} workers)",
        )
    return owner.astype(np.int64)


def _by_speed(
    spec: PartitionSpec,
    owner: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    slowness: np.ndarray,
) -> np.ndarray:
    """Relabel drawn shards: the most skewed (or largest) go to the slowest workers."""
    m = slowness.size
    held = owner >= 0
    if isinstance(spec, Dirichlet | Classes):
        hist = histogram(owner[held], labels[held], m, n_classes)
        key = tv_distance(hist, np.bincount(labels, minlength=n_classes))
        key = np.nan_to_num(key, nan=-1.0)  # an empty shard has no skew: to the fastest
    else:
        key = np.bincount(owner[held], minlength=m).astype(np.float64)
    index = np.arange(m)
    shards = np.lexsort((index, -key))
    workers = np.lexsort((index, -slowness))
    new = np.empty(m, np.int64)
    new[shards] = workers
    return np.where(held, new[np.maximum(owner, 0)], -1)


def _whole(
    labels: np.ndarray, claims: tuple[Claim, ...], pool: np.ndarray, rest: np.ndarray, n: int
) -> Shards:
    """No partition: overlapping shards (see `partition`)."""
    blocks = [(rest, pool)]
    blocks += [(np.asarray(c.workers), np.flatnonzero(np.isin(labels, c.classes))) for c in claims]
    sizes = np.zeros(n, np.int64)
    for workers, examples in blocks:
        sizes[workers] = examples.size
    offsets = _offsets(sizes)
    indices = np.empty(offsets[-1], np.int64)
    for workers, examples in blocks:
        indices[offsets[workers][:, None] + np.arange(examples.size)] = examples
    return Shards(indices, offsets)


# ----------------------------------------------------------------------------- checks


def _check_claims(
    claims: Sequence[Claim],
    labels: np.ndarray,
    n: int,
    n_classes: int,
    spec: PartitionSpec | None,
) -> tuple[Claim, ...]:
    """The claims as tuples of ints, each checked: ids in range, classes present, no worker
    or class in two claims."""
    if claims and isinstance(spec, FromFile | Groups):
        raise PartitionError(
            "classes",
            f"{type(spec).__name__} assigns every example itself and cannot be combined with "
            "groups that hold classes: write those classes' workers into the mapping instead",
            claim=0,
        )
    present = np.bincount(labels, minlength=n_classes) > 0
    worker_claim = np.full(n, -1)
    class_claim = np.full(n_classes, -1)
    result = []
    for i, claim in enumerate(claims):
        workers = _claim_ids(i, "workers", claim[0], n, "workers")
        classes = _claim_ids(i, "classes", claim[1], n_classes, "classes of the data set")
        absent = classes[~present[classes]]
        if absent.size:
            raise PartitionError(
                "classes",
                f"class {absent[0]} has no training example; allowed: the classes present "
                f"({', '.join(map(str, np.flatnonzero(present)))})",
                claim=i,
            )
        for field, word, ids, taken in (
            ("workers", "worker", workers, worker_claim),
            ("classes", "class", classes, class_claim),
        ):
            clash = ids[taken[ids] >= 0]
            if clash.size:
                raise PartitionError(
                    field,
                    f"claims {taken[clash[0]]} and {i} both name {word} {clash[0]}: a {word} "
                    "belongs to one claim at most",
                    claim=i,
                )
            taken[ids] = i
        result.append(Claim(tuple(workers.tolist()), tuple(classes.tolist())))
    return tuple(result)


def _claim_ids(i: int, field: str, values: object, limit: int, what: str) -> np.ndarray:
    ids = np.asarray(values)
    if ids.ndim != 1 or not ids.size or ids.dtype.kind not in "iu":
        raise PartitionError(
            field, f"must be a non-empty list of integers, got {values!r}", claim=i
        )
    bad = ids[(ids < 0) | (ids >= limit)]
    if bad.size:
        raise PartitionError(
            field, f"{bad[0]} is out of range: allowed 0 to {limit - 1} ({what})", claim=i
        )
    if np.unique(ids).size != ids.size:
        raise PartitionError(field, f"names an entry twice: {values!r}", claim=i)
    return ids.astype(np.int64)


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
