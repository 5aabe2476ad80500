"""The metrics that show the bias of asynchronous rules, against independent numpy
computations: each class's test accuracy, the central model on a fixed sample of each worker's
own shard, the heterogeneous quadratic's per-worker losses in closed form, and their summary
across workers."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from gemsim import engine, problems
from gemsim.problems import DataSplit, Dirichlet

N, SEED, CLASSES = 4, 5, 3


def _arrays():
    """A small 3-class data set whose test set lacks class 2."""
    rng = np.random.default_rng(0)
    x_train = rng.normal(size=(120, 5)).astype(np.float32)
    x_test = rng.normal(size=(40, 5)).astype(np.float32)
    y_train = np.arange(120) % CLASSES
    y_test = rng.integers(0, 2, 40)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test,
            "n_classes": np.asarray(CLASSES)}  # fmt: skip


SPLIT = DataSplit(Dirichlet(alpha=0.5, min_size=8))


@pytest.fixture(scope="module")
def setup():
    """A logistic problem split among N workers, each measured on at most `per` examples of
    its shard, `per` chosen so that some shards are smaller (all of them) and some larger."""
    arrays = _arrays()
    shards = problems.split_shards(SPLIT, arrays["y_train"], N, SEED, n_classes=CLASSES)
    sizes = np.sort(shards.sizes)
    per = int(sizes[1])  # the smallest shard is at most `per`, the largest is larger
    assert sizes[0] <= per < sizes[-1]
    problem = problems.make_problem(
        problems.Logistic(), None, 4, SEED, data=arrays, split=SPLIT, n_workers=N,
        eval_per_worker=per,
    )  # fmt: skip
    w = jax.random.normal(jax.random.key(1), (5, CLASSES))
    params = {"fc1": {"w": 2.0 * w, "b": np.float32([0.3, -0.2, 0.1])}}
    return arrays, shards, per, problem, params


def _logits(params, x):
    return np.asarray(x, np.float64) @ np.asarray(params["fc1"]["w"], np.float64) + np.asarray(
        params["fc1"]["b"], np.float64
    )


def _nll(logits, y):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_p[np.arange(len(y)), y]


def test_per_class_accuracy_is_the_test_sets_per_class_hits(setup):
    arrays, _, _, problem, params = setup
    got = problem.evaluate(params)
    hits = _logits(params, arrays["x_test"]).argmax(axis=1) == arrays["y_test"]
    for k in range(2):
        expected = hits[arrays["y_test"] == k].mean()
        np.testing.assert_allclose(got[f"test_accuracy_class_{k}"], expected, rtol=1e-6)
    assert np.isnan(got["test_accuracy_class_2"])  # the test set has no example of class 2
    np.testing.assert_allclose(got["test_accuracy"], hits.mean(), rtol=1e-6)


def _samples(problem):
    sample = problem.data["worker_eval"]
    example = np.concatenate([np.asarray(sample["full"]).ravel(), np.asarray(sample["rest"])])
    held = np.asarray(sample["weight"]) > 0
    return example[held], np.asarray(sample["worker"])[held]


def test_each_worker_is_measured_on_a_fixed_sample_of_its_own_shard(setup):
    arrays, shards, per, problem, _ = setup
    example, worker = _samples(problem)
    for w in range(N):
        mine = example[worker == w]
        assert len(set(mine.tolist())) == len(mine) == min(per, shards.sizes[w])
        assert set(mine.tolist()) <= set(shards.shard(w).tolist())
    again = problems.make_problem(
        problems.Logistic(), None, 4, SEED, data=arrays, split=SPLIT, n_workers=N,
        eval_per_worker=per,
    )  # fmt: skip
    for a, b in zip(_samples(problem), _samples(again), strict=True):
        np.testing.assert_array_equal(a, b)  # chosen from the seed: the same every time


def test_per_worker_loss_and_accuracy_on_the_samples(setup):
    arrays, _, _, problem, params = setup
    example, worker = _samples(problem)
    x, y = arrays["x_train"][example], arrays["y_train"][example]
    logits = _logits(params, x)
    nll, hit = _nll(logits, y), logits.argmax(axis=1) == y
    got = problem.evaluate_workers(params)
    assert set(got) == {"loss", "accuracy"} and got["loss"].shape == (N,)
    for w in range(N):
        np.testing.assert_allclose(got["loss"][w], nll[worker == w].mean(), rtol=1e-5)
        np.testing.assert_allclose(got["accuracy"][w], hit[worker == w].mean(), rtol=1e-6)
    np.testing.assert_array_equal(problem.worker_facts()["shard_size"], setup[1].sizes)


def test_a_user_model_is_measured_per_example_like_a_built_in_one(setup):
    """A user model gives its batch's mean loss: each example is measured as a batch of one."""
    arrays, _, per, problem, params = setup
    apply = lambda p, x: x @ p["fc1"]["w"] + p["fc1"]["b"][None, :]

    def loss(p, x, y, key):
        del key
        return problems.cross_entropy(apply(p, x), y)

    init = lambda key: jax.tree.map(np.zeros_like, params)
    user = problems.UserModel(init, loss, predict=apply)
    theirs = problems.make_problem(
        user, None, 4, SEED, data=arrays, split=SPLIT, n_workers=N, eval_per_worker=per
    )
    got, expected = theirs.evaluate_workers(params), problem.evaluate_workers(params)
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
    np.testing.assert_array_equal(got["accuracy"], expected["accuracy"])


def test_without_a_partition_there_is_nothing_per_worker(setup):
    arrays = setup[0]
    plain = problems.make_problem(problems.Logistic(), None, 4, SEED, data=arrays)
    assert not plain.has_worker_data and plain.evaluate_workers(plain.init_params) == {}
    assert plain.worker_facts() == {} and "test_accuracy_class_1" in plain.evaluate(
        plain.init_params
    )


def test_quadratic_worker_losses_are_the_closed_form():
    spec = problems.Quadratic(dim=4, condition=5.0, heterogeneity=1.5)
    problem = problems.make_problem(spec, None, 1, seed=3, n_workers=N)
    theta = np.float32([0.5, -1.0, 2.0, 0.1])
    c, h = problems.worker_optima(spec, 3, N), problems.quadratic_curvature(spec)
    expected = 0.5 * (h * (theta - c) ** 2).sum(axis=1)
    got = problem.evaluate_workers({"theta": theta})
    np.testing.assert_allclose(got["loss"], expected, rtol=1e-6)
    assert np.isnan(got["accuracy"]).all()
    np.testing.assert_array_equal(problem.worker_facts()["optimum"], c)
    train = problem.evaluate({"theta": theta})["train_loss"]
    np.testing.assert_allclose(train, expected.mean(), rtol=1e-6)


def test_the_summary_across_workers():
    loss, accuracy = np.float32([1.0, 4.0, 2.0, 3.0]), np.float32([0.9, 0.2, 0.5, 0.7])
    got = engine.worker_summary({"loss": loss, "accuracy": accuracy})
    assert list(got) == list(engine.WORKER_SUMMARY)
    expected = [2.5, 4.0, np.quantile(loss, 0.9), 0.575, 0.2, np.quantile(accuracy, 0.1)]
    np.testing.assert_allclose(list(got.values()), expected, rtol=1e-6)
    quadratic = engine.worker_summary({"loss": loss, "accuracy": np.full(4, np.nan)})
    assert np.isnan([quadratic[k] for k in engine.WORKER_SUMMARY if "accuracy" in k]).all()


def test_a_sample_of_the_owners_is_measured_as_each_would_be_alone():
    """A population evaluates `eval_owners` of its clients: each measured owner's values are
    those the full evaluation gives it (every shard smaller than `per_worker`, so both
    measure whole shards), and the sample is a fixed draw from the seed."""
    arrays, many = _arrays(), 12
    split = DataSplit(problems.Iid(samples=9))
    build = lambda owners: problems.make_problem(  # noqa: E731
        problems.Logistic(), None, 4, SEED, data=arrays, split=split, n_workers=many,
        eval_per_worker=16, eval_owners=owners,
    )  # fmt: skip
    full, part = build(None), build(5)
    params = full.init_params
    owners = part.worker_facts()["eval_owners"]
    assert len(owners) == 5 and np.all(np.diff(owners) > 0) and owners.max() < many
    assert "eval_owners" not in full.worker_facts()
    np.testing.assert_array_equal(owners, build(5).worker_facts()["eval_owners"])
    every, some = full.evaluate_workers(params), part.evaluate_workers(params)
    for name in ("loss", "accuracy"):
        assert some[name].shape == (5,)
        np.testing.assert_allclose(some[name], np.asarray(every[name])[owners], rtol=1e-6)


def test_the_heterogeneous_quadratic_measures_its_sample_of_owners():
    spec = problems.Quadratic(dim=3, heterogeneity=1.0)
    full = problems.make_problem(spec, None, 1, SEED, n_workers=30)
    part = problems.make_problem(spec, None, 1, SEED, n_workers=30, eval_owners=4)
    owners = part.worker_facts()["eval_owners"]
    params = {"theta": np.full(3, 0.5, np.float32)}
    np.testing.assert_array_equal(
        part.evaluate_workers(params)["loss"],
        np.asarray(full.evaluate_workers(params)["loss"])[owners],
    )
    # The central loss still averages every owner's.
    assert part.evaluate(params)["train_loss"] == full.evaluate(params)["train_loss"]
