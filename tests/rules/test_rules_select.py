"""Medians without sorting.

tree_medians is exact: identical to np.median, ties, signs and NaN included.
binned_tree_medians is within its documented bound of np.median on adversarial inputs (ties,
all equal, values on bin edges, at the ends, outside the range, masked entries, empty leaves,
NaN).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemsim.rules import tree_medians
from gemsim.rules._select import binned_tree_medians, bisected_tree_medians, order_key


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


# ---------------------------------------------------------------- binned medians


def _np_median(values, high, mask=None):
    """The exact reference: np.median (float64) of the kept values clipped to [0, high]."""
    v = values.ravel() if mask is None else values.ravel()[mask.ravel()]
    if v.size == 0:
        return np.nan
    return float(np.median(np.clip(v.astype(np.float64), 0, high)))


@functools.cache
def _binned_fn(high, bins):
    """One jitted function per range and number of bins: compiled once per input shapes."""
    return jax.jit(lambda ls, ms: binned_tree_medians(ls, high, bins, ms))


def _binned(leaves, high, bins, masks=None):
    as_jnp = lambda xs: None if xs is None else [jnp.asarray(x) for x in xs]
    overall, per_leaf = _binned_fn(high, bins)(as_jnp(leaves), as_jnp(masks))
    return float(overall), np.asarray(per_leaf)


def _check_binned(leaves, high, bins, masks=None):
    """Every median within the documented bound of numpy's, NaN exactly where numpy's is."""
    bound = high * (1 / (2 * bins) + 2**-20)
    overall, per_leaf = _binned(leaves, high, bins, masks)
    keep = None if masks is None else np.concatenate([m.ravel() for m in masks])
    want = [_np_median(np.concatenate([x.ravel() for x in leaves]), high, keep)]
    want += [_np_median(x, high, None if masks is None else m) for x, m in
             zip(leaves, masks or [None] * len(leaves), strict=True)]  # fmt: skip
    for got, exact in zip([overall, *per_leaf], want, strict=True):
        if np.isnan(exact):
            assert np.isnan(got)
        else:
            assert abs(got - exact) <= bound, (got, exact, bound)
    return overall, per_leaf


@pytest.mark.parametrize("bins", [1, 7, 1024])
def test_binned_within_half_a_bin_on_random_values(bins):
    rng = np.random.default_rng(bins)
    leaves = [np.clip(rng.normal(2, 2, n), 0, 5).astype(np.float32) for n in (1, 2, 999, 4000)]
    _check_binned(leaves, 5.0, bins)


def test_binned_is_exact_at_the_ends_and_with_ties():
    zeros, tops = np.zeros(7, np.float32), np.full(6, 5.0, np.float32)
    overall, per_leaf = _check_binned([zeros, tops], 5.0, 16)
    assert overall == 0.0 and list(per_leaf) == [0.0, 5.0]  # 7 zeros, 6 tops: middle is 0
    overall, _ = _binned([zeros[:6], tops], 5.0, 16)
    assert overall == 2.5  # 6 and 6: the mean of 0 and 5, exactly
    same = np.full(1001, 1.2345, np.float32)  # all equal, inside a bin
    _check_binned([same, same[:2]], 5.0, 1024)


def test_binned_at_bin_edges_and_adversarial_layouts():
    bins, high = 64, 5.0
    edges = (np.arange(bins + 1) * (high / bins)).astype(np.float32)
    nudged = np.concatenate([edges, np.nextafter(edges, 0), np.nextafter(edges, 10)])
    _check_binned([nudged.astype(np.float32)], high, bins)
    # The two middle values in far-apart bins (even count): the mean of two estimates.
    split = np.array([0.01] * 50 + [4.99] * 50, np.float32)
    _check_binned([split, split[::-1]], high, bins)
    # Mass at both ends with the middle in between, and middle values on a bin edge.
    ends = np.array([0.0] * 40 + [5.0] * 40 + [edges[17]] * 3, np.float32)
    _check_binned([ends, ends[:-1]], high, bins)


def test_binned_clips_values_outside_the_range():
    x = np.array([-3.0, -0.0, 7.0, 9.0, 2.0, 1e30, -np.inf, np.inf, 0.5], np.float32)
    _check_binned([x, x[:4]], 5.0, 128)


def test_binned_masks_exclude_entries_and_an_empty_leaf_is_nan():
    rng = np.random.default_rng(3)
    x = np.clip(rng.normal(1, 2, 3000), 0, 5).astype(np.float32)
    y = np.full(50, 5.0, np.float32)
    mx = rng.random(3000) < 0.4
    none = np.zeros(50, bool)
    overall, per_leaf = _check_binned([x, y], 5.0, 1024, [mx, none])
    assert np.isnan(per_leaf[1]) and np.isfinite(overall)
    overall, per_leaf = _binned([x, y], 5.0, 8, [np.zeros(3000, bool), none])
    assert np.isnan(overall) and np.all(np.isnan(per_leaf))  # the median of nothing
    # Excluded NaNs do not count; included ones make the median NaN, as in numpy.
    x_nan = x.copy()
    x_nan[~mx] = np.nan
    _check_binned([x_nan, y], 5.0, 1024, [mx, np.ones(50, bool)])
    x_nan[np.flatnonzero(mx)[0]] = np.nan
    overall, per_leaf = _check_binned([x_nan, y], 5.0, 1024, [mx, np.ones(50, bool)])
    assert np.isnan(overall) and np.isnan(per_leaf[0]) and per_leaf[1] == 5.0


def test_binned_empty_arrays_and_refusals():
    overall, per_leaf = _binned([np.zeros(0, np.float32), np.ones(3, np.float32)], 2.0, 4)
    assert np.isnan(per_leaf[0]) and overall == per_leaf[1] == pytest.approx(1.25)
    with pytest.raises(ValueError, match="high"):
        binned_tree_medians([jnp.ones(3)], 0.0)
    with pytest.raises(ValueError, match="bins"):
        binned_tree_medians([jnp.ones(3)], 1.0, 0)
    with pytest.raises(ValueError, match="at least one leaf"):
        binned_tree_medians([], 1.0)
    with pytest.raises(ValueError, match="32 bits"):
        binned_tree_medians([jnp.ones(3, jnp.int32)], 1.0)


_pi_values = st.one_of(
    st.floats(0.0, 5.0, width=32, allow_subnormal=False),
    st.sampled_from([0.0, 5.0, 2.5, 5.0 / 1024, 4.99999]),
)


def _pi_leaf(n):
    return st.lists(_pi_values, min_size=n, max_size=n).map(lambda x: np.array(x, np.float32))


# Fixed shapes, so that jit compiles once per number of bins.
@settings(max_examples=40, deadline=None)
@given(_pi_leaf(3), _pi_leaf(64), st.sampled_from([3, 1024]))
def test_property_binned_within_bound(short, long, bins):
    _check_binned([short, long], 5.0, bins)


# ---------------------------------------------------------------- bisected medians


def test_bisected_medians_equal_numpy_with_masks_ties_nans_and_empty_leaves():
    rng = np.random.default_rng(11)
    odd = rng.random(17).astype(np.float32)
    ties = np.array([2.0, 2.0, 2.0, 1.0, 3.0, 2.0], np.float32)
    with_nan = np.array([1.0, np.nan, 3.0], np.float32)
    masked_nan = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    empty = np.zeros(0, np.float32)
    leaves = [odd, ties, with_nan, masked_nan, empty, rng.random((4, 5)).astype(np.float32)]
    masks = [
        rng.random(17) < 0.6,
        np.ones(6, bool),
        np.ones(3, bool),
        np.array([True, False, True, True]),  # the NaN left out: a median of 1, 3, 4
        np.zeros(0, bool),
        np.zeros((4, 5), bool),  # everything left out: NaN
    ]
    fn = jax.jit(bisected_tree_medians)
    overall, per_leaf = fn([jnp.asarray(x) for x in leaves], [jnp.asarray(m) for m in masks])
    kept = [x.ravel()[m.ravel()] for x, m in zip(leaves, masks, strict=True)]
    want = [np.median(k) if k.size else np.nan for k in kept]
    np.testing.assert_array_equal(np.asarray(per_leaf), np.asarray(want, np.float32))
    assert np.isnan(overall)  # leaf 2's NaN is kept
    overall, _ = fn([jnp.asarray(x) for x in leaves[:2]], [jnp.asarray(m) for m in masks[:2]])
    assert overall == np.median(np.concatenate(kept[:2]))
    # Unmasked: every value counts.
    overall, per_leaf = fn([jnp.asarray(odd), jnp.asarray(ties)])
    assert overall == np.median(np.concatenate([odd, ties]))
    np.testing.assert_array_equal(np.asarray(per_leaf), [np.median(odd), np.median(ties)])


def _masked_median(x: np.ndarray, m: np.ndarray) -> float:
    kept = x.ravel()[m.ravel()]
    return np.float32(np.median(kept)) if kept.size else np.float32(np.nan)


_bisected = jax.jit(bisected_tree_medians)
_NORMAL_OR_ZERO = st.floats(width=32, allow_nan=False, allow_infinity=False).filter(
    lambda v: v == 0 or abs(v) > 1e-30
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(_NORMAL_OR_ZERO, min_size=7, max_size=7),
    st.lists(st.sampled_from([0.0, -0.0, 1.5, 5.0]), min_size=9, max_size=9),
    st.lists(st.booleans(), min_size=16, max_size=16),
)
def test_property_bisected_medians_equal_numpy(spread, ties, keep):
    """Signs, zeros of both signs, huge values and ties, any mask; one leaf alone (its median
    is the tree's) and two together. XLA on a CPU flushes subnormal results to zero, so the
    values stay far enough from them that the mean of two middle values cannot be one."""
    a, b = np.asarray(spread, np.float32), np.asarray(ties, np.float32)
    ma, mb = np.asarray(keep[:7]), np.asarray(keep[7:])
    overall, per_leaf = _bisected(
        [jnp.asarray(a), jnp.asarray(b)], [jnp.asarray(ma), jnp.asarray(mb)]
    )
    np.testing.assert_array_equal(per_leaf, [_masked_median(a, ma), _masked_median(b, mb)])
    both = _masked_median(np.concatenate([a, b]), np.concatenate([ma, mb]))
    np.testing.assert_array_equal(overall, both)
    alone, leaf = _bisected([jnp.asarray(a)], [jnp.asarray(ma)])
    np.testing.assert_array_equal([alone, *leaf], [_masked_median(a, ma)] * 2)


def test_bisected_medians_vmapped_equal_one_by_one():
    """The engine vmaps GEM's diagnostics over the runs of a batch."""
    rng = np.random.default_rng(5)
    x = np.clip(rng.normal(2.0, 2.0, (8, 3, 40)), 0.0, 5.0).astype(np.float32)  # clipped pi
    masks = rng.random((8, 3, 40)) < 0.9
    batched = jax.jit(jax.vmap(lambda v, m: bisected_tree_medians([v[0], v[1:]], [m[0], m[1:]])))
    overall, per_leaf = batched(jnp.asarray(x), jnp.asarray(masks))
    for r in range(8):
        np.testing.assert_array_equal(overall[r], _masked_median(x[r], masks[r]))
        want = [_masked_median(x[r, 0], masks[r, 0]), _masked_median(x[r, 1:], masks[r, 1:])]
        np.testing.assert_array_equal(per_leaf[r], want)
