"""The engine's boundary between a worker's work and the commit (`_step._materialize`): a
product computed before it is rounded on its own, as numpy rounds it, whatever the commit
adds it to, alone and vmapped with a token shared by the batch (as the batched and
many-runs executors call it). XLA forwards a loop's unchanged state past the loop: a
boundary written that way vanishes, and the sum becomes one fused multiply-add."""

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.engine._step import _materialize


def _operands(n=4096, seed=1):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.normal(size=n).astype(np.float32) for _ in range(3))
    two = c + a * b  # numpy: the product rounded to float32, then the sum
    once = (c.astype(np.float64) + a.astype(np.float64) * b.astype(np.float64)).astype(np.float32)
    assert np.mean(two != once) > 0.1  # the data tell the two roundings apart
    return a, b, c, two


def test_work_is_rounded_before_the_commit_adds_it():
    a, b, c, two = _operands()
    commit = jax.jit(lambda a, b, c, t: c + _materialize(a * b, t))
    np.testing.assert_array_equal(np.asarray(commit(a, b, c, jnp.int32(3))), two)
    rows = lambda x: x.reshape(8, -1)
    batched = jax.jit(
        jax.vmap(lambda a, b, c, t: c + _materialize(a * b, t), in_axes=(0, 0, 0, None))
    )
    got = batched(rows(a), rows(b), rows(c), jnp.int32(3))
    np.testing.assert_array_equal(np.asarray(got).ravel(), two)


def test_a_tree_of_work_comes_back_unchanged():
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.array([-0.0, jnp.inf, jnp.nan])}
    out = jax.jit(_materialize)(tree, jnp.int32(0))
    for x, y in zip(jax.tree.leaves(tree), jax.tree.leaves(out), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert np.array_equal(np.signbit(x), np.signbit(y))
