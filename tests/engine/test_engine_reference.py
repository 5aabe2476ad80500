"""The engine against an independent numpy loop on a noiseless quadratic.

The reference keeps every PS version (not one slot per worker), so it checks the engine's
snapshot slots, host fills (late joins, restarts) and commit order independently. A worker's
new life (its join or restart, the trace's `fresh` flag) starts GEM's proxy at zero and its
`s` at the value it pulled.

The setting is chosen so that the comparison is well-posed in float32: once theta nears 0,
GEM's pi = (kappa|m| - |d|) / |dtheta| divides a cancellation by a tiny step, and float32
and float64 numpy references themselves drift apart (1e-4 after 50 commits at lr 0.02,
condition 20). At lr 0.001, condition 10, they agree to 2e-7 over 500 commits.
"""

import jax
import numpy as np
import pytest
from compiles import count_compiles
from engine_helpers import assert_reported, assert_same, cluster, curvature, execute, quadratic

from gemsim import engine, rules, timing
from gemsim.engine._layout import initial_slots

F = np.float32


def heterogeneous_trace(seed=3, budget=500):
    spec = cluster(
        5,
        speeds=[1.0, 1.0, 2.0, 4.0, 1.5],
        failures={1: [timing.Failure(at=3.0, restart_after=2.0)]},
        joins={4: 1.5},
        budget=budget,
    )
    trace = timing.simulate(spec, seed=seed)
    assert trace.staleness.max() > trace.staleness.min()  # varied staleness
    return trace


def reference(trace, h, update):
    """Run a rule's commit `update(k, w, x, theta, tau, state) -> theta` with full history."""
    theta = np.ones_like(h)
    versions = [theta.copy()]
    state = {}
    for k in range(len(trace)):
        w, v = int(trace.worker[k]), int(trace.pulled_version[k])
        x = versions[v]
        if trace.fresh[k]:
            state.pop(w, None)
            state[("pulled", w)] = x.copy()
        theta = update(k, w, x, theta, int(trace.staleness[k]), state, h)
        versions.append(theta.copy())
    return theta


def gem_update(lr, mu=0.9, kappa=1.0, pi_max=5.0, eps=1e-12):
    """GEM (Hermans & Louppe 2018, Algorithm 1, with the authors' code's gradient at the value
    pulled right after the worker's own commit): m <- mu m + dtheta; d = theta - s;
    pi = clip((kappa |m| - |d|) / (|dtheta| + eps), 0, pi_max); theta <- theta + pi dtheta."""

    def update(k, w, x, theta, tau, state, h):
        m, s = state.setdefault(w, (np.zeros_like(theta), state[("pulled", w)]))
        dth = F(-lr) * (h * x)
        m = F(mu) * m + dth
        d = theta - s
        pi = np.clip((F(kappa) * np.abs(m) - np.abs(d)) / (np.abs(dth) + F(eps)), 0, pi_max)
        state[w] = (m, theta.copy())
        return (theta + pi.astype(F) * dth).astype(F)

    return update


def sgd_update(lr, weight=lambda tau: 1.0):
    """DOWNPOUR with one local step (Dean et al. 2012), and the GEM paper's staleness baseline
    theta <- theta - lr weight(tau) g (DynSGD's 1 / (tau + 1))."""

    def update(k, w, x, theta, tau, state, h):
        return (theta - F(lr * weight(tau)) * (h * x)).astype(F)

    return update


@pytest.mark.parametrize(
    "rule,update",
    [
        (rules.gem(lr=0.001), gem_update(0.001)),
        (rules.gem(lr=0.001, momentum=0.5, kappa=2.0), gem_update(0.001, mu=0.5, kappa=2.0)),
        (rules.downpour(lr=0.001), sgd_update(0.001)),
        (rules.staleness(lr=0.003), sgd_update(0.003, lambda tau: 1.0 / (tau + 1))),
    ],
    ids=["gem", "gem-kappa2", "downpour", "staleness"],
)
def test_engine_equals_numpy_loop_on_heterogeneous_trace(rule, update):
    trace = heterogeneous_trace()
    # a late join and a restart: lives that start from a pull, past the first commit
    assert np.count_nonzero(trace.fresh & (trace.pulled_version > 0)) == 2
    problem = quadratic(condition=10.0)
    out = execute(rule, problem, trace, chunk=64, eval_every=50)
    expected = reference(trace, curvature(problem), update)
    got = np.asarray(out.params["theta"])
    assert out.n_commits == len(trace)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert not np.allclose(expected, 1.0)  # the run moved


@pytest.mark.bitexact
def test_chunking_does_not_change_results():
    """Parameters bit for bit; the reported per-commit sums within the documented 1e-6 (each
    loop length fuses them its own way)."""
    trace = heterogeneous_trace(budget=150)
    problem = quadratic()
    a = execute(rules.gem(lr=0.001), problem, trace, chunk=512)
    b = execute(rules.gem(lr=0.001), problem, trace, chunk=8, eval_every=7)
    np.testing.assert_array_equal(a.params["theta"], b.params["theta"])
    for name in a.metrics:
        assert_reported(a.metrics[name], b.metrics[name], 1e-6, err_msg=name)


def test_evaluations_happen_every_n_commits_and_at_the_end():
    trace = heterogeneous_trace(budget=130)
    out = execute(rules.downpour(lr=0.02), quadratic(), trace, eval_every=50)
    assert sorted(out.evals) == [49, 99, 129]
    h = curvature(quadratic())
    theta = np.asarray(out.params["theta"], dtype=np.float64)
    assert out.evals[129]["train_loss"] == pytest.approx(0.5 * np.sum(h * theta**2), rel=1e-5)


@pytest.mark.bitexact
@pytest.mark.parametrize("chunk", [512, 8])
def test_divergence_keeps_the_last_finite_state(chunk):
    trace = heterogeneous_trace(budget=300)
    problem = quadratic(condition=10.0)
    out = execute(rules.downpour(lr=0.5), problem, trace, chunk=chunk, eval_every=16)
    assert out.status.value == "diverged"
    j = out.diverged_at
    assert 0 < j < 300 and out.n_commits == j
    assert len(out.metrics["batch_loss"]) == j + 1 and not out.metrics["finite"][-1]
    assert out.metrics["finite"][:-1].all()
    h = curvature(problem)
    head = trace.__class__.from_columns(
        **{
            c: getattr(trace, c)[:j]
            for c in (
                "time",
                "worker",
                "pulled_version",
                "compute_time",
                "queue_time",
                "service_time",
            )
        },
        n_workers=trace.n_workers,
        duration=float(trace.time[j - 1]),
    )
    expected = reference(head, h, sgd_update(0.5))
    assert np.all(np.isfinite(out.params["theta"]))
    np.testing.assert_allclose(out.params["theta"], expected, rtol=1e-5)
    assert all(k < j for k in out.evals)


def _executor(kind, rule, problem, n):
    cls = engine.WavefrontExecutor if kind == "wavefront" else engine.SequentialExecutor
    return cls(rule, problem, params=problem.init_params, n_workers=n, chunk=16)


@pytest.mark.bitexact
@pytest.mark.parametrize("kind", ["sequential", "wavefront"])
def test_a_run_written_over_the_last_runs_slots_gives_a_fresh_executors_result(kind):
    """An executor writes a run's initial rows into the slots its last run left (host fills,
    spare row and all): the buffer is the same, its contents those of a fresh carry (and of
    the rows built apart, `initial_slots`), the run's result that of a fresh executor, after a
    finished run and after a diverged one; and the first run's start, into a zeroed buffer,
    compiled the one program every later start uses."""
    trace = heterogeneous_trace(budget=120)  # a restart and a late join: host fills
    plan = engine.plan_of(trace, window=1)
    problem = quadratic()
    other = jax.tree.map(lambda p: 0.5 * p, problem.init_params)
    rule, n = rules.gem(lr=0.001), trace.n_workers
    used = _executor(kind, rule, problem, n)
    used.execute(plan)
    kept = used._spare.unsafe_buffer_pointer()
    with count_compiles() as compiles:
        carry = used.initial_carry(other)
    assert compiles[0] == 0  # the first run compiled the program that starts every run
    assert carry.slots.unsafe_buffer_pointer() == kept
    fresh = _executor(kind, rules.gem(lr=0.001), problem, n)
    np.testing.assert_array_equal(carry.slots, fresh.initial_carry(other).slots)
    apart = initial_slots(used.layout, other, rule.init(other, n).workers, n)
    np.testing.assert_array_equal(carry.slots, apart)
    used._keep(carry)
    assert_same(used.execute(plan, params=other), fresh.execute(plan, params=other))

    diverging = _executor(kind, rules.downpour(lr=0.5), quadratic(condition=10.0), 5)
    first = diverging.execute(plan)
    assert first.status.value == "diverged"
    assert_same(diverging.execute(plan), first)
    assert_same(
        diverging.execute(plan.truncated(first.diverged_at)),
        _executor(kind, rules.downpour(lr=0.5), quadratic(condition=10.0), 5).execute(
            plan.truncated(first.diverged_at)
        ),
    )
