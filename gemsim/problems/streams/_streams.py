"""Per-worker shuffled mini-batch streams, computed per (worker, step) in O(batch).

Worker w's step s falls in epoch ``e = s // steps_per_epoch``; the epoch's
order is a pseudo-random permutation of the training set keyed by
``fold_in(fold_in(stream_key, w), e)``, and the step takes positions
``[(s % steps_per_epoch) * b, ... + b)`` of it. The ``n % b`` examples left
over in an epoch are skipped (different ones each epoch).

Why not ``jax.random.permutation``: it sorts the whole training set on every
call, which costs as much as the gradient itself (benchmarks/RESULTS.md). Instead
the permutation is evaluated only at the b positions needed: a keyed Feistel
network is a bijection on ``[0, 2**(2*half))``, and "cycle walking" (re-encrypting
values that land outside ``[0, n)``) turns it into a bijection on ``[0, n)``. Every epoch is
therefore exactly a permutation, and nothing depends on how many workers
exist or in which order batches are requested.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["batch_positions", "permute_indices", "shard_batch_positions", "step_key"]

ROUNDS = 6


def _mix32(x: jax.Array) -> jax.Array:
    # A 32-bit integer finaliser with good avalanche (each input bit flips
    # about half of the output bits); uint32 arithmetic wraps modulo 2**32.
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _feistel(x: jax.Array, round_keys: jax.Array, half_bits: int) -> jax.Array:
    mask = jnp.uint32((1 << half_bits) - 1)
    left, right = x >> half_bits, x & mask
    for r in range(ROUNDS):
        left, right = right, left ^ (_mix32(right ^ round_keys[r]) & mask)
    return (left << half_bits) | right


def permute_indices(key: jax.Array, n: int, positions: jax.Array) -> jax.Array:
    """The images of ``positions`` under a keyed pseudo-random permutation of ``[0, n)``.

    Args:
      key: selects the permutation.
      n: size of the permuted range (static, 1 <= n < 2**32).
      positions: int array of values in ``[0, n)``.

    Returns:
      int32 array like ``positions``; distinct positions give distinct values.
    """
    half_bits = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
    round_keys = jax.random.bits(key, (ROUNDS,), jnp.uint32)
    limit = jnp.uint32(n)
    walk = lambda y: jnp.where(y >= limit, _feistel(y, round_keys, half_bits), y)
    y = _feistel(positions.astype(jnp.uint32), round_keys, half_bits)
    y = lax.while_loop(lambda y: jnp.any(y >= limit), walk, y)
    return y.astype(jnp.int32)


def batch_positions(
    stream_key: jax.Array, worker: jax.Array, step: jax.Array, n: int, batch_size: int
) -> jax.Array:
    """Training-set indices of worker ``worker``'s mini-batch number ``step``.

    Args:
      stream_key: the problem's shuffling key.
      worker: worker id (int scalar, may be traced).
      step: the worker's own step counter from 0 (int scalar, may be traced).
      n: training-set size (static).
      batch_size: b (static, <= n).

    Returns:
      int32 ``[batch_size]`` indices.
    """
    steps_per_epoch = n // batch_size
    epoch, offset = jnp.divmod(jnp.asarray(step, jnp.int32), steps_per_epoch)
    key = jax.random.fold_in(jax.random.fold_in(stream_key, worker), epoch)
    positions = offset * batch_size + jnp.arange(batch_size, dtype=jnp.int32)
    return permute_indices(key, n, positions)


def _bit_length(x: jax.Array) -> jax.Array:
    """The bit length of uint32 ``x`` (0 for 0), traced."""
    return jnp.uint32(32) - lax.clz(x)


def _feistel_traced(x: jax.Array, round_keys: jax.Array, half_bits: jax.Array) -> jax.Array:
    mask = (jnp.uint32(1) << half_bits) - jnp.uint32(1)
    left, right = x >> half_bits, x & mask
    for r in range(ROUNDS):
        left, right = right, left ^ (_mix32(right ^ round_keys[r]) & mask)
    return (left << half_bits) | right


def permute_indices_traced(key: jax.Array, n: jax.Array, positions: jax.Array) -> jax.Array:
    """`permute_indices` for a size ``n`` known only at run time (a worker's shard): the
    Feistel network's width follows ``n`` (traced), so cycle walking takes at most a few
    rounds whatever the size.

    Args:
      key: selects the permutation.
      n: size of the permuted range, traced int scalar >= 1 (< 2**31).
      positions: int array of values in ``[0, n)``.
    """
    limit = jnp.asarray(n).astype(jnp.uint32)
    bits = _bit_length(jnp.maximum(limit, jnp.uint32(2)) - jnp.uint32(1))
    half_bits = jnp.maximum(jnp.uint32(1), (bits + jnp.uint32(1)) // jnp.uint32(2))
    round_keys = jax.random.bits(key, (ROUNDS,), jnp.uint32)
    walk = lambda y: jnp.where(y >= limit, _feistel_traced(y, round_keys, half_bits), y)
    y = _feistel_traced(positions.astype(jnp.uint32), round_keys, half_bits)
    y = lax.while_loop(lambda y: jnp.any(y >= limit), walk, y)
    return y.astype(jnp.int32)


def shard_batch_positions(
    stream_key: jax.Array, worker: jax.Array, step: jax.Array, size: jax.Array, batch_size: int
) -> jax.Array:
    """Positions in worker ``worker``'s shard (of ``size`` examples, traced) of its mini-batch
    number ``step``: epochs over the shard, each a keyed permutation of it, as
    `batch_positions` does over the whole training set (``size % batch_size`` examples left
    over in an epoch, different ones each epoch).

    Returns:
      int32 ``[batch_size]`` positions in ``[0, size)``.
    """
    size = jnp.asarray(size, jnp.int32)
    steps_per_epoch = jnp.maximum(size // batch_size, 1)
    epoch, offset = jnp.divmod(jnp.asarray(step, jnp.int32), steps_per_epoch)
    key = jax.random.fold_in(jax.random.fold_in(stream_key, worker), epoch)
    positions = offset * batch_size + jnp.arange(batch_size, dtype=jnp.int32)
    return permute_indices_traced(key, size, positions)


def step_key(root: jax.Array, worker: jax.Array, step: jax.Array) -> jax.Array:
    """The key of one (worker, step), e.g. for dropout or gradient noise."""
    return jax.random.fold_in(jax.random.fold_in(root, worker), step)
