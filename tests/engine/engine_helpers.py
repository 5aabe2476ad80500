"""Small builders shared by the engine tests (traces, problems, executors)."""

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
