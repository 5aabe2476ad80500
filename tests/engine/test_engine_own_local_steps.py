"""Workers with local steps of their own (a trace's `local_steps` column): each commit runs
its own number of steps on its worker's next batches, in both executors and for many runs
together, checked against a replay that counts each worker's batches itself."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from engine_helpers import cluster, quadratic

from gemsim import engine, problems, rules, timing

DIM = 4
WINDOWS = (5, 3, 1)


def _trace(seed=3, windows=WINDOWS, commits=24):
    base = cluster(len(windows), budget=commits, window=max(windows))
    return timing.simulate(dataclasses.replace(base, windows=windows), seed=seed)


def _replay(prob, trace, lr_in, lr_out):
    """Local SGD with an outer SGD step written out: commit k's data owner (its worker, or
    a population's client) takes `local_steps[k]` SGD steps from the version it pulled on
    the next batches of its own stream; the server moves by `lr_out` times the
    pseudo-gradient."""
    grad = jax.jit(jax.grad(prob.loss))
    theta0 = np.asarray(prob.init_params["theta"], np.float64)
    versions = [theta0]
    owners = trace.worker if trace.client is None else trace.client
    used = dict.fromkeys(range(trace.n_workers if trace.client is None else trace.n_clients), 0)
    for k in range(len(trace)):
        w, pulled = int(owners[k]), int(trace.pulled_version[k])
        x0 = jnp.asarray(versions[pulled], jnp.float32)
        x = x0
        for _ in range(int(trace.local_steps[k])):
            batch = prob.batch(w, used[w])
            x = x - lr_in * grad({"theta": x}, batch, batch.key)["theta"]
            used[w] += 1
        versions.append(versions[-1] - lr_out * np.asarray(x0 - x, np.float64))
    return versions[-1], used


def test_each_commit_runs_its_own_steps_in_both_executors():
    prob = quadratic(dim=DIM, condition=4.0, noise=0.1, seed=1)
    trace = _trace()
    assert set(trace.local_steps.tolist()) == set(WINDOWS)
    rule = rules.local(inner=optax.sgd(0.05), outer=optax.sgd(0.5), window=max(WINDOWS))
    expected, used = _replay(prob, trace, 0.05, 0.5)
    plan = engine.plan_of(trace, window=rule.window)
    for w, steps in used.items():  # a worker's batches follow on from commit to commit
        mine = np.flatnonzero(plan.worker == w)
        assert (
            plan.first_step[mine].tolist() == np.cumsum([0, *trace.local_steps[mine][:-1]]).tolist()
        )
        assert steps == trace.local_steps[mine].sum()
    for executor in (engine.SequentialExecutor, engine.WavefrontExecutor):
        ex = executor(rule, prob, params=prob.init_params, n_workers=trace.n_workers, chunk=8)
        out = ex.execute(plan)
        np.testing.assert_allclose(
            np.asarray(out.params["theta"]),
            expected,
            rtol=2e-5,
            atol=1e-6,
            err_msg=executor.__name__,
        )


def test_equal_own_windows_are_the_rules_window_bit_for_bit():
    """A local_steps column that says what the rule's window says changes nothing."""
    prob = quadratic(dim=DIM, condition=4.0, noise=0.1, seed=2)
    rule = rules.local(inner=optax.sgd(0.05), outer=optax.sgd(0.7), window=3)
    fixed = timing.simulate(cluster(3, budget=18, window=3), seed=5)
    own = _trace(seed=5, windows=(3, 3, 3), commits=18)
    np.testing.assert_array_equal(fixed.time, own.time)
    outs = []
    for trace in (fixed, own):
        ex = engine.SequentialExecutor(rule, prob, params=prob.init_params, n_workers=3, chunk=8)
        outs.append(np.asarray(ex.execute(engine.plan_of(trace, window=3)).params["theta"]))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_many_runs_with_own_steps_equal_their_single_runs():
    """Runs executed together, each with its own trace of own local steps, reach the
    parameters of their single runs (and the replay's)."""
    prob = quadratic(dim=DIM, condition=4.0, noise=0.1, seed=1)
    traces = [_trace(seed=s) for s in (1, 2)]
    rule = rules.local(inner=optax.sgd(0.05), outer=optax.sgd(0.5), window=max(WINDOWS))
    runs, singles = [], []
    for trace in traces:
        plan = engine.plan_of(trace, window=rule.window)
        runs.append(engine.RunInputs(plan, prob, prob.init_params, {}))
        ex = engine.SequentialExecutor(rule, prob, params=prob.init_params, n_workers=3, chunk=8)
        singles.append(ex.execute(plan))
        expected, _ = _replay(prob, trace, 0.05, 0.5)
        np.testing.assert_allclose(
            np.asarray(singles[-1].params["theta"]), expected, rtol=2e-5, atol=1e-6
        )
    many = engine.ManyRunsExecutor(lambda h: rule, runs[0], n_workers=3, chunk=8)
    for got, want in zip(many.execute(runs), singles, strict=True):
        np.testing.assert_allclose(
            np.asarray(got.params["theta"]), np.asarray(want.params["theta"]), rtol=1e-6, atol=1e-7
        )
    fixed = engine.plan_of(timing.simulate(cluster(3, budget=24, window=5), seed=1), window=5)
    mixed = [runs[0], engine.RunInputs(fixed, prob, prob.init_params, {})]
    with pytest.raises(ValueError, match="local_steps"):
        many.execute(mixed)


def test_a_commit_after_lost_pushes_starts_from_a_plain_pull():
    """After a lost push the worker pulled anew: its next gradient is a host fill (the rule's
    pull hook runs), even where no other commit came between."""
    base = cluster(2, budget=40)
    trace = timing.simulate(dataclasses.replace(base, drop_push=0.4), seed=2)
    plan = engine.plan_of(trace)
    after_loss = np.flatnonzero(trace.dropped > 0)
    assert after_loss.size
    filled = {int(k) + 1 for k, ws in plan.host_fills.items() for _ in ws}
    for k in after_loss.tolist():
        prev = np.flatnonzero(trace.worker[:k] == trace.worker[k])
        if prev.size:
            assert not plan.fill_self[prev[-1]]
            assert int(trace.pulled_version[k]) in filled | {0}


def test_a_populations_clients_run_their_own_steps_on_their_own_streams():
    """DyLU per client (`ClusterSpec.dynamic_window`): each task runs its client's count of
    steps on the client's next batches, counted over the client's tasks (the sequential
    executor; the wavefront one reads the same plan columns, checked above for workers)."""
    n_clients, h = 10, 5
    spec = timing.ClusterSpec(
        workers=(timing.WorkerSpec(timing.LogNormal(0.3, 0.5)),) * 3,
        budget=timing.CommitBudget(30),
        population=timing.Population(n_clients, speed=timing.LogNormal(1.0, 0.8)),
        window=h,
        dynamic_window=h,
    )
    trace = timing.simulate(spec, seed=2)
    assert len(set(trace.local_steps.tolist())) > 1
    prob = problems.make_problem(
        problems.Quadratic(dim=DIM, condition=4.0, noise=0.1, heterogeneity=1.0),
        None,
        batch_size=1,
        seed=1,
        n_workers=n_clients,
    )
    rule = rules.local(inner=optax.sgd(0.05), outer=optax.sgd(0.5), window=h)
    expected, used = _replay(prob, trace, 0.05, 0.5)
    plan = engine.plan_of(trace, window=h)
    for c, steps in used.items():
        mine = np.flatnonzero(trace.client == c)
        assert (
            plan.first_step[mine].tolist() == np.cumsum([0, *trace.local_steps[mine][:-1]]).tolist()
        )
        assert steps == trace.local_steps[mine].sum()
    ex = engine.SequentialExecutor(rule, prob, params=prob.init_params, n_workers=3, chunk=8)
    out = ex.execute(plan)
    np.testing.assert_allclose(np.asarray(out.params["theta"]), expected, rtol=2e-5, atol=1e-6)
