"""Which worker takes which drawn shard when a partition ties speed and data (``order``), and
the rank correlation a partition achieves between its owners' slowness and their shards.

A partition draws its shards in an order of its own; `Order.BY_SPEED` then ranks both sides:
the most skewed shards (label partitions: the largest total-variation distance from the
training set's label distribution) or the largest (the others) go to the slowest workers,
ties to the lower index on either side. `BySpeed(rho)` sets the strength of that tie with a
Gaussian copula (Nelsen 2006, An Introduction to Copulas). Worker w, at position ``p_w`` of
the slowest-first ranking of the m workers, has the normal score
``s_w = -Phi^-1((p_w + 1/2) / m)`` and the latent

    y_w = rho s_w + sqrt(1 - rho^2) e_w,    e_w ~ N(0, 1), independent of everything else,

and the shards, most skewed (largest) first, go to the workers by decreasing ``y`` (ties to
the lower ``p``). ``rho = 1`` gives ``y = s``: `Order.BY_SPEED`'s assignment exactly;
``rho = -1`` its reverse; ``rho = 0`` a ranking independent of speed. Between slowness and
the ordered quantity (both without ties) the rank correlation achieved is Spearman's rho of
the copula, ``(6 / pi) asin(rho / 2)`` (`copula_spearman`), with a standard error below
``1 / sqrt(m - 1)`` (its value at ``rho = 0``).

The ``e_w`` come from a stream of their own, ``SeedSequence(seed, spawn_key=(PARTITION_KEY,
ORDER_KEY))``: the shards drawn are the same whatever the order, and only their owners move.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ._partition_base import PARTITION_KEY, BySpeed, Claim, Order, Shards, SpeedOrder
from ._specs import LABEL_SPECS, PartitionSpec
from ._summary import histogram, tv_distance

__all__ = [
    "ORDER_KEY",
    "SpeedData",
    "copula_spearman",
    "order_strength",
    "ranks_by_speed",
    "shard_owners",
    "spearman",
    "speed_data",
    "speed_ranking",
]

ORDER_KEY = 0x0D
"""Second spawn key of the copula's stream, under `PARTITION_KEY` (part of the format)."""


def ranks_by_speed(order: SpeedOrder) -> bool:
    """Whether ``order`` hands the shards out by speed (it then needs the slowness)."""
    return order is not Order.DRAWN


def order_strength(order: SpeedOrder) -> float | None:
    """The rho an order ties speed and data with: None in drawn order, 1 for `by_speed`."""
    if isinstance(order, BySpeed):
        return order.rho
    return None if order is Order.DRAWN else 1.0


def speed_ranking(slowness: np.ndarray, order: SpeedOrder, seed: int) -> np.ndarray:
    """The workers in the order they take the shards, the most skewed (largest) first: by
    decreasing slowness for `Order.BY_SPEED`, by the copula's latent for `BySpeed`."""
    m = slowness.size
    index = np.arange(m)
    slowest_first = np.lexsort((index, -slowness))
    if not isinstance(order, BySpeed):
        return slowest_first
    from scipy.special import ndtri  # what a partition without rho never needs

    position = np.empty(m, np.int64)
    position[slowest_first] = index
    score = -ndtri((position + 0.5) / m)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(PARTITION_KEY, ORDER_KEY)))
    noise = rng.standard_normal(m)
    latent = order.rho * score + math.sqrt(1.0 - order.rho * order.rho) * noise
    return np.lexsort((position, -latent))


def shard_owners(key: np.ndarray, slowness: np.ndarray, order: SpeedOrder, seed: int) -> np.ndarray:
    """``owner[s]``: the worker that takes drawn shard ``s``, shards ranked by decreasing
    ``key`` (skew or size; ties to the lower index) and workers by `speed_ranking`."""
    m = key.size
    shards = np.lexsort((np.arange(m), -key))
    owner = np.empty(m, np.int64)
    owner[shards] = speed_ranking(slowness, order, seed)
    return owner


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y`` (ties share their average rank); NaN
    where either is constant (or fewer than two values)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    rx, ry = _ranks(x) - (x.size + 1) / 2, _ranks(y) - (y.size + 1) / 2
    return float(np.dot(rx, ry) / math.sqrt(np.dot(rx, rx) * np.dot(ry, ry)))


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average (scipy's ``rankdata``, without importing
    ``scipy.stats``: a second and a half at `gemsim trace`'s start)."""
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, x.size])
    average = starts + (counts + 1) / 2  # 1-based mean of ranks starts+1 .. starts+counts
    ranks = np.empty(x.size, np.float64)
    ranks[order] = np.repeat(average, counts)
    return ranks


def copula_spearman(rho: float) -> float:
    """Spearman's rho of a Gaussian copula of correlation ``rho``: ``(6 / pi) asin(rho / 2)``
    (Kruskal 1958), the rank correlation `BySpeed(rho)` targets."""
    return 6.0 / math.pi * math.asin(rho / 2.0)


class SpeedData(NamedTuple):
    """The rank correlation a partition achieves between its owners' slowness and their
    shards' label skew (total-variation distance from the label distribution; an empty
    shard counts as the least skewed) or size."""

    quantity: str
    """``"label skew"`` (label partitions, or groups holding classes) or ``"size"``."""
    spearman: float
    """Over every owner (NaN where slowness or the quantity is constant)."""
    owners: int
    rho: float | None
    """The order's strength (`order_strength`); None in drawn order."""
    ranked_spearman: float
    """Over the owners the order ranks (those in no claim), with the skew measured from the
    unclaimed examples' label distribution, as the order ranks it; NaN in drawn order."""
    ranked: int
    """How many owners the order ranks (0 in drawn order)."""


def speed_data(
    spec: PartitionSpec | None,
    claims: Sequence[Claim],
    slowness: np.ndarray,
    shards: Shards,
    labels: np.ndarray,
    n_classes: int,
) -> SpeedData:
    """What `SpeedData` says of ``shards``, drawn by ``spec`` and ``claims`` for owners of
    the given slowness (one per owner)."""
    slowness = np.asarray(slowness, np.float64)
    n = shards.n_workers
    by_class = spec is None or isinstance(spec, LABEL_SPECS)
    label_key = by_class or bool(claims)
    owner = np.repeat(np.arange(n, dtype=np.int64), shards.sizes)
    hist = histogram(owner, labels[shards.indices], n, n_classes)
    counts = np.bincount(labels, minlength=n_classes)
    sizes = shards.sizes.astype(np.float64)
    key = _skew(hist, counts) if label_key else sizes
    rho = None if spec is None else order_strength(spec.order)
    ranked_r, ranked = math.nan, 0
    if rho is not None:
        in_claim = np.zeros(n, bool)
        for claim in claims:
            in_claim[list(claim.workers)] = True
            counts[list(claim.classes)] = 0  # the pool's labels: what the order ranks by
        rest = np.flatnonzero(~in_claim)
        ranked_key = _skew(hist[rest], counts) if by_class else sizes[rest]
        ranked_r, ranked = spearman(slowness[rest], ranked_key), int(rest.size)
    quantity = "label skew" if label_key else "size"
    return SpeedData(quantity, spearman(slowness, key), n, rho, ranked_r, ranked)


def _skew(hist: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.nan_to_num(tv_distance(hist, counts), nan=-1.0)
