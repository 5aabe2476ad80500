"""The outer optimizers of asynchronous local SGD against numpy replays written from their
sources: Delayed Nesterov from Liu et al. 2024 (arXiv 2401.09135), Algorithm 3, line by line;
the buffered baseline from the public toy's `delayed_sgd` synchronisation (a PyTorch SGD with
Nesterov momentum stepped once every N pseudo-gradients on their mean), both under `jax.jit`;
their parameters refused by name. `tests/engine/test_engine_local_outer.py` runs them inside
the `local` rule."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gemsim import rules

T, DIM = 23, 5


def pseudo_gradients(seed=0):
    return np.random.default_rng(seed).standard_normal((T, DIM))


def algorithm_3(g, eps, beta, n, c, theta0):
    """Delayed Nesterov, Algorithm 3: momentum m and buffer Delta start at zero; at each
    t = 1..T, when t mod N = 0 the momentum takes the period's mean and theta moves by
    (1 - cN + c) beta m + g_t / N; otherwise Delta accumulates g_t and theta moves by
    c beta m + g_t / N; both steps scaled by the step size eps."""
    theta, m, delta = theta0.copy(), np.zeros(DIM), np.zeros(DIM)
    path = []
    for t in range(1, len(g) + 1):
        gt = g[t - 1]
        if t % n == 0:
            m = beta * m + (delta + gt) / n
            theta = theta - eps * ((1 - c * n + c) * beta * m + gt / n)
            delta = np.zeros(DIM)
        else:
            delta = delta + gt
            theta = theta - eps * (c * beta * m + gt / n)
        path.append(theta.copy())
    return np.array(path)


def run_optax(tx, g, theta0):
    theta = jnp.asarray(theta0, jnp.float32)
    state = tx.init(theta)
    step = jax.jit(tx.update)
    path = []
    for gt in g:
        updates, state = step(jnp.asarray(gt, jnp.float32), state, theta)
        theta = optax.apply_updates(theta, updates)
        path.append(np.asarray(theta))
    return np.array(path)


@pytest.mark.parametrize("n,c", [(1, 0.0), (4, 0.0), (4, 0.25), (3, 0.1)])
def test_delayed_nesterov_is_algorithm_3(n, c):
    g, theta0 = pseudo_gradients(n), np.linspace(-1, 1, DIM)
    tx = rules.delayed_nesterov(0.7, period=n, momentum=0.9, activation=c)
    got = run_optax(tx, g, theta0)
    want = algorithm_3(g, 0.7, 0.9, n, c, theta0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_delayed_nesterov_with_period_one_is_nesterov_sgd():
    # N = 1: m <- beta m + g_t, theta -= eps (beta m + g_t): optax's Nesterov SGD
    g, theta0 = pseudo_gradients(3), np.linspace(-1, 1, DIM)
    got = run_optax(rules.delayed_nesterov(0.7, period=1, momentum=0.9), g, theta0)
    want = run_optax(optax.sgd(0.7, momentum=0.9, nesterov=True), g, theta0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def toy_buffered(g, lr, mu, n, theta0):
    """The toy's delayed_sgd with torch.optim.SGD(lr, momentum=mu, nesterov=True): p.grad sums
    g / N over N pseudo-gradients; at the N-th, buf = mu buf + grad (buf = grad the first
    time) and p -= lr (grad + mu buf); nothing moves in between."""
    theta, buf, grad = theta0.copy(), None, np.zeros(DIM)
    path = []
    for t, gt in enumerate(g):
        grad = grad + gt / n
        if (t + 1) % n == 0:
            buf = grad.copy() if buf is None else mu * buf + grad
            theta = theta - lr * (grad + mu * buf)
            grad = np.zeros(DIM)
        path.append(theta.copy())
    return np.array(path)


def test_buffered_nesterov_is_the_toys_buffered_sync():
    g, theta0 = pseudo_gradients(7), np.linspace(-1, 1, DIM)
    # optax's MultiSteps adds an int32 counter to floats: standard promotion, as the engine
    # runs it (the strict mode of these tests is for gemsim's own code)
    with jax.numpy_dtype_promotion("standard"):
        got = run_optax(rules.buffered_nesterov(0.7, period=4, momentum=0.9), g, theta0)
    np.testing.assert_allclose(got, toy_buffered(g, 0.7, 0.9, 4, theta0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: rules.delayed_nesterov(0.7, period=0), "period must be an integer >= 1"),
        (lambda: rules.delayed_nesterov(0.7, period=4, activation=0.3), r"activation.*0\.25"),
        (lambda: rules.delayed_nesterov(0.7, period=4, momentum=1.0), r"momentum.*\[0, 1\)"),
        (lambda: rules.delayed_nesterov(0.0, period=4), "learning_rate"),
        (lambda: rules.buffered_nesterov(0.7, period=2.5), "period must be an integer"),
    ],
)
def test_bad_values_are_named(make, match):
    with pytest.raises(ValueError, match=match):
        make()
