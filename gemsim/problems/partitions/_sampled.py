"""Shards drawn with replacement, for populations of clients larger than the training set
(`Iid`, `Dirichlet` or `InnerDirichlet` with ``samples``): every client draws its own
examples, so shards overlap; memory ``n_workers * samples`` indices. Vectorised over clients
(a million clients draw in seconds): Python loops run over classes and claims only.

With claims (groups of clients that alone hold some classes), the clients in no claim draw
from the unclaimed examples by the spec, and each claim's clients ``samples`` examples each,
uniformly with replacement, from its classes' examples (the IID split of a claim, drawn)."""

from __future__ import annotations

import numpy as np

from ._claims import split_pool
from ._dirichlet import class_alpha
from ._order import shard_owners
from ._partition_base import Claim, SpeedOrder
from ._specs import Dirichlet, Iid, InnerDirichlet, PartitionError, Shards
from ._summary import histogram, tv_distance


def sampled_shards(
    spec: Iid | Dirichlet | InnerDirichlet,
    labels: np.ndarray,
    n: int,
    rng: np.random.Generator,
    n_classes: int,
    slowness: np.ndarray | None,
    *,
    seed: int,
    claims: tuple[Claim, ...] = (),
) -> Shards:
    """Each of ``n`` workers' ``spec.samples`` examples (see the specs), grouped by worker;
    ``slowness`` (for a speed order) and ``claims`` as `partition` takes them."""
    m = spec.samples
    if not labels.size:
        raise PartitionError("samples", "the training set holds no example to draw from")
    offsets = np.arange(n + 1, dtype=np.int64) * m
    if not claims:
        indices = _drawn(spec, labels, n, m, rng, n_classes, slowness, seed)
        return Shards(indices.astype(np.int64), offsets)
    pool, rest = split_pool(labels, claims, n, n_classes)
    out = np.empty((n, m), np.int64)
    if rest.size:
        speed = None if slowness is None else slowness[rest]
        local = _drawn(spec, labels[pool], rest.size, m, rng, n_classes, speed, seed)
        out[rest] = pool[local].reshape(rest.size, m)
    for claim in claims:
        members = np.flatnonzero(np.isin(labels, claim.classes))
        workers = np.asarray(claim.workers, np.int64)
        out[workers] = members[rng.integers(0, members.size, size=(workers.size, m))]
    return Shards(out.ravel(), offsets)


def _drawn(spec, labels, n, m, rng, n_classes, slowness, seed) -> np.ndarray:
    """The ``n * m`` indices (into ``labels``) of ``n`` workers' shards, in worker order."""
    if isinstance(spec, Iid):
        indices = rng.integers(0, labels.size, size=(n, m)).ravel()
    else:
        counts_global = np.bincount(labels, minlength=n_classes)
        present = np.flatnonzero(counts_global)
        if isinstance(spec, InnerDirichlet):
            concentration = class_alpha(spec.alpha, n_classes, present)
        else:  # Dirichlet's deprecated reading: Dirichlet(alpha p), concentrations sum alpha
            concentration = spec.alpha * (counts_global[present] / labels.size)
        indices = _dirichlet_sampled(concentration, labels, n, m, rng, n_classes)
    if slowness is not None:
        indices = _by_speed_sampled(spec, indices, labels, n, m, n_classes, slowness, seed)
    return indices


def _dirichlet_sampled(
    concentration: np.ndarray,
    labels: np.ndarray,
    n: int,
    m: int,
    rng: np.random.Generator,
    n_classes: int,
) -> np.ndarray:
    """Each client's ``m`` indices: its mix ~ Dirichlet(concentration) over the classes
    present, multinomial counts, examples uniform within a class (with replacement)."""
    counts_global = np.bincount(labels, minlength=n_classes)
    present = np.flatnonzero(counts_global)
    mix = rng.dirichlet(concentration, size=n)  # [n, classes present]
    counts = rng.multinomial(m, mix)  # [n, classes present], rows sum to m
    order = np.argsort(labels, kind="stable")
    ends = np.cumsum(counts_global)
    out = np.empty((n, m), np.int64)
    filled = np.zeros(n, np.int64)
    for j, k in enumerate(present):
        members = order[ends[k] - counts_global[k] : ends[k]]
        take = counts[:, j]
        total = int(take.sum())
        if not total:
            continue
        drawn = members[rng.integers(0, members.size, total)]
        rows = np.repeat(np.arange(n), take)
        cols = filled[rows] + (np.arange(total) - np.repeat(np.cumsum(take) - take, take))
        out[rows, cols] = drawn
        filled += take
    return rng.permuted(out, axis=1).ravel()  # each shard in a random order, not by class


def _by_speed_sampled(spec, indices, labels, n, m, n_classes, slowness, seed) -> np.ndarray:
    """Shards relabelled so that the most skewed (Dirichlet) shards go to the slowest
    workers, or to a copula's ranking of them (`_order`); equal-sized IID shards
    keep their order (every shard is as large)."""
    if isinstance(spec, Iid):
        return indices
    order: SpeedOrder = spec.order
    owner = np.repeat(np.arange(n), m)
    hist = histogram(owner, labels[indices], n, n_classes)
    skew = tv_distance(hist, np.bincount(labels, minlength=n_classes))
    taker = shard_owners(skew, np.asarray(slowness), order, seed)  # shard s -> worker
    source = np.empty(n, np.int64)
    source[taker] = np.arange(n)  # worker w takes shard source[w]
    return indices.reshape(n, m)[source].ravel()
