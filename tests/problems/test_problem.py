"""make_problem and the Problem contract: evaluate, quadratic math, training, jit behaviour."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim.problems import (
    Cnn,
    Digits,
    Logistic,
    Mlp,
    Mnist,
    Mnist5k,
    Quadratic,
    Synthetic,
    make_problem,
    quadratic_curvature,
)

EVAL_KEYS = {"train_loss", "test_loss", "test_accuracy"}
CLASS_KEYS = {f"test_accuracy_class_{k}" for k in range(10)}  # a classifier's per-class accuracy


def test_contract_fields(cnn_problem):
    p = cnn_problem
    assert (p.train_size, p.test_size, p.eval_size, p.batch_size) == (4000, 1000, 1000, 64)
    assert p.steps_per_epoch == 4000 // 64 == 62
    assert p.model_bytes == 4 * p.n_params
    params = p.init(jax.random.key(3))
    assert jax.tree.structure(params) == jax.tree.structure(p.init_params)


def test_evaluate_fresh_cnn(cnn_problem):
    metrics = cnn_problem.evaluate(cnn_problem.init_params)
    assert set(metrics) == EVAL_KEYS | CLASS_KEYS
    assert all(v.shape == () and v.dtype == jnp.float32 for v in metrics.values())
    assert abs(float(metrics["train_loss"]) - math.log(10)) < 0.3
    assert abs(float(metrics["test_loss"]) - math.log(10)) < 0.3
    assert 0.02 < float(metrics["test_accuracy"]) < 0.25  # chance is 0.1
    again = cnn_problem.evaluate(cnn_problem.init_params)  # no dropout: deterministic
    assert all(float(again[k]) == float(metrics[k]) for k in EVAL_KEYS)


def test_evaluate_chunks_and_subset_agree_with_a_direct_computation(digits_problem):
    p = digits_problem
    params = jax.tree.map(lambda a: a * 5.0, p.init(jax.random.key(1)))
    metrics = p.evaluate(params)
    x, y = p.data["x_test"], p.data["y_test"]
    assert x.shape == (p.test_size, 8, 8)
    logits = x.reshape(len(y), -1) @ params["fc1"]["w"] + params["fc1"]["b"][None, :]
    log_p = jax.nn.log_softmax(logits)
    nll = -jnp.mean(log_p[jnp.arange(len(y)), y])
    accuracy = jnp.mean((jnp.argmax(logits, 1) == y).astype(jnp.float32))
    np.testing.assert_allclose(metrics["test_loss"], nll, rtol=1e-5)
    np.testing.assert_allclose(metrics["test_accuracy"], accuracy, rtol=1e-6)
    # A subset larger than the training set is capped to all of it.
    everything = make_problem(Logistic(), Digits(), batch_size=32, seed=0, eval_subset=10_000)
    assert everything.eval_size == everything.train_size == 1438


def test_eval_subset_is_fixed_by_the_seed():
    data = Synthetic(n_train=500, n_test=50, dim=3, data_seed=0)
    a, b = (make_problem(Logistic(), data, 10, seed=s, eval_subset=100) for s in (1, 2))
    a2 = make_problem(Logistic(), data, 10, seed=1, eval_subset=100)
    assert a.eval_size == 100
    chosen = lambda p: np.concatenate([np.ravel(p.data["eval"]["full"]), p.data["eval"]["rest"]])
    np.testing.assert_array_equal(chosen(a), chosen(a2))
    assert not np.array_equal(chosen(a), chosen(b))
    assert len(np.unique(chosen(a))) == 100


def test_sgd_on_digits_reduces_the_loss():
    problem = make_problem(Mlp((32,)), Digits(), batch_size=32, seed=0)

    @jax.jit
    def step(params, s):
        batch = problem.batch(0, s)
        grads = jax.grad(problem.loss)(params, batch, batch.key)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), None

    params, _ = jax.lax.scan(step, problem.init_params, jnp.arange(60, dtype=jnp.int32))
    before, after = problem.evaluate(problem.init_params), problem.evaluate(params)
    assert float(after["train_loss"]) < 0.5 * float(before["train_loss"])
    assert float(after["test_accuracy"]) > 0.8


def test_quadratic_curvature():
    np.testing.assert_allclose(quadratic_curvature(Quadratic(dim=3, condition=100.0)), [1, 10, 100])
    np.testing.assert_array_equal(quadratic_curvature(Quadratic(dim=1, condition=50.0)), [1.0])


def test_quadratic_exact_gradient():
    spec = Quadratic(dim=5, condition=1000.0, noise=0.0)
    problem = make_problem(spec, None, batch_size=8, seed=0)
    assert problem.train_size == 8 and problem.steps_per_epoch == 1 and problem.n_params == 5
    theta = {"theta": jax.random.normal(jax.random.key(0), (5,), jnp.float32)}
    batch = problem.batch(3, 7)
    grad = jax.grad(problem.loss)(theta, batch, batch.key)
    h = quadratic_curvature(spec)
    np.testing.assert_allclose(grad["theta"], h * np.asarray(theta["theta"]), rtol=1e-6)
    np.testing.assert_array_equal(problem.init(jax.random.key(9))["theta"], np.ones(5))
    metrics = problem.evaluate(theta)
    expected = 0.5 * np.sum(h * np.asarray(theta["theta"]) ** 2)
    np.testing.assert_allclose(metrics["train_loss"], expected, rtol=1e-6)
    np.testing.assert_allclose(metrics["test_loss"], expected, rtol=1e-6)
    assert set(metrics) == EVAL_KEYS and np.isnan(metrics["test_accuracy"])


def test_quadratic_gradient_noise_statistics():
    spec = Quadratic(dim=8, condition=10.0, noise=0.3)
    problem = make_problem(spec, None, batch_size=1, seed=2)
    theta = problem.init_params
    h = quadratic_curvature(spec)

    def noise(worker, step):
        batch = problem.batch(worker, step)
        return jax.grad(problem.loss)(theta, batch, batch.key)["theta"] - h

    steps = jnp.arange(4000, dtype=jnp.int32)
    z = np.asarray(jax.vmap(lambda s: noise(1, s))(steps))
    n = z.size
    assert abs(z.mean()) < 4 * 0.3 / math.sqrt(n)
    assert z.std() == pytest.approx(0.3, rel=0.03)
    assert abs(np.corrcoef(z[:-1, 0], z[1:, 0])[0, 1]) < 0.06  # fresh noise every step
    np.testing.assert_array_equal(noise(1, 5), noise(1, 5))
    assert not np.array_equal(noise(0, 5), noise(1, 5))


def test_problem_is_a_pytree_and_shares_compiled_code_across_seeds():
    traces = []

    @jax.jit
    def loss_at(problem, worker, step):
        traces.append(1)
        batch = problem.batch(worker, step)
        return problem.loss(problem.init_params, batch, batch.key)

    data = Synthetic(n_train=200, n_test=20, dim=4, data_seed=0)
    a, b = (make_problem(Mlp((8,)), data, 16, seed=s) for s in (0, 1))
    values = [float(loss_at(p, 0, 3)) for p in (a, b)]
    assert len(traces) == 1  # the seed is data, not a compile-time constant
    assert values[0] != values[1]
    direct = a.batch(0, 3)
    np.testing.assert_allclose(values[0], a.loss(a.init_params, direct, direct.key), rtol=1e-6)
    leaves = jax.tree.leaves(a)
    assert any(leaf.shape == (200, 4) for leaf in leaves)  # the training set is an input


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(model=Quadratic(), dataset=Digits()), ValueError, "takes no dataset"),
        (dict(model=Logistic(), dataset=None), ValueError, "needs a dataset"),
        (dict(model="cnn", dataset=Mnist5k()), ValueError, "got str with no callable init"),
        (dict(model=Logistic(), dataset=Digits(), batch_size=0), ValueError, "batch_size"),
        (dict(model=Logistic(), dataset=Digits(), batch_size=5000), ValueError, "exceeds the 1438"),
        (dict(model=Logistic(), dataset=Digits(), seed=2**32), ValueError, "seed must be"),
        (dict(model=Logistic(), dataset=Digits(), seed=-1), ValueError, "seed must be"),
        (dict(model=Logistic(), dataset=Digits(), eval_subset=0), ValueError, "eval_subset"),
    ],
)
def test_make_problem_rejects_bad_arguments(kwargs, error, match):
    args = dict(batch_size=8, seed=0) | kwargs
    with pytest.raises(error, match=match):
        make_problem(**args)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Mlp(hidden=()), "non-empty tuple.*Logistic"),
        (lambda: Mlp(hidden=[8]), "non-empty tuple"),
        (lambda: Mlp(hidden=(8, 0)), r"hidden\[1\] must be an integer >= 1, got 0"),
        (lambda: Quadratic(dim=0), "dim must be an integer >= 1"),
        (lambda: Quadratic(condition=0.5), "condition must be a finite number >= 1, got 0.5"),
        (lambda: Quadratic(noise=-1.0), "noise"),
        (lambda: Quadratic(noise=float("nan")), "noise"),
        (lambda: Synthetic(classes=1), "classes"),
        (lambda: Synthetic(label_noise=1.5), "label_noise"),
        (lambda: Mnist(data_dir=""), "data_dir"),
        (lambda: Cnn(dropout=1.0), "dropout"),
    ],
)
def test_specs_validate(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_specs_are_hashable_values():
    assert Mlp((3, 4)) == Mlp((3, 4)) and hash(Mlp((3, 4))) == hash(Mlp((3, 4)))
    assert Quadratic(4, 10.0, 0.1) != Quadratic(4, 10.0, 0.2)
