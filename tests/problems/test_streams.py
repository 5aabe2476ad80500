"""Per-worker mini-batch streams: determinism, independence, epochs as permutations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim.problems import Mlp, Problem, Synthetic, make_problem
from gemsim.problems._keys import KeyTag, derive_key
from gemsim.problems.streams._streams import batch_positions, permute_indices

key_data = lambda k: np.asarray(jax.random.key_data(k))


def _positions(problem: Problem, worker, step) -> jax.Array:
    stream_key = problem.data["stream_key"]
    return batch_positions(stream_key, worker, step, problem.train_size, problem.batch_size)


def _indices(problem: Problem, worker, step) -> np.ndarray:
    return np.asarray(_positions(problem, worker, step))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 100, 1437, 4000, 4097])
def test_permutation_is_a_bijection(n):
    perm = np.asarray(permute_indices(jax.random.key(n), n, jnp.arange(n)))
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))


def test_permutation_looks_shuffled():
    n = 1000
    perms = jax.vmap(lambda k: permute_indices(k, n, jnp.arange(n)))(
        jax.random.split(jax.random.key(0), 200)
    )
    perms = np.asarray(perms)
    assert not np.array_equal(perms[0], np.arange(n))
    # Where one position lands is uniform over [0, n): mean ~ (n-1)/2, sd ~ n/sqrt(12).
    means = perms[:, :20].mean(axis=0)
    assert np.all(np.abs(means - (n - 1) / 2) < 5 * (n / np.sqrt(12)) / np.sqrt(200))
    # Neighbouring positions are not mapped to neighbouring indices.
    assert np.median(np.abs(np.diff(perms[0]))) > 100


def test_batches_independent_of_worker_count_and_call_order(cnn_problem):
    p = cnn_problem
    steps = jnp.array([0, 5, 61, 62, 500], jnp.int32)
    grid = jax.jit(jax.vmap(lambda w: jax.vmap(lambda s: p.batch(w, s))(steps)))
    wide, narrow = grid(jnp.arange(8)), grid(jnp.arange(3))
    for w in reversed(range(3)):
        for i in reversed(range(len(steps))):
            single = p.batch(w, int(steps[i]))
            np.testing.assert_array_equal(single.x, wide.x[w, i])
            np.testing.assert_array_equal(single.y, narrow.y[w, i])
            np.testing.assert_array_equal(key_data(single.key), key_data(wide.key[w, i]))


def test_same_seed_same_stream_other_seed_other_stream():
    spec, data = Mlp((8,)), Synthetic(n_train=640, n_test=64, dim=4, data_seed=0)
    a, b, c = (make_problem(spec, data, 64, seed) for seed in (3, 3, 4))
    np.testing.assert_array_equal(a.batch(2, 17).x, b.batch(2, 17).x)
    assert not np.array_equal(_indices(a, 2, 17), _indices(c, 2, 17))


def test_workers_differ(cnn_problem):
    first = [_indices(cnn_problem, w, 0) for w in range(6)]
    for i in range(6):
        for j in range(i):
            assert not np.array_equal(first[i], first[j])


def test_batch_matches_its_indices(cnn_problem):
    idx = _indices(cnn_problem, 4, 100)
    batch = cnn_problem.batch(4, 100)
    np.testing.assert_array_equal(batch.x, np.asarray(cnn_problem.data["x_train"])[idx])
    np.testing.assert_array_equal(batch.y, np.asarray(cnn_problem.data["y_train"])[idx])


@pytest.mark.parametrize(("train", "b"), [(640, 64), (4000, 50), (1000, 30), (4000, 64)])
def test_each_epoch_is_a_permutation(train, b):
    spe = train // b
    stream_key = derive_key(1, KeyTag.STREAM)
    steps = jnp.arange(3 * spe, dtype=jnp.int32)
    positions = jax.jit(
        jax.vmap(lambda w, s: batch_positions(stream_key, w, s, train, b), in_axes=(None, 0))
    )
    for worker in (0, 9):
        epochs = np.asarray(positions(worker, steps)).reshape(3, spe * b)
        for epoch in epochs:
            assert len(np.unique(epoch)) == spe * b  # every index at most once
            assert epoch.min() >= 0 and epoch.max() < train
            if train % b == 0:
                np.testing.assert_array_equal(np.sort(epoch), np.arange(train))
        assert not np.array_equal(epochs[0], epochs[1])  # reshuffled every epoch


def test_problem_epoch_uses_each_example_at_most_once(cnn_problem):
    spe = cnn_problem.steps_per_epoch
    steps = jnp.arange(spe, 2 * spe, dtype=jnp.int32)  # the second epoch
    idx = np.asarray(jax.jit(jax.vmap(lambda s: _positions(cnn_problem, 2, s)))(steps)).ravel()
    assert len(np.unique(idx)) == spe * cnn_problem.batch_size == 3968


def test_dropout_key_differs_per_step_and_worker(cnn_problem):
    keys = {tuple(key_data(cnn_problem.batch(w, s).key)) for w in range(3) for s in range(4)}
    assert len(keys) == 12
    again = key_data(cnn_problem.batch(1, 2).key)
    assert tuple(again) in keys
