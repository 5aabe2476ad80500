"""Limits where a rule must reduce to plain (momentum) SGD, step by step."""

import jax
import numpy as np
import optax
import pytest
from rules_harness import drive, jax_grad, leaves_np, make_problem, round_ends

from gemsim import rules

N_STEPS = 20
LR = 0.1


def _optax_run(tx, problem):
    """``N_STEPS`` of ``tx`` on the harness gradient of worker 0, one mini-batch per step."""
    theta = problem.params
    state = tx.init(theta)
    versions = [theta]
    update = jax.jit(tx.update)
    for k in range(N_STEPS):
        g = jax_grad(problem, theta, 0, k, 0)
        updates, state = update(g, state, theta)
        theta = optax.apply_updates(theta, updates)
        versions.append(theta)
    return versions


def _assert_same_trajectory(got, want):
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(leaves_np(a), leaves_np(b), strict=True):
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-6, err_msg=f"step {k}")


ONE_WORKER_SGD = {
    "downpour": rules.downpour(LR),
    "agn": rules.agn(LR, window=1),
    "staleness-inverse": rules.staleness(LR),
    "staleness-polynomial": rules.staleness(LR, weight=rules.Polynomial(2.0)),
    "staleness-hinge": rules.staleness(LR, weight=rules.Hinge(1.0, 0.0)),
    "staleness-constant": rules.staleness(LR, weight=rules.ConstantWeight()),
    "softsync": rules.softsync(LR),
}


@pytest.mark.parametrize("name", list(ONE_WORKER_SGD))
def test_one_worker_window_one_is_plain_sgd(name):
    problem = make_problem(3, 1, N_STEPS)
    order = [(0, k) for k in range(N_STEPS)]  # pull at commit: tau = 0 throughout
    got = drive(ONE_WORKER_SGD[name], problem, order, 1).versions
    _assert_same_trajectory(got, _optax_run(optax.sgd(LR), problem))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sync_with_one_worker_is_optax_momentum_sgd(momentum):
    problem = make_problem(4, 1, N_STEPS)
    order = [(0, k) for k in range(N_STEPS)]
    got = drive(rules.sync(LR, momentum=momentum), problem, order, 1).versions
    _assert_same_trajectory(got, _optax_run(optax.sgd(LR, momentum=momentum), problem))


def test_sync_only_moves_at_the_end_of_a_round():
    n = 3
    problem = make_problem(5, n, 9)
    order = [(w, 3 * (k // 3)) for k, w in enumerate([0, 2, 1, 1, 0, 2, 2, 1, 0])]
    driven = drive(rules.sync(LR), problem, order, n, round_end=round_ends(order))
    for k in range(9):
        moved = any(
            np.any(a != b)
            for a, b in zip(
                leaves_np(driven.versions[k + 1]), leaves_np(driven.versions[k]), strict=True
            )
        )
        assert moved == (k % n == n - 1)
        assert (float(driven.infos[k].update_norm) > 0) == moved


def test_weights_at_zero_staleness_are_one():
    weights = [
        rules.Inverse(),
        rules.Polynomial(3.0),
        rules.Hinge(2.0, 0.0),
        rules.ConstantWeight(),
    ]
    for weight in weights:
        assert float(weight(0)) == 1.0


def test_weight_values():
    taus = np.arange(8)
    checks = {
        rules.Inverse(): 1 / (taus + 1),
        rules.Polynomial(0.5): (taus + 1.0) ** -0.5,
        rules.Hinge(0.5, 3): np.where(taus <= 3, 1.0, 1 / (0.5 * np.maximum(taus - 3, 0) + 1)),
        rules.ConstantWeight(): np.ones(8),
    }
    for weight, want in checks.items():
        got = jax.vmap(weight)(np.asarray(taus, np.int32))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_worker_states_are_stacked_on_axis_zero():
    params = {"a": np.ones((2, 3), np.float32), "b": np.zeros(4, np.float32)}
    for rule in (
        rules.gem(0.1),
        rules.downpour(0.1, local_momentum=0.5),
        rules.easgd(0.1, 0.5, 2),
        rules.dcasgd(0.1, adaptive=True),
    ):
        state = rule.init(params, 5)
        for leaf, ref in zip(
            jax.tree.leaves(state.workers),
            jax.tree.leaves(params) * (len(jax.tree.leaves(state.workers)) // 2),
            strict=True,
        ):
            assert leaf.shape == (5, *ref.shape) and leaf.dtype == np.float32
