"""The `local` rule with Delayed Nesterov outside (Liu et al. 2024, Algorithm 3) on a real
asynchronous trace: replaying the commits' pseudo-gradients through a numpy Algorithm 3
reaches the engine's parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from engine_helpers import cluster, execute, quadratic

from gemsim import rules, timing

DIM = 5


def algorithm_3(g, eps, beta, n, c, theta0):
    """Algorithm 3, as in tests/rules/test_outer_optimizers.py (its final theta)."""
    theta, m, delta = theta0.copy(), np.zeros_like(theta0), np.zeros_like(theta0)
    for t in range(1, len(g) + 1):
        gt = g[t - 1]
        if t % n == 0:
            m = beta * m + (delta + gt) / n
            theta = theta - eps * ((1 - c * n + c) * beta * m + gt / n)
            delta = np.zeros_like(theta0)
        else:
            delta = delta + gt
            theta = theta - eps * (c * beta * m + gt / n)
    return theta


def test_local_with_delayed_nesterov_equals_its_replay_on_a_quadratic():
    """The rule hands the outer optimizer each commit's pseudo-gradient: replaying the
    commits' pseudo-gradients through Algorithm 3 reaches the engine's parameters."""
    prob = quadratic(dim=DIM, condition=5.0, noise=0.1, seed=1)
    outer = rules.delayed_nesterov(0.5, period=3, momentum=0.9, activation=0.1)
    rule = rules.local(inner=optax.sgd(0.05), outer=outer, window=2)
    trace = timing.simulate(cluster(3, budget=30, window=2), seed=4)
    out = execute(rule, prob, trace, chunk=8)
    # replay: each commit's worker ran 2 SGD steps from the version it pulled
    grad = jax.jit(jax.grad(prob.loss))
    versions = [np.asarray(jax.tree.leaves(prob.init_params)[0], np.float64)]
    steps = dict.fromkeys(range(3), 0)
    g_all = []
    for k in range(len(trace)):
        w, pulled = int(trace.worker[k]), int(trace.pulled_version[k])
        x0 = jnp.asarray(versions[pulled], jnp.float32)
        x = x0
        for _ in range(2):
            batch = prob.batch(w, steps[w])
            x = x - 0.05 * grad({"theta": x}, batch, batch.key)["theta"]
            steps[w] += 1
        g_all.append(np.asarray(x0 - x, np.float64))
        versions.append(algorithm_3(np.array(g_all), 0.5, 0.9, 3, 0.1, versions[0]))
    assert list(out.params) == ["theta"]
    np.testing.assert_allclose(np.asarray(out.params["theta"]), versions[-1], rtol=1e-4, atol=1e-5)


def test_local_under_a_long_grace_period_is_synchronous_diloco():
    """A window longer than any delay: every round holds every worker, so asynchronous
    DiLoCo with a grace period is synchronous DiLoCo, bit for bit."""
    import dataclasses

    prob = quadratic(dim=DIM, condition=5.0, noise=0.1, seed=2)
    rule = rules.local(inner=optax.sgd(0.05), window=3)
    base = cluster(3, budget=30, window=3)
    runs = []
    for protocol in (timing.Grace(1e9), timing.Sync()):
        trace = timing.simulate(dataclasses.replace(base, protocol=protocol), seed=5)
        runs.append(np.asarray(execute(rule, prob, trace, chunk=8).params["theta"]))
    np.testing.assert_array_equal(runs[0], runs[1])
