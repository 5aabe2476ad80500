"""The selection medians are exact: identical to np.median, ties, signs and NaN included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemsim.rules import tree_medians
from gemsim.rules._select import order_key


def _check(leaves):
    overall, per_leaf = jax.jit(tree_medians)([jnp.asarray(x) for x in leaves])
    want = np.median(np.concatenate([x.ravel() for x in leaves]))
    np.testing.assert_array_equal(overall, np.float32(want))
    np.testing.assert_array_equal(per_leaf, np.array([np.median(x) for x in leaves], np.float32))


@pytest.mark.parametrize("sizes", [(1,), (2,), (7, 8), (513,), (600, 1), (1000, 1001, 3)])
def test_matches_numpy_on_random_values(sizes):
    rng = np.random.default_rng(sum(sizes))
    _check([rng.normal(0, 3, n).astype(np.float32) for n in sizes])


def test_ties_and_clipped_values():
    rng = np.random.default_rng(0)
    clipped = [np.clip(rng.normal(1, 3, n), 0, 5).astype(np.float32) for n in (800, 1000, 50)]
    _check(clipped)
    _check([np.zeros(1000, np.float32), np.full(601, 5.0, np.float32)])
    _check([np.repeat(np.float32([0.0, 2.5]), 500)])  # even count, middle between two values


def test_signs_zeros_and_infinities():
    x = np.array([-0.0, 0.0, -1e-30, 1e-30, -np.inf, np.inf, -3.0, 2.0] * 80, np.float32)
    _check([x, x[:-1]])
    # The key's total order puts -0.0 before 0.0; np.sort may interleave them (equal values).
    ordered = np.float32([-np.inf, -3.0, -1e-30, -0.0, 0.0, 1e-30, 2.0, np.inf])
    keys = np.asarray(order_key(jnp.asarray(ordered))).astype(np.int64)
    assert np.all(np.diff(keys) > 0)


def test_nan_gives_nan_like_numpy():
    x = np.arange(1000, dtype=np.float32)
    x[17] = np.nan
    overall, per_leaf = tree_medians([jnp.asarray(x), jnp.ones(3)])
    assert np.isnan(overall) and np.isnan(per_leaf[0]) and per_leaf[1] == 1.0


# A few fixed lengths (around the sort/selection switch at 512) so jit compiles only a few times.
_values = st.floats(-1e6, 1e6, width=32, allow_subnormal=False)  # XLA on CPU flushes subnormals
_leaf = st.sampled_from([1, 4, 513, 700]).flatmap(
    lambda n: st.lists(st.one_of(_values, st.sampled_from([0.0, 1.0, 5.0])), min_size=n, max_size=n)
)


@settings(max_examples=40, deadline=None)
@given(_leaf)
def test_property_equals_numpy(leaf):
    _check([np.array(leaf, np.float32)])


def test_refuses_wider_floats_and_empty_leaves():
    with pytest.raises(ValueError, match="median"):
        tree_medians([jnp.zeros((0,))])
    with pytest.raises(ValueError, match="median"):
        tree_medians([jnp.zeros(3, jnp.int32)])
