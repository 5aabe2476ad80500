"""The mechanism each paper relies on, checked on behaviour rather than against a reference (a
reference sharing the code's reading of a paper would miss what these see).

- Ringmaster (Maranjyan et al. 2025, Algorithm 4) counts delays in applied updates: on
  workers of equal speed it keeps what the paper's counter keeps, for every threshold, and
  never stops training while gradients are nonzero (counting every commit, discards
  included, kept 1 % of the gradients of the scenario below and stalled).
- Gap-Aware (Barkai et al. 2020) measures a gap in typical *steps*: a gap of one step costs
  a penalty of 2, with or without momentum.
- FedAsync (Xie et al. 2019, Algorithm 1) weighs a fresh update by s(1); Rennala (Tyurin &
  Richtárik 2023) sends the worker that completes a batch the point before the step.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim import rules, timing
from gemsim.app import run
from gemsim.config import Scenario, build_cluster

F = np.float32


def scenario(n, compute, optimizer, commits, **extra) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "papers",
            "seed": 0,
            "workers": {"count": n, "compute": compute},
            "problem": {"model": {"name": "quadratic", "dim": 10, "condition": 4.0, "noise": 0.0}},
            "optimizer": optimizer,
            "budget": {"commits": commits},
            **extra,
        }
    )


def simulated(scenario: Scenario):
    """The run of ``scenario``. The engine packs int32 worker state (timestamps) into float32
    rows, a promotion this folder's strict-numerics fixture forbids; runs use the standard
    rules."""
    with jax.numpy_dtype_promotion("standard"):
        return run(scenario)


EQUAL = {"dist": "lognormal", "median": 0.1, "sigma": 0.05}  # equal speeds, random order


def paper_kept(trace, threshold: int) -> int:
    """Gradients Algorithm 4 applies on ``trace`` (no joins or restarts): the server's k counts
    applied gradients; a worker holds the index of the point it received at its last commit
    ("if delta < R: update, k = k + 1"; either way the worker receives the current point)."""
    k, index, kept = 0, {}, 0
    for w in trace.worker.tolist():
        if k - index.get(w, 0) < threshold:
            kept, k = kept + 1, k + 1
        index[w] = k
    return kept


def test_ringmaster_on_nearly_equal_workers_keeps_half_and_trains():
    """The scenario where counting commits stalled: 1 % kept, the loss flat from commit 99."""
    optimizer = {"rule": "ringmaster", "lr": 0.05, "threshold": 2}
    result = simulated(scenario(4, EQUAL, optimizer, 400, eval={"every": 50}))
    kept = result.metrics["weight"].to_numpy()
    assert 0.4 <= kept.mean() <= 0.6
    assert kept.sum() == paper_kept(result.trace, 2)
    loss = result.metrics["train_loss"].dropna().to_numpy()
    assert len(loss) == 8 and np.all(np.diff(loss) < 0) and loss[-1] < 1e-6 * loss[0]


def test_ringmaster_two_equal_workers_threshold_one_keeps_every_other_gradient():
    """Constant compute: both workers commit in every round, worker 0 first (the timing
    model's tie order); R = 1 keeps the first gradient of each round, 20 of 40."""
    constant = {"dist": "constant", "value": 0.1}
    result = simulated(
        scenario(2, constant, {"rule": "ringmaster", "lr": 0.05, "threshold": 1}, 40)
    )
    assert result.metrics["weight"].sum() == 20 == paper_kept(result.trace, 1)
    np.testing.assert_array_equal(result.metrics["weight"], np.tile([1.0, 0.0], 20))


def _quadratic(dim=10, seed=3):
    h = np.random.default_rng(seed).uniform(1.0, 4.0, dim).astype(F)
    return h, np.ones(dim, F)


def _drive_ringmaster(rule, commit, trace, threshold, h, x0):
    """``rule``'s commit, jitted once for every threshold (it lives in the server state), on
    the noiseless quadratic ``0.5 sum(h x^2)``; returns (kept per commit, loss after each)."""
    state = rule.init({"x": jnp.asarray(x0)}, trace.n_workers)
    server = state.server._replace(threshold=jnp.asarray(threshold, jnp.int32))
    workers, theta, versions = state.workers, {"x": jnp.asarray(x0)}, [x0]
    kept, loss = [], []
    for k in range(len(trace)):
        w, pv = int(trace.worker[k]), int(trace.pulled_version[k])
        ws = jax.tree.map(lambda a, w=w: a[w], workers)
        work = rules.Work({"x": versions[pv]}, {"x": versions[pv]}, {"x": h * versions[pv]})
        theta, server, ws, info = commit(theta, server, ws, work, rules.commit_context(k - pv, k))
        workers = jax.tree.map(lambda a, r, w=w: a.at[w].set(r), workers, ws)
        versions.append(np.asarray(theta["x"]))
        kept.append(float(info.weight))
        loss.append(0.5 * float(np.sum(h * versions[-1].astype(np.float64) ** 2)))
    return np.array(kept), np.array(loss)


@pytest.mark.parametrize("n", [4, 6])
def test_ringmaster_keeps_what_the_papers_counter_keeps_for_every_threshold(n):
    trace = timing.simulate(
        build_cluster(scenario(n, EQUAL, {"rule": "ringmaster", "lr": 0.05}, 30 * n)), seed=1
    )
    assert trace.staleness.max() >= n - 1  # delays reach every threshold
    rule = rules.ringmaster(0.05)
    commit = jax.jit(rule.commit)
    h, x0 = _quadratic()
    fractions = []
    for threshold in range(1, n + 1):
        kept, loss = _drive_ringmaster(rule, commit, trace, threshold, h, x0)
        assert kept.sum() >= paper_kept(trace, threshold)
        fractions.append(kept.mean())
        # every applied gradient lowers the loss and none is lost for good: training goes on
        # (one sample per round of n commits, while the gradient is far from zero)
        per_round = loss[n - 1 :: n]
        assert np.all(np.diff(per_round[per_round > 1e-10]) < 0)
        assert kept[-n:].sum() >= 1 and loss[-1] < 1e-2 * loss[0]
    assert fractions[0] >= 1 / n - 0.05 and np.all(np.diff(fractions) > 0)


# --- Gap-Aware: the penalty of a gap of exactly one typical step ------------------------------


def _gap_commit(rule, theta, server, g, gap):
    """One commit of gradient ``g`` whose pulled point is ``gap`` behind ``theta``."""
    work = rules.Work({"x": theta - gap}, {"x": theta - gap}, {"x": g})
    return rule.commit({"x": theta}, server, (), work, rules.commit_context(3, 10))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_gap_aware_penalty_of_one_typical_step_is_two(momentum):
    lr, ema = 0.1, 0.999
    rule = rules.gap_aware(lr, momentum=momentum, ema=ema)
    g = jnp.asarray([0.5, -2.0, 1e-3, 3.0], jnp.float32)
    theta = jnp.asarray([1.0, -1.0, 0.5, 2.0], jnp.float32)
    server = rule.init({"x": theta}, 2).server
    if momentum == 0:
        # 49 commits of the constant gradient with no gap: the bias-corrected mean square is
        # then g^2 at the next commit, which adds g^2 once more
        for _ in range(49):
            _, server, _, _ = _gap_commit(rule, theta, server, g, jnp.zeros_like(g))
        step = lr * jnp.abs(g)
    else:
        # the momentum buffer of a long run of constant gradients, v = g / (1 - momentum), and
        # a mean square that the next commit (which adds v^2) brings to exactly v^2
        t, v = 50, g / (1.0 - momentum)
        r = {"x": jnp.square(v) * (1.0 - jnp.float32(ema) ** (t - 1))}
        server = rules.GapAwareState(r, jnp.asarray(t - 1, jnp.int32), {"x": v})
        step = lr * jnp.abs(v)  # a typical step: lr |v|, 10 x lr |g| here
    gaps = jnp.stack([step, 0.5 * step, jnp.zeros_like(step)])
    penalties = []
    for gap in gaps:
        _, _, _, info = _gap_commit(rule, theta, server, g, gap)
        penalties.append([float(info.gap_max), float(info.weight)])
    np.testing.assert_allclose(penalties[0], [2.0, 0.5], rtol=1e-4)  # one step behind
    np.testing.assert_allclose(penalties[1], [1.5, 1 / 1.5], rtol=1e-4)  # half a step
    np.testing.assert_allclose(penalties[2], [1.0, 1.0], rtol=0)  # no gap, no penalty


def test_gap_aware_penalised_step_with_momentum():
    """The penalised gradient enters the heavy-ball buffer: v <- mu v + g / G."""
    lr, mu = 0.1, 0.9
    rule = rules.gap_aware(lr, momentum=mu)
    g, theta = jnp.asarray([1.0], jnp.float32), jnp.asarray([0.0], jnp.float32)
    v = g / (1 - mu)
    r = {"x": jnp.square(v) * (1.0 - jnp.float32(0.999) ** 9)}
    server = rules.GapAwareState(r, jnp.asarray(9, jnp.int32), {"x": v})
    new_theta, new_server, _, _ = _gap_commit(rule, theta, server, g, lr * jnp.abs(v))
    np.testing.assert_allclose(new_server.velocity["x"], mu * v + g / 2, rtol=1e-5)
    np.testing.assert_allclose(new_theta["x"], theta - lr * (mu * v + g / 2), rtol=1e-5)


# --- FedAsync and Rennala ---------------------------------------------------------------------


def test_fedasync_weighs_a_fresh_commit_by_s_of_one():
    """A worker that received the latest model has t - tau = 1 in Algorithm 1."""
    theta = {"x": jnp.zeros(3, jnp.float32)}
    local = {"x": jnp.ones(3, jnp.float32)}
    for weight, s1 in [
        (rules.Polynomial(0.5), 2**-0.5),
        (rules.Hinge(a=10, b=4), 1.0),
        (rules.Inverse(), 0.5),
        (rules.ConstantWeight(), 1.0),
    ]:
        rule = rules.fedasync(lr=0.1, alpha=0.6, weight=weight)
        work = rules.Work(theta, local, theta)
        new, _, _, info = rule.commit(theta, (), (), work, rules.commit_context(0, 7))
        np.testing.assert_allclose([info.weight, info.mixing], [s1, 0.6 * s1], rtol=1e-6)
        np.testing.assert_allclose(new["x"], 0.6 * s1, rtol=1e-6)
    stale = rules.commit_context(2, 7)
    _, _, _, info = rules.fedasync(lr=0.1).commit(
        theta, (), (), rules.Work(theta, local, theta), stale
    )
    np.testing.assert_allclose(info.weight, 4**-0.5, rtol=1e-6)  # staleness 2: t - tau = 3


def test_rennala_sends_the_completing_worker_the_point_before_the_step():
    """One worker, batch 1: each step is followed by a gradient tagged with the old index,
    which the server discards (Rennala's loop sends (x^k, k) before x^{k+1} is computed)."""
    rule = rules.rennala(lr=0.1, batch=1)
    theta = {"x": jnp.ones(2, jnp.float32)}
    state = rule.init(theta, 1)
    server, ws = state.server, jax.tree.map(lambda a: a[0], state.workers)
    kept = []
    for k in range(6):
        work = rules.Work(theta, theta, theta)
        theta, server, ws, info = rule.commit(theta, server, ws, work, rules.commit_context(0, k))
        kept.append(float(info.weight))
    assert kept == [1.0, 0.0] * 3 and int(server.timestamp) == 3


def test_defaults_follow_the_papers_and_the_number_of_workers():
    params = {"w": jnp.zeros(3)}
    assert float(rules.delay_adaptive(0.1).init(params, 7).server.tau_c) == 7.0
    assert int(rules.ringmaster(0.1).init(params, 5).server.threshold) == 5
    assert int(rules.rennala(0.1).init(params, 6).server.batch) == 6
    mu = rules.server_momentum(0.1, momentum=0.9, implicit_correction=True).init(params, 4)
    assert float(mu.server.momentum) == pytest.approx(0.15)
    mu = rules.server_momentum(0.1, momentum=0.5, implicit_correction=True).init(params, 8)
    assert float(mu.server.momentum) == 0.0
    eamsgd = scenario(2, EQUAL, {"rule": "eamsgd", "lr": 0.1, "alpha": 0.2}, 10).optimizer
    assert eamsgd.momentum == 0.99  # Zhang et al. 2015's delta
    local = scenario(2, EQUAL, {"rule": "local", "lr": 0.01}, 10).optimizer
    assert local.inner.kwargs == {"learning_rate": 0.01, "weight_decay": 0.1}  # DiLoCo's
    gap = scenario(2, EQUAL, {"rule": "gap_aware", "lr": 0.1}, 10).optimizer
    assert (gap.momentum, gap.ema) == (0.0, 0.999)
