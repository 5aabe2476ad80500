"""Exact medians without sorting, for per-commit diagnostics.

Sorting 164k float32 values under XLA on a CPU takes ~25 ms, far more than a
GEM commit (~0.2 ms), so medians are found by selection instead: a bisection
over the order-preserving int32 image of the floats. Each of its 32 rounds is
one fused compare-and-count pass over the data, and the result is the exact
order statistic, identical to ``np.median``: the middle value for an odd
count, the mean of the two middle values for an even count, and NaN as soon
as any value is NaN.

For a pytree the keys are computed once per leaf and concatenated for the
overall median (one reduction per round beats one per leaf: on a CPU the
per-kernel overhead matters as much as the arithmetic); each median runs its
own loop, which XLA schedules better here than one joint loop. Short leaves are
sorted instead, which is cheaper than 32 passes for them.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

# 32 halvings of the int32 range pin one key.
_ROUNDS = 32
# float32 holds every integer count up to this exactly.
_F32_EXACT = 2**24
# Leaves with at most this many elements are sorted rather than bisected.
_SORT_AT_MOST = 512


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
        # A float sum vectorises better on CPU than an int32 one (~1.4x faster here).
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
