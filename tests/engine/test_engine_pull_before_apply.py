"""Pulls before apply (`server.pull: before_apply`) in every executor: the engine's pre fills
(`ExecutionPlan.fill_pre`) give the wavefront executor the sequential one's results, and runs
executed together (some pulling before apply, some not) each their own result bit for bit.
A plan without such pulls has no `pre_pull` input, so its programs are those it always had.
The references of the rules on such a trace: tests/engine/test_engine_paper_references.py."""

import dataclasses

import jax
import numpy as np
import pytest
from engine_helpers import assert_same, cluster, quadratic

from gemsim import config, engine, rules, timing
from gemsim.app.execute._stages import build_problem


def churn_trace(before: bool):
    spec = cluster(
        4,
        compute=timing.LogNormal(0.1, 0.3),
        speeds=[1.0, 2.0, 0.5, 1.0],
        failures={1: [timing.Failure(at=2.0, restart_after=0.5)]},
        joins={3: 1.0},
        budget=160,
    )
    pull_at = timing.PullAt.BEFORE_APPLY if before else timing.PullAt.AFTER_APPLY
    return timing.simulate(dataclasses.replace(spec, pull_at=pull_at), seed=4)


def test_a_plan_without_pulls_before_apply_has_no_such_input():
    plan = engine.plan_of(churn_trace(False))
    assert plan.fill_pre is None and engine.step_inputs(plan).pre_pull is None
    pre = engine.plan_of(churn_trace(True))
    assert pre.fill_pre.sum() > 100 and engine.step_inputs(pre).pre_pull is pre.fill_pre
    assert pre.truncated(50).fill_pre.tolist() == pre.fill_pre[:50].tolist()


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule",
    [rules.gem(lr=0.01), rules.ringmaster(lr=0.02, threshold=3)],
    ids=["gem", "ringmaster"],
)
def test_wavefront_equals_sequential_with_pulls_before_apply(rule):
    problem = quadratic(dim=6, condition=10.0, noise=0.1, seed=2)
    plan = engine.plan_of(churn_trace(True), eval_every=60)
    kw = dict(params=problem.init_params, n_workers=plan.n_workers, chunk=64)
    seq = engine.SequentialExecutor(rule, problem, **kw).execute(plan)
    wave = engine.WavefrontExecutor(rule, problem, **kw).execute(plan)
    assert seq.n_commits == wave.n_commits == len(plan)
    for a, b in zip(jax.tree.leaves(seq.params), jax.tree.leaves(wave.params), strict=True):
        assert np.max(np.abs(a - b)) <= 1e-5 * (1 + np.max(np.abs(a)))
    for key in seq.metrics:
        np.testing.assert_allclose(wave.metrics[key], seq.metrics[key], rtol=1e-4, atol=1e-5)


@pytest.mark.bitexact
def test_runs_executed_together_pulling_before_apply_or_not_each_get_their_own_result():
    def scenario(seed, pull):
        return config.parse_scenario(
            {
                "name": "many-pulls",
                "seed": seed,
                "workers": {
                    "count": 4,
                    "compute": {"dist": "lognormal", "median": 0.1, "sigma": 0.5},
                    "failures": [{"worker": 1, "at": 0.5, "restart_after": 0.2}],
                },
                "server": {"pull": pull},
                "budget": {"seconds": 3.0},
                "problem": {"model": {"name": "quadratic", "dim": 8, "noise": 0.1}},
                "optimizer": {"rule": "gem", "lr": 0.05},
                "eval": {"every": 25},
            },
            "test",
        )

    scenarios = [
        scenario(0, "before_apply"),
        scenario(1, "after_apply"),
        scenario(2, "before_apply"),
    ]
    assert len({config.many_runs_signature(s)[0] for s in scenarios}) == 1  # grouped together
    runs, single = [], []
    for s in scenarios:
        problem, rule = build_problem(s), config.build_rule(s)
        trace = timing.simulate(config.build_cluster(s), seed=s.seed)
        plan = engine.plan_of(trace, window=rule.window, eval_every=s.eval.every)
        runs.append(engine.RunInputs(plan, problem, problem.init_params, {}))
        ex = engine.SequentialExecutor(rule, problem, params=problem.init_params, n_workers=4)
        single.append(ex.execute(plan, problem=problem, params=problem.init_params))
    assert [r.plan.fill_pre is not None for r in runs] == [True, False, True]
    many = engine.ManyRunsExecutor(lambda h: config.build_rule(scenarios[0]), runs[0], n_workers=4)
    for got, want in zip(many.execute(runs), single, strict=True):
        assert_same(got, want)
