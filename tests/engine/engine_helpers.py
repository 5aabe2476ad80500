"""Small builders shared by the engine tests (traces, problems, executors)."""

import jax
import numpy as np

from gemsim import engine, problems, timing


def cluster(
    n,
    *,
    compute=None,
    speeds=None,
    budget=300,
    failures=None,
    joins=None,
    window=1,
    synchronous=False,
):
    compute = compute or timing.LogNormal(0.1, 0.3)
    speeds = speeds or [1.0] * n
    failures = failures or {}
    joins = joins or {}
    workers = tuple(
        timing.WorkerSpec(
            compute=compute,
            speed=speeds[w],
            join_at=joins.get(w, 0.0),
            failures=tuple(failures.get(w, ())),
        )
        for w in range(n)
    )
    return timing.ClusterSpec(
        workers=workers,
        pull=None,
        push=None,
        bandwidth_bytes_per_s=None,
        model_bytes=0,
        service=None,
        discipline=timing.Discipline.FIFO,
        window=window,
        synchronous=synchronous,
        budget=timing.CommitBudget(budget),
    )


def quadratic(dim=6, condition=20.0, noise=0.0, seed=0):
    return problems.make_problem(
        problems.Quadratic(dim=dim, condition=condition, noise=noise), None, batch_size=1, seed=seed
    )


def execute(rule, problem, trace, *, chunk=64, eval_every=None):
    plan = engine.plan_of(trace, window=rule.window, eval_every=eval_every)
    ex = engine.SequentialExecutor(
        rule, problem, params=problem.init_params, n_workers=trace.n_workers, chunk=chunk
    )
    return ex.execute(plan)


def curvature(problem):
    return np.asarray(problems.quadratic_curvature(problem.model), dtype=np.float32)


def assert_same(a, b, metrics_rtol=0.0):
    """Two EngineResults of one run are equal, every bit (NaN where NaN); the per-commit
    metrics and evaluations (sums) within `metrics_rtol` where given (`assert_reported`)."""
    assert a.status == b.status and a.n_commits == b.n_commits
    assert a.diverged_at == b.diverged_at
    for x, y in zip(leaves(a.params), leaves(b.params), strict=True):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(leaves(a.server_state), leaves(b.server_state), strict=True):
        np.testing.assert_array_equal(x, y)
    assert a.metrics.keys() == b.metrics.keys()
    for k in a.metrics:
        if metrics_rtol:
            assert_reported(a.metrics[k], b.metrics[k], metrics_rtol, err_msg=k)
        else:
            np.testing.assert_array_equal(a.metrics[k], b.metrics[k], err_msg=k)
    assert a.evals.keys() == b.evals.keys()
    pairs = [(a.evals[k], b.evals[k]) for k in a.evals] + [(a.final, b.final)]
    for x, y in pairs:
        assert x.keys() == y.keys()
        assert_reported(list(x.values()), list(y.values()), metrics_rtol)
    assert a.worker_evals.keys() == b.worker_evals.keys()
    pairs = [(a.worker_evals[k], b.worker_evals[k]) for k in a.worker_evals]
    for x, y in [*pairs, (a.final_workers, b.final_workers)]:
        assert x.keys() == y.keys()
        for name in x:
            assert_reported(x[name], y[name], metrics_rtol, err_msg=name)
    assert a.worker_facts.keys() == b.worker_facts.keys()
    for name in a.worker_facts:
        np.testing.assert_array_equal(a.worker_facts[name], b.worker_facts[name])


def assert_reported(x, y, rtol, err_msg=""):
    """Reported sums `x` and `y` (one metric over a run) agree within `rtol` of the metric's
    largest magnitude: a sum's rounding error scales with its terms, not with its value, and
    a sum that cancels to near zero (a noisy quadratic's batch loss) keeps an absolute error
    of a few ulps of its terms. NaN where NaN."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    finite = np.abs(y[np.isfinite(y)])
    scale = finite.max() if finite.size else 0.0
    np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale, err_msg=err_msg)


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]
