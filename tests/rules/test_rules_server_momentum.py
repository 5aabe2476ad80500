"""Mitliagkas et al. 2016 on the quadratic: asynchrony begets momentum.

With n workers whose compute times are i.i.d. exponential and an instantaneous server, the
worker that commits next is uniform and independent of the past (memorylessness), so the
staleness is geometric, P(tau = l) = (1/n)(1 - 1/n)^l. On a noiseless quadratic the expected
parameters of asynchronous SGD with step ``lr`` then follow momentum SGD with momentum
``1 - 1/n`` and step ``lr / n`` exactly (the paper's theorem; its only approximation,
staleness independent of the parameters, is checked here by the simulation itself).
Explicit server momentum ``mu_e`` adds to the implicit one, and ``implicit_correction``
removes the implicit part.

The comparison is commit by commit. All n workers start at theta0, which in expectation is
a momentum buffer already at its stationary value for the initial gradient,
``g(theta0) / (1 - momentum)``; the synchronous reference starts its buffer there too (with
a cold buffer the first commits differ: 14 % of |theta0| at most here, then they agree).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim import rules

H = np.array([1.0, 0.3], np.float32)  # curvatures of the quadratic 0.5 * sum(h theta^2)
N, MOMENTUM, STEP = 10, 0.9, 0.003  # STEP = lr / n, the synchronous step
COMMITS, SEEDS = 1000, 256
# max_t |E theta_t - theta_sync_t| / |theta0|, measured 0.020 (Monte-Carlo error 7e-4).
TRACKING_TOLERANCE = 0.03


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def mean_trajectory(rule, n, commits, seeds, key):
    """Mean over seeds of theta after each commit; committers i.i.d. uniform over workers."""
    h = jnp.asarray(H)
    theta0 = {"theta": jnp.ones_like(h)}

    def one(key):
        state = rule.init(theta0, n)
        slots = jnp.ones((n, h.size), jnp.float32)  # the parameters each worker pulled
        pulled = jnp.zeros(n, jnp.int32)  # the version each worker pulled

        def commit(carry, kw):
            theta, server, slots, pulled = carry
            k, w = kw
            x0 = {"theta": slots[w]}
            g = {"theta": h * slots[w]}
            ctx = rules.CommitContext(k - pulled[w], k, jnp.asarray(True))
            work = rules.Work(x0, x0, g)
            theta, server, _, _ = rule.commit(theta, server, state.workers, work, ctx)
            carry = (theta, server, slots.at[w].set(theta["theta"]), pulled.at[w].set(k + 1))
            return carry, theta["theta"]

        order = jax.random.randint(key, (commits,), 0, n)
        steps = (jnp.arange(commits, dtype=jnp.int32), order)
        _, traj = jax.lax.scan(commit, (theta0, state.server, slots, pulled), steps)
        return traj

    return jnp.mean(jax.vmap(one)(jax.random.split(key, seeds)), axis=0)


def synchronous_momentum(step, momentum, commits):
    """Momentum SGD (``v <- mu v + g; theta <- theta - step v``), buffer started at its
    stationary value for the initial gradient."""
    theta = np.ones_like(H, dtype=np.float64)
    v = H * theta * momentum / (1 - momentum)
    out = []
    for _ in range(commits):
        v = momentum * v + H * theta
        theta = theta - step * v
        out.append(theta)
    return np.array(out)


@pytest.fixture(scope="module")
def reference():
    return synchronous_momentum(STEP, MOMENTUM, COMMITS)


def _mean(implicit_correction):
    rule = rules.server_momentum(lr=STEP * N, momentum=MOMENTUM, implicit_correction=True)
    if not implicit_correction:
        rule = rules.server_momentum(lr=STEP * N, momentum=MOMENTUM)
    return np.asarray(mean_trajectory(rule, N, COMMITS, SEEDS, jax.random.PRNGKey(1)))


def test_with_the_correction_the_mean_tracks_synchronous_momentum(reference):
    # momentum 0.9 with 10 workers: the implicit momentum 1 - 1/10 is all of it, mu_e = 0
    mean = _mean(implicit_correction=True)
    assert np.max(np.abs(mean - reference)) <= TRACKING_TOLERANCE
    assert mean[-1].max() < 0.01  # and it converged, as the reference did


def test_without_it_the_mean_overshoots(reference):
    mean = _mean(implicit_correction=False)  # total momentum ~ 0.9 + 0.9
    assert reference.min() > -0.01  # the synchronous run barely passes the optimum
    assert mean[: COMMITS // 4].min() < -0.5  # the asynchronous mean swings far past it
    assert np.max(np.abs(mean - reference)) > 10 * TRACKING_TOLERANCE
