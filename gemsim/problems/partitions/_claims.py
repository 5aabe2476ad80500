"""The claims of a partition (groups of workers that alone hold some classes) checked, the
pool of examples and workers they leave to the spec, and the overlapping shards of no
partition."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._cuts import offsets
from ._partition_base import Claim, PartitionError, Shards
from ._specs import FromFile, Groups, PartitionSpec

__all__ = ["check_claims", "split_pool", "whole"]


def check_claims(
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


def split_pool(
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


def whole(
    labels: np.ndarray, claims: tuple[Claim, ...], pool: np.ndarray, rest: np.ndarray, n: int
) -> Shards:
    """No partition: overlapping shards (see `partition`)."""
    blocks = [(rest, pool)]
    blocks += [(np.asarray(c.workers), np.flatnonzero(np.isin(labels, c.classes))) for c in claims]
    sizes = np.zeros(n, np.int64)
    for workers, examples in blocks:
        sizes[workers] = examples.size
    starts = offsets(sizes)
    indices = np.empty(starts[-1], np.int64)
    for workers, examples in blocks:
        indices[starts[workers][:, None] + np.arange(examples.size)] = examples
    return Shards(indices, starts)
