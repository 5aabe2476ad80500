"""Medians without sorting, for per-commit diagnostics.

Sorting 164k float32 values under XLA on a CPU takes a hundred times a GEM commit
(benchmarks/RESULTS.md, "Figures the code cites"), so medians are found without sorting.

:func:`binned_tree_medians` (what GEM's diagnostics use) counts values of a known
range ``[0, high]`` into ``bins`` equal bins plus exact bins for the two ends
(and one for NaN), a scatter-add per leaf: one pass over the data. The medians
are then read from the per-leaf histograms and their sum. The result is within
half a bin of the exact median, and exact wherever both middle values sit at an
end of the range (see :func:`histogram_medians` for the bound).

:func:`tree_medians` is exact, identical to ``np.median``: a bisection over the
order-preserving int32 image of the floats. Each of its 32 rounds is one fused
compare-and-count pass over the data, overall and per leaf, so it costs about
sixty passes where :func:`binned_tree_medians` needs one (its scatter-add costs
about five elementwise passes on a CPU). For a pytree the keys are computed once
per leaf and concatenated for the overall median (one reduction per round beats
one per leaf: on a CPU the per-kernel overhead matters as much as the
arithmetic); short leaves are sorted instead, which is cheaper than 32 passes
for them.

:func:`bisected_tree_medians` (GEM's diagnostics for models of at most 256
parameters) is the same bisection for small trees with masks: both middle values of
the tree and of every leaf in one loop of 32 rounds, exact and cheap to vmap.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# 32 halvings of the int32 range pin one key.
_ROUNDS = 32
# float32 holds every integer count up to this exactly.
_F32_EXACT = 2**24
# Leaves with at most this many elements are sorted rather than bisected.
_SORT_AT_MOST = 512
# Histogram bins per block when looking up a rank.
_BLOCK = 32
# Interleaved copies of a histogram while counting (binned_histograms); a power of two.
_LANES = 4


def order_key(x: jax.Array) -> jax.Array:
    """Maps float values (<= 32 bits) to int32 keys in the same order.

    Non-negative floats already sort like their bit patterns; for negative
    floats the magnitude bits are flipped so that larger magnitudes get smaller
    keys (``-0.0`` lands just below ``0.0``; NaNs at the ends, handled apart).
    """
    bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)
    return jnp.where(bits < 0, bits ^ jnp.int32(0x7FFFFFFF), bits)


def _from_key(key: jax.Array) -> jax.Array:
    """The float32 whose :func:`order_key` is ``key`` (the map is its own inverse on bits)."""
    bits = jnp.where(key < 0, key ^ jnp.int32(0x7FFFFFFF), key)
    return lax.bitcast_convert_type(bits, jnp.float32)


def _count_le(keys: jax.Array, bound: jax.Array) -> jax.Array:
    """Number of keys <= bound, as an exact count."""
    if keys.size <= _F32_EXACT:
        # A float sum vectorises better on CPU than an int32 one (benchmarks/RESULTS.md).
        return jnp.sum(jnp.where(keys <= bound, jnp.float32(1), jnp.float32(0)))
    return jnp.sum(keys <= bound, dtype=jnp.int32)


def _midpoint(lo: jax.Array, hi: jax.Array) -> jax.Array:
    """floor((lo + hi) / 2) in int32 without overflow."""
    return (lo >> 1) + (hi >> 1) + (lo & hi & 1)


def _lower_middle(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Key of the lower middle element of flat ``keys``, and how many keys are <= it.

    Bisection for the smallest key with at least ``(n - 1) // 2 + 1`` keys at or
    below it; that key always belongs to an element. The count at the upper
    bound is carried along, so ties need no extra pass afterwards.
    """
    n = keys.size
    target = (n - 1) // 2 + 1

    def body(_, bounds):
        lo, hi, count_hi = bounds
        mid = _midpoint(lo, hi)
        count = _count_le(keys, mid)
        enough = count >= target
        return (
            jnp.where(enough, lo, mid + 1),
            jnp.where(enough, mid, hi),
            jnp.where(enough, count, count_hi),
        )

    lo0 = jnp.int32(jnp.iinfo(jnp.int32).min)
    hi0 = jnp.int32(jnp.iinfo(jnp.int32).max)
    count0 = jnp.asarray(n, jnp.float32 if n <= _F32_EXACT else jnp.int32)  # all keys <= hi0
    lo, _, count = lax.fori_loop(0, _ROUNDS, body, (lo0, hi0, count0))
    return lo, count


def _median(values: jax.Array, keys: jax.Array, has_nan: jax.Array) -> jax.Array:
    """Median of the flat float32 ``values`` given their keys."""
    n = values.size
    lower_key, count_le = _lower_middle(keys)
    lower = _from_key(lower_key)
    if n % 2:
        median = lower
    else:
        # The upper middle is the next larger value unless ties reach past the middle.
        above = jnp.min(jnp.where(keys <= lower_key, jnp.inf, values))
        median = (lower + jnp.where(count_le >= n // 2 + 1, lower, above)) / 2
    return jnp.where(has_nan, jnp.nan, median)


def _check(leaves: Sequence[jax.Array]) -> None:
    for leaf in leaves:
        if (
            leaf.size == 0
            or not jnp.issubdtype(leaf.dtype, jnp.floating)
            or (jnp.finfo(leaf.dtype).bits > 32)
        ):
            raise ValueError(
                f"median: leaves must be non-empty floats of at most 32 bits, "
                f"got shape {leaf.shape} dtype {leaf.dtype}"
            )


def tree_medians(leaves: Sequence[jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Exact medians of all elements together and of each leaf, as ``np.median``.

    Args:
      leaves: non-empty float arrays of at most 32 bits (e.g. ``jax.tree.leaves(pi)``).

    Returns:
      ``(overall, per_leaf)``: a float32 scalar and a float32 array of shape
      ``(len(leaves),)`` in the order given.
    """
    _check(leaves)
    flats = [jnp.ravel(leaf).astype(jnp.float32) for leaf in leaves]
    keys = [order_key(f) for f in flats]
    nans = [jnp.any(jnp.isnan(f)) for f in flats]
    # One flat copy for the whole tree: a single reduction per round instead of one per leaf.
    every = jnp.concatenate(flats) if len(flats) > 1 else flats[0]
    every_key = jnp.concatenate(keys) if len(keys) > 1 else keys[0]
    overall = _median(every, every_key, jnp.any(jnp.stack(nans)))
    per_leaf = [
        _median(f, k, nan) if f.size > _SORT_AT_MOST else jnp.median(f)
        for f, k, nan in zip(flats, keys, nans, strict=True)
    ]
    return overall, jnp.stack(per_leaf)


def binned_histograms(
    leaves: Sequence[jax.Array],
    high: float,
    bins: int,
    masks: Sequence[jax.Array] | None = None,
    token: jax.Array | None = None,
) -> jax.Array:
    """Per-leaf histograms of values in ``[0, high]``, counted by one scatter-add per leaf.

    Args:
      leaves: float arrays of at most 32 bits (e.g. ``jax.tree.leaves(pi)``), at least
        one; an array may have no elements.
      high: the upper end of the range, > 0.
      bins: the number of equal inner bins over ``(0, high)``, >= 1.
      masks: optional bool arrays shaped like the leaves: only entries where True count.
      token: optional traced int32 scalar >= 0 known only at run time (e.g. the commit
        index). Given, each entry's copy of the histogram is computed from it along with
        the entry's bin; without it, XLA computes the pattern of copies once, as a constant
        array as long as the leaf, and reads it back on every call (a cost per commit of
        GEM on the paper's CNN: benchmarks/RESULTS.md). The counts are the same.

    Returns:
      int32 ``(len(leaves), bins + 3)``; per leaf, column 0 counts the values <= 0,
      columns ``1 .. bins`` the values ``v`` in ``(0, high)``, in bin
      ``1 + floor(v * bins / high)``, column ``bins + 1`` the values >= high, and the
      last column the NaNs. A value outside ``[0, high]`` thus counts as the nearest end.
    """
    _check_range(leaves, high, bins)
    masks = [None] * len(leaves) if masks is None else masks
    # One more column for the masked-out entries, sliced off at the end: every index is in
    # bounds, so the scatter needs no bounds handling (no extra pass). A scatter per leaf
    # reads each leaf's codes where they were computed; one scatter over all leaves would
    # first copy them into one array (GEM's commit on the CNN, timed alone, takes a fifth
    # less time with a scatter per leaf).
    # Consecutive entries count into _LANES interleaved copies of the histogram, summed at
    # the end: most entries share a bin (pi clipped at 0 or pi_max), and a scatter-add into
    # one bin waits for its previous store (a third faster on the CNN's largest leaf).
    scale = jnp.float32(bins / high)
    width = bins + 4
    rows = []
    for leaf, mask in zip(leaves, masks, strict=True):
        v = jnp.ravel(leaf).astype(jnp.float32)
        inner = 1 + jnp.clip(jnp.floor(v * scale), 0, bins - 1).astype(jnp.int32)
        code = jnp.where(v <= 0, 0, jnp.where(v >= high, bins + 1, inner))
        code = jnp.where(jnp.isnan(v), bins + 2, code)
        if mask is not None:
            code = jnp.where(jnp.ravel(mask), code, bins + 3)
        index = jax.lax.iota(jnp.int32, v.size)
        if token is not None:  # + 0, unknown to XLA: the lanes are computed, not stored
            index = index + jnp.minimum(token, 0)
        lane = index & (_LANES - 1)
        counts = jnp.zeros(_LANES * width, jnp.int32)
        counts = counts.at[code + lane * width].add(1, mode="promise_in_bounds")
        rows.append(counts.reshape(_LANES, width).sum(0))
    return jnp.stack(rows)[:, :-1]


def histogram_medians(histograms: jax.Array, high: float) -> jax.Array:
    """Medians read from histograms laid out as :func:`binned_histograms` makes them.

    For each row, with ``c`` the values counted in it: NaN if one of them is NaN or if
    there are none (the median of an empty set), else the mean of the estimates of the
    lower and upper middle values (ranks ``(c - 1) // 2`` and ``c // 2``), each estimated
    by the middle of its bin: 0 and ``high`` exactly for the end bins,
    ``(k - 1/2) * high / bins`` for inner bin k.

    Error bound: every value lies within half a bin of the estimate of its bin, so
    ``|estimate - np.median(clip(values, 0, high))| <= high / (2 * bins)``, plus float32
    rounding (the bin index of a value within ~1e-7 of a bin edge may be off by one, the
    midpoint and the mean are rounded): in all ``<= high * (1 / (2 * bins) + 2**-20)``. The
    estimate is exact when both middle values are 0 or ``high``.

    Args:
      histograms: int32 ``(rows, bins + 3)``.
      high: the range's upper end used to count them.

    Returns:
      float32 ``(rows,)``.
    """
    bins = histograms.shape[-1] - 3
    # Bins in blocks: a running sum over the blocks, then within one block. A running sum
    # over all bins costs XLA on a CPU several times more, for a few thousand numbers.
    n_blocks = -(-(bins + 2) // _BLOCK)
    padding = ((0, 0), (0, n_blocks * _BLOCK - bins - 2))
    blocks = jnp.pad(histograms[:, : bins + 2], padding).reshape(-1, n_blocks, _BLOCK)
    up_to_block = jnp.cumsum(blocks.sum(-1), axis=1)
    count = up_to_block[:, -1]

    def value_at(rank):
        # The bin holding the value of this rank: the first whose running count exceeds it.
        k = jnp.sum(up_to_block <= rank[:, None], axis=1)
        k_row = jnp.minimum(k, n_blocks - 1)[:, None]
        before = jnp.where(k > 0, jnp.take_along_axis(up_to_block, k_row - 1, 1)[:, 0], 0)
        inside = jnp.cumsum(jnp.take_along_axis(blocks, k_row[:, :, None], 1)[:, 0], axis=1)
        b = k * _BLOCK + jnp.sum(inside <= (rank - before)[:, None], axis=1)
        inner = (b.astype(jnp.float32) - 0.5) * jnp.float32(high / bins)
        return jnp.where(b == 0, 0.0, jnp.where(b == bins + 1, jnp.float32(high), inner))

    median = (value_at((count - 1) // 2) + value_at(count // 2)) / 2
    return jnp.where((histograms[:, -1] > 0) | (count == 0), jnp.nan, median)


def bisected_tree_medians(
    leaves: Sequence[jax.Array], masks: Sequence[jax.Array] | None = None
) -> tuple[jax.Array, jax.Array]:
    """Exact medians of all (unmasked) values together and of each leaf, for small trees.

    One bisection over the int32 order keys (:func:`order_key`) finds both middle values of
    every row (the whole tree and each leaf) at once: 32 rounds, each one fused
    compare-and-count over ``(leaves + 1) x 2 x n`` entries. For a few hundred values this
    costs less than the bins of a histogram (:func:`binned_tree_medians`), a sort (under XLA
    on a CPU, a comparator call per comparison) or pairwise ranks (``n**2`` comparisons,
    slower from 100 values on: benchmarks/RESULTS.md), and it vmaps well.
    Identical to ``np.median`` of the unmasked values (but where the mean of the two middle
    values is subnormal: XLA on a CPU flushes it to zero); NaN where one of them is NaN or
    where none is left.

    Args:
      leaves: float arrays of at most 32 bits; an array may have no elements.
      masks: optional bool arrays like the leaves: only entries where True count.

    Returns:
      ``(overall, per_leaf)``: a float32 scalar and float32 ``(len(leaves),)``.
    """
    if not leaves:
        raise ValueError("bisected medians: need at least one leaf, got none")
    flats = [jnp.ravel(leaf).astype(jnp.float32) for leaf in leaves]
    if masks is None:
        keeps = [jnp.ones(f.shape, bool) for f in flats]
    else:
        keeps = [jnp.ravel(m) for m in masks]
    values, keep = jnp.concatenate(flats), jnp.concatenate(keeps)
    # Both from isnan: `keep & ~nan` would read simpler, but XLA then fuses the loop's input
    # worse (benchmarks/RESULTS.md).
    counted = keep & ~jnp.isnan(values)
    nan = keep & jnp.isnan(values)
    if len(flats) == 1:  # one row: the leaf's median is the tree's
        members, nans = counted[None], nan[None]
    else:  # the whole tree, then each leaf (a static [leaves + 1, n] selection)
        leaf_of = np.repeat(np.arange(len(flats)), [f.size for f in flats])
        rows = np.concatenate(
            [np.ones((1, values.size), bool), leaf_of == np.arange(len(flats))[:, None]]
        )
        members, nans = rows & counted[None], rows & nan[None]
    medians = _bisected_medians(order_key(values), members)
    medians = jnp.where(jnp.any(nans, axis=1), jnp.nan, medians)
    return medians[0], medians[-len(flats) :]


def _bisected_medians(keys: jax.Array, members: jax.Array) -> jax.Array:
    """Medians of the keys each row of ``members`` ([rows, n] bool) selects, as float32
    [rows]; NaN for an empty row. Per row and middle rank, the bisection finds the smallest
    key with at least rank + 1 selected keys at or below it, which is always the key of a
    selected element."""
    count = jnp.sum(members, axis=1, dtype=jnp.int32)
    at_least = jnp.maximum(count, 1)
    # 1 + the ranks of the lower and upper middle values: [rows, 2]
    targets = jnp.stack([(at_least - 1) // 2 + 1, at_least // 2 + 1], axis=1).astype(jnp.float32)

    def body(_, bounds):
        lo, hi = bounds
        mid = _midpoint(lo, hi)
        below = members[:, None, :] & (keys[None, None, :] <= mid[:, :, None])
        # A float sum vectorises better on CPU than an int32 one; exact below 2**24 entries.
        enough = jnp.sum(jnp.where(below, jnp.float32(1), jnp.float32(0)), axis=2) >= targets
        return jnp.where(enough, lo, mid + 1), jnp.where(enough, mid, hi)

    lo0 = jnp.full(targets.shape, jnp.iinfo(jnp.int32).min, jnp.int32)
    hi0 = jnp.full(targets.shape, jnp.iinfo(jnp.int32).max, jnp.int32)
    lo, _ = lax.fori_loop(0, _ROUNDS, body, (lo0, hi0))
    middle = _from_key(lo)
    return jnp.where(count == 0, jnp.nan, (middle[:, 0] + middle[:, 1]) / 2)


def binned_tree_medians(
    leaves: Sequence[jax.Array],
    high: float,
    bins: int = 1024,
    masks: Sequence[jax.Array] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Medians of all (unmasked) values together and of each leaf, within half a bin.

    A scatter-add over each leaf (:func:`binned_histograms`); the overall histogram is
    the sum of the leaves'. Each result is within ``high * (1 / (2 * bins) + 2**-20)`` of
    ``np.median`` of the leaf's (or all leaves') unmasked values clipped to ``[0, high]``,
    NaN where one of them is NaN or where none is left (see :func:`histogram_medians`).

    Args:
      leaves: float arrays of at most 32 bits.
      high: the upper end of the values' range, > 0.
      bins: inner bins over ``(0, high)``, >= 1.
      masks: optional bool arrays like the leaves: only entries where True count.

    Returns:
      ``(overall, per_leaf)``: a float32 scalar and float32 ``(len(leaves),)``.
    """
    hist = binned_histograms(leaves, high, bins, masks)
    medians = histogram_medians(jnp.concatenate([hist.sum(0, keepdims=True), hist]), high)
    return medians[0], medians[1:]


def _check_range(leaves: Sequence[jax.Array], high: float, bins: int) -> None:
    if not leaves:
        raise ValueError("binned medians: need at least one leaf, got none")
    if not high > 0:
        raise ValueError(f"binned medians: high must be > 0, got {high}")
    if int(bins) != bins or bins < 1:
        raise ValueError(f"binned medians: bins must be an integer >= 1, got {bins}")
    for leaf in leaves:
        if not jnp.issubdtype(leaf.dtype, jnp.floating) or jnp.finfo(leaf.dtype).bits > 32:
            raise ValueError(
                f"binned medians: leaves must be floats of at most 32 bits, "
                f"got shape {leaf.shape} dtype {leaf.dtype}"
            )
