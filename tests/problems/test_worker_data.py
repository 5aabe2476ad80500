"""Workers with their own data: each streams epochs over its own shard (a pure function of
seed, worker and step), FedProx's Synthetic(alpha, beta) with its devices as natural groups,
and the quadratic with per-worker optima, whose stationary points have a closed form."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from gemsim import engine, problems, rules, timing
from gemsim.problems import DataSplit, Dirichlet, Groups, Iid

N = 5


@pytest.fixture(scope="module")
def digits_split():
    split = DataSplit(Dirichlet(alpha=0.3, min_size=40))
    problem = problems.make_problem(
        problems.Mlp(hidden=(8,)), problems.Digits(), 16, seed=4, split=split, n_workers=N
    )
    labels = np.asarray(problem.data["y_train"])
    shards = problems.split_shards(split, labels, N, 4, n_classes=10)
    return problem, shards


def test_a_worker_streams_epochs_over_its_own_shard(digits_split):
    problem, shards = digits_split
    np.testing.assert_array_equal(problem.data["shard_offsets"], shards.offsets)
    x_train = np.asarray(problem.data["x_train"]).reshape(len(problem.data["x_train"]), -1)
    for w in (0, 3):
        own = set(shards.shard(w).tolist())
        per_epoch = len(own) // 16
        seen = []
        for step in range(2 * per_epoch):
            batch = np.asarray(problem.batch(w, step).x).reshape(16, -1)
            seen.append([int(np.flatnonzero((x_train == row).all(1))[0]) for row in batch])
        first = [i for rows in seen[:per_epoch] for i in rows]
        assert set(first) <= own and len(set(first)) == len(first)  # an epoch: no repeat
        second = [i for rows in seen[per_epoch:] for i in rows]
        assert set(second) <= own and first != second  # the next epoch, another order


def test_streams_depend_on_seed_worker_and_step_only(digits_split):
    problem, _ = digits_split
    again = problems.make_problem(
        problems.Mlp(hidden=(8,)),
        problems.Digits(),
        16,
        seed=4,
        split=DataSplit(Dirichlet(alpha=0.3, min_size=40)),
        n_workers=N,
    )
    for w, s in ((0, 0), (4, 7), (2, 30)):
        np.testing.assert_array_equal(problem.batch(w, s).x, again.batch(w, s).x)
    assert not np.array_equal(problem.batch(0, 0).x, problem.batch(1, 0).x)


def test_synthetic_fed_follows_the_recipe_and_its_devices_are_groups():
    spec = problems.SyntheticFed(alpha=1.0, beta=1.0, devices=8, samples_log_mean=3.0)
    data = problems.load_dataset(spec, 0)
    n_train, n_test = problems.synthetic_fed_sizes(spec, 0)
    np.testing.assert_array_equal(np.bincount(data.groups, minlength=8), n_train)
    assert ((n_train + n_test) >= spec.min_samples).all() and data.x_train.shape[1] == 60
    shape = problems.data_shape(spec, 0)  # the sizes without generating the data
    assert (shape.n_train, shape.n_test) == (len(data.y_train), len(data.y_test))
    shards = problems.partition(Groups(), data.y_train, 8, 0, n_classes=10, groups=data.groups)
    for w in range(8):
        assert set(data.groups[shards.shard(w)].tolist()) == {w}
    # Devices' own models: their label distributions differ far more than an IID split's.
    fed = problems.describe(shards, data.y_train, 10).distance.mean()
    iid = problems.partition(Iid(), data.y_train, 8, 0, n_classes=10)
    assert fed > 3 * problems.describe(iid, data.y_train, 10).distance.mean()


def test_quadratic_optima_are_drawn_per_worker():
    spec = problems.Quadratic(dim=4, heterogeneity=2.0)
    few, more = problems.worker_optima(spec, 7, 3), problems.worker_optima(spec, 7, 5)
    np.testing.assert_array_equal(few, more[:3])  # adding workers changes no other's optimum
    problem = problems.make_problem(spec, None, 1, seed=7, n_workers=5)
    theta = {"theta": np.zeros(4, np.float32)}
    batch = problem.batch(2, 0)
    g = jax.grad(problem.loss)(theta, batch, batch.key)["theta"]
    np.testing.assert_allclose(g, -problems.quadratic_curvature(spec) * more[2], rtol=1e-6)


def _settle(rule, spec, speeds, commits, seed=0):
    """The central variable after a run of `commits` commits and each worker's share of them."""
    n = len(speeds)
    workers = tuple(timing.WorkerSpec(compute=timing.LogNormal(0.1, 0.2), speed=s) for s in speeds)
    cluster = timing.ClusterSpec(
        workers=workers,
        pull=None,
        push=None,
        bandwidth_bytes_per_s=None,
        model_bytes=0,
        service=None,
        discipline=timing.Discipline.FIFO,
        window=rule.window,
        budget=timing.CommitBudget(commits),
    )
    trace = timing.simulate(cluster, seed=seed)
    problem = problems.make_problem(spec, None, 1, seed=seed, n_workers=n)
    plan = engine.plan_of(trace, window=rule.window)
    out = engine.SequentialExecutor(rule, problem, params=problem.init_params, n_workers=n).execute(
        plan
    )
    shares = np.bincount(trace.worker, minlength=n) / len(trace)
    return np.asarray(out.params["theta"], np.float64), shares, problem


def test_asynchronous_sgd_settles_at_the_commit_weighted_mean_of_the_optima():
    """Plain ASGD (downpour) with a small step on noiseless heterogeneous workers of speeds
    1, 2 and 6: the sum of the gradients weighted by commit rate vanishes there, far from
    the plain mean; Malenia, which weighs workers equally, settles at the plain mean."""
    spec = problems.Quadratic(dim=3, condition=2.0, noise=0.0, heterogeneity=1.0)
    speeds = [1.0, 2.0, 6.0]
    theta, shares, problem = _settle(rules.downpour(lr=0.02), spec, speeds, 6000)
    optima = problems.worker_optima(spec, 0, 3)
    weighted = problems.stationary_point(optima, shares)
    plain = problems.stationary_point(optima)
    assert np.abs(weighted - plain).max() > 0.3  # the two points are far apart
    np.testing.assert_allclose(theta, weighted, atol=0.02)
    # The engine packs Malenia's int32 worker state into its float32 rows: a promotion the
    # strict numerics of these tests (conftest) forbid, and the engine's own jit allows.
    with jax.numpy_dtype_promotion("standard"):
        theta, _, _ = _settle(rules.malenia(lr=0.05), spec, speeds, 6000)
    np.testing.assert_allclose(theta, plain, atol=0.02)
    # The evaluation's objective is the mean of the workers' losses, least at the plain mean.
    at = lambda point: float(problem.evaluate({"theta": np.float32(point)})["train_loss"])
    assert at(plain) < at(weighted) and at(plain) < at(plain + 0.05)
