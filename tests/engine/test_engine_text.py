"""The engine on a language model: `sync` with one worker is a plain optax loop over the same
batches, the wavefront executor equals the sequential one, and a population whose clients are
Shakespeare's speaking roles trains each client on its own role's text.

A tiny transformer (one layer, d_model 16, context 8) keeps the compilations short.
"""

import jax
import numpy as np
import optax
import pytest
from engine_helpers import cluster, execute

from gemsim import engine, problems, rules, timing

SPEC = problems.Transformer(layers=1, d_model=16, heads=2, context=8)
COMMITS = 24


@pytest.fixture(scope="module")
def problem():
    return problems.make_problem(
        SPEC, problems.Shakespeare(context=8), batch_size=4, seed=1, eval_subset=8
    )


def assert_trees_close(a, b, atol=2e-6):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


def test_sync_with_one_worker_is_a_plain_optax_loop_on_the_same_batches(problem):
    rule = rules.sync(lr=0.1, momentum=0.9)
    trace = timing.simulate(
        cluster(1, compute=timing.Exponential(1.0), budget=COMMITS, synchronous=True), seed=0
    )
    out = execute(rule, problem, trace, chunk=8, eval_every=COMMITS)

    opt = optax.sgd(0.1, momentum=0.9)
    params, state = problem.init_params, opt.init(problem.init_params)
    grad = jax.jit(jax.grad(problem.loss))
    for step in range(COMMITS):
        batch = problem.batch(0, step)
        updates, state = opt.update(grad(params, batch, batch.key), state, params)
        params = optax.apply_updates(params, updates)
    assert_trees_close(out.params, params)
    # the same model evaluated: bits per character of the loop's final parameters
    final = jax.device_get(problem.evaluate(params))
    assert out.final["test_bits_per_char"] == pytest.approx(final["test_bits_per_char"], 1e-5)


def test_wavefront_equals_sequential_on_the_transformer(problem):
    rule = rules.downpour(lr=0.3)
    trace = timing.simulate(cluster(4, budget=COMMITS), seed=2)
    plan = engine.plan_of(trace, window=1, eval_every=COMMITS)
    runs = []
    for cls in (engine.SequentialExecutor, engine.WavefrontExecutor):
        ex = cls(rule, problem, params=problem.init_params, n_workers=4, chunk=8)
        runs.append(ex.execute(plan))
    seq, wave = runs
    assert_trees_close(seq.params, wave.params, atol=1e-5)
    assert seq.evals.keys() == wave.evals.keys()
    for k in seq.evals:
        assert seq.evals[k]["test_loss"] == pytest.approx(wave.evals[k]["test_loss"], abs=1e-5)


def test_training_lowers_the_bits_per_character(problem):
    rule = rules.downpour(lr=0.5)
    trace = timing.simulate(cluster(2, budget=60), seed=0)
    out = execute(rule, problem, trace, chunk=16, eval_every=60)
    before = jax.device_get(problem.evaluate(problem.init_params))["test_bits_per_char"]
    assert out.final["test_bits_per_char"] < before - 0.5
