"""Shard sizes: equal, drawn from a law (quantity skew), or a fixed function of the worker's
id (Flower Datasets' linear, square and exponential partitioners); and the `Quantity`
partition that cuts the shuffled training set into them."""

from __future__ import annotations

import numpy as np

from ._cuts import even_pieces, require_examples
from ._partition_base import IdSizes, PartitionError, SizeLaw
from ._specs import Quantity

__all__ = ["id_sizes", "quantity_owners", "shard_sizes"]

_FUNCTIONS = {"linear": lambda x: x, "square": np.square, "exponential": np.exp}


def quantity_owners(spec: Quantity, n_train: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Each example's worker: the shuffled training set cut into the spec's sizes."""
    sizes = shard_sizes(spec.sizes, n_train, m, rng)
    owner = np.empty(n_train, np.int64)
    owner[rng.permutation(n_train)] = np.repeat(np.arange(m, dtype=np.int64), sizes)
    return owner


def shard_sizes(
    law: SizeLaw | IdSizes | None, n_train: int, m: int, rng: np.random.Generator
) -> np.ndarray:
    """int64 [m] summing to ``n_train``, each >= 1: equal (None; the larger first), Flower's
    sizes for an `IdSizes`, or one example each and the rest in proportion to m draws of a
    random law (largest remainder, ties to the lower worker)."""
    require_examples(n_train, m)
    if law is None:
        return np.bincount(even_pieces(n_train, m), minlength=m).astype(np.int64)
    if isinstance(law, IdSizes):
        return id_sizes(law, n_train, m)
    draws = np.asarray(law.sample(rng, m), dtype=np.float64)
    bad = ~(np.isfinite(draws) & (draws > 0))
    if draws.shape != (m,) or bad.any():
        shown = draws[bad][0] if draws.shape == (m,) else f"shape {draws.shape}"
        raise PartitionError(
            "sizes",
            f"{law!r} drew {shown}; allowed: a law of finite numbers > 0",
        )
    return 1 + _largest_remainder(draws * ((n_train - m) / draws.sum()), n_train - m)


def id_sizes(law: IdSizes, n_train: int, m: int) -> np.ndarray:
    """Flower's ``IdToSizeFncPartitioner`` sizes: worker w weighs f(w + 1) and holds
    ``floor(share * n_train)``, the last worker the rest."""
    x = np.linspace(1, m, m)
    with np.errstate(over="ignore", invalid="ignore"):
        units = _FUNCTIONS[law.law](x)
    if not np.isfinite(units.sum()):  # e^m overflows: the same shares, scaled down
        units = np.exp(x - x[-1])
    sizes = np.array(units / units.sum() * n_train, dtype=np.int64)
    sizes[-1] += n_train - sizes.sum()
    empty = np.flatnonzero(sizes < 1)
    if empty.size:
        raise PartitionError(
            "law",
            f"{law.law} sizes give worker {empty[0]} no example ({empty.size} of the {m} "
            f"workers hold none of the {n_train}): use fewer workers or a flatter law",
        )
    return sizes


def _largest_remainder(quotas: np.ndarray, total: int) -> np.ndarray:
    """Integers summing to ``total``: the quotas' floors, plus one for the largest remainders
    (ties to the lower index)."""
    base = np.floor(quotas).astype(np.int64)
    short = total - int(base.sum())
    base[np.argsort(base - quotas, kind="stable")[:short]] += 1
    return base
