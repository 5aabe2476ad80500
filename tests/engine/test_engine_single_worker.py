"""n = 1: an asynchronous run of each rule equals its sequential counterpart.

For every rule, the engine over a one-worker trace equals a plain Python loop that calls the
rule's functions commit by commit (no slots, no scan, no chunks); and the rules that reduce to
SGD with one worker (downpour, agn, staleness, softsync, dcasgd) equal optax.sgd, `sync`
equals optax.sgd with momentum.

GEM runs on an MLP on digits (over 256 parameters: its diagnostics take the histogram path);
the other rules on a noisy quadratic, where the same commits and local steps compile in about
half the time.
"""

import jax
import numpy as np
import optax
import pytest
from engine_helpers import cluster, execute, quadratic

from gemsim import problems, rules, timing

COMMITS = 60

RULES = {
    "gem": rules.gem(lr=0.05),
    "gem-pulled": rules.gem(lr=0.05, gradient_at=rules.GradientAt.PULLED),
    "downpour": rules.downpour(lr=0.05),
    "downpour-window3-momentum": rules.downpour(lr=0.05, window=3, local_momentum=0.5),
    "agn": rules.agn(lr=0.05, window=4),
    "agn-window1": rules.agn(lr=0.05, window=1),
    "staleness": rules.staleness(lr=0.05),
    "softsync": rules.softsync(lr=0.05),
    "easgd": rules.easgd(lr=0.05, alpha=0.3, window=2),
    "dcasgd": rules.dcasgd(lr=0.05),
    "dcasgd-adaptive": rules.dcasgd(lr=0.05, adaptive=True),
    "sync": rules.sync(lr=0.05, momentum=0.9),
}


def problem(name: str):
    if name.startswith("gem"):
        return problems.make_problem(
            problems.Mlp(hidden=(8,)), problems.Digits(), batch_size=8, seed=2
        )
    return quadratic(dim=6, condition=10.0, noise=0.1, seed=2)


def one_worker_trace(rule):
    spec = cluster(
        1,
        compute=timing.Exponential(1.0),
        budget=COMMITS,
        window=rule.window,
        synchronous=rule.name == "sync",
    )
    trace = timing.simulate(spec, seed=0)
    assert np.all(trace.staleness == 0)
    return trace


def by_hand(rule, prob):
    """Drive the rule directly: one worker, pull right after each commit."""
    theta = prob.init_params
    state = rule.init(theta, 1)
    server, ws = state.server, jax.tree.map(lambda a: a[0], state.workers)
    snapshot, step = theta, 0
    grad = jax.jit(jax.value_and_grad(prob.loss))
    start, local_step, commit = jax.jit(rule.start), jax.jit(rule.local_step), jax.jit(rule.commit)
    for _ in range(COMMITS):
        x0 = start(snapshot, ws)
        x, acc = x0, rule.init_acc(x0)
        for _ in range(rule.window):
            batch = prob.batch(0, step)
            _, g = grad(x, batch, batch.key)
            x, acc, ws = local_step(x, acc, g, ws)
            step += 1
        work, ctx = rules.Work(x0, x, acc), rules.commit_context(0)
        theta, server, ws, _ = commit(theta, server, ws, work, ctx)
        snapshot = theta
    return theta


def optax_loop(opt, prob, window=1):
    params, state = prob.init_params, opt.init(prob.init_params)
    grad = jax.jit(jax.grad(prob.loss))
    for step in range(COMMITS * window):
        batch = prob.batch(0, step)
        updates, state = opt.update(grad(params, batch, batch.key), state, params)
        params = optax.apply_updates(params, updates)
    return params


def assert_trees_close(a, b, atol=1e-5):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


@pytest.mark.parametrize("name", list(RULES))
def test_engine_with_one_worker_equals_driving_the_rule_by_hand(name):
    rule, prob = RULES[name], problem(name)
    out = execute(rule, prob, one_worker_trace(rule), chunk=16)
    assert_trees_close(out.params, by_hand(rule, prob))


@pytest.mark.parametrize(
    "name,opt,window",
    [
        ("downpour", optax.sgd(0.05), 1),
        ("agn-window1", optax.sgd(0.05), 1),
        ("staleness", optax.sgd(0.05), 1),
        ("softsync", optax.sgd(0.05), 1),
        ("dcasgd", optax.sgd(0.05), 1),
        ("sync", optax.sgd(0.05, momentum=0.9), 1),
    ],
)
def test_single_worker_rules_reduce_to_sgd(name, opt, window):
    rule, prob = RULES[name], problem(name)
    out = execute(rule, prob, one_worker_trace(rule), chunk=16)
    assert_trees_close(out.params, optax_loop(opt, prob, window))
