"""The two rounding boundaries, `rules.stored` (GEM's `pi * dtheta`) and the engine's
`_materialize` (a worker's work): a product added to a sum is rounded on its own, as numpy
rounds it, in a fused program (XLA on a CPU fuses `c + a * b` into one fused multiply-add
where nothing stops it), alone and vmapped with a token shared by the batch, as the engine
gives it. `_materialize` is a loop of no iterations, and XLA forwards a loop's unchanged
state past the loop: written that way the boundary vanishes, which the first test catches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim.engine._step import _materialize
from gemsim.rules import stored

pytestmark = pytest.mark.bitexact

BOUNDARIES = pytest.mark.parametrize("boundary", [stored, _materialize], ids=["stored", "work"])


def _operands(n=4096, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.normal(size=n).astype(np.float32) for _ in range(3))
    two = c + a * b  # numpy: the product rounded to float32, then the sum
    once = (c.astype(np.float64) + a.astype(np.float64) * b.astype(np.float64)).astype(np.float32)
    # The data can tell the two apart: a fused multiply-add rounds once.
    assert np.mean(two != once) > 0.1
    return a, b, c, two, once


@BOUNDARIES
def test_a_product_is_rounded_before_the_sum_it_feeds(boundary):
    a, b, c, two, once = _operands()
    fused = jax.jit(lambda a, b, c, t: c + boundary(a * b, t))
    np.testing.assert_array_equal(np.asarray(fused(a, b, c, jnp.int32(7))), two)
    rows = lambda x: x.reshape(8, -1)
    batched = jax.jit(jax.vmap(lambda a, b, c, t: c + boundary(a * b, t), in_axes=(0, 0, 0, None)))
    got = batched(rows(a), rows(b), rows(c), jnp.int32(7))
    np.testing.assert_array_equal(np.asarray(got).ravel(), two)
    # Without it, the same program rounds once wherever XLA fuses the two (why it exists):
    # whichever XLA does, the result is one of the two roundings, entry by entry.
    plain = np.asarray(jax.jit(lambda a, b, c: c + a * b)(a, b, c))
    assert np.all((plain == two) | (plain == once))


@BOUNDARIES
def test_a_tree_comes_back_unchanged(boundary):
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.array([-0.0, jnp.inf, jnp.nan])}
    out = jax.jit(boundary)(tree, jnp.int32(0))
    for x, y in zip(jax.tree.leaves(tree), jax.tree.leaves(out), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert np.array_equal(np.signbit(x), np.signbit(y))
