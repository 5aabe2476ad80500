"""The batched (wavefront) executor gives the sequential executor's results.

GEM runs on a model with data (an MLP on digits): the wave's vmapped gradients gather each
worker's mini-batch from the data set, and GEM's diagnostics take their histogram path. The
other rules run on a noisy quadratic: what differs between them is the commit and the local
steps, not the model. Each case compiles a program per wave width and the sequential loop:
on the MLP 6-7 s of a 2-core machine, on the quadratic 4 s."""

from typing import NamedTuple

import jax
import numpy as np
import pytest
from engine_helpers import cluster, quadratic

from gemsim import engine, problems, rules, timing
from gemsim.engine._wavefront import width_bucket

COMMITS = 500


def hetero_trace(window=1, n=8, seed=5):
    spec = cluster(
        n,
        compute=timing.LogNormal(0.1, 0.25),
        speeds=[1.0, 1.0, 1.0, 2.0, 2.0, 0.5, 1.0, 3.0][:n],
        failures={2: [timing.Failure(at=2.0, restart_after=1.0)]},
        joins={6: 0.7},
        budget=COMMITS,
        window=window,
    )
    return timing.simulate(spec, seed=seed)


def mlp():
    return problems.make_problem(
        problems.Mlp(hidden=(16,)), problems.Digits(), batch_size=16, seed=1
    )


def noisy_quadratic():
    return quadratic(dim=6, condition=10.0, noise=0.1, seed=1)


def run_both(rule, trace, prob):
    plan = engine.plan_of(trace, window=rule.window, eval_every=100)
    kw = dict(params=prob.init_params, n_workers=trace.n_workers, chunk=64)
    seq = engine.SequentialExecutor(rule, prob, **kw).execute(plan)
    batched = engine.WavefrontExecutor(rule, prob, **kw)
    bat = batched.execute(plan)
    return Both(seq, bat, batched, plan, batched.compiled_programs())


class Both(NamedTuple):
    seq: engine.EngineResult
    bat: engine.EngineResult
    executor: engine.WavefrontExecutor
    plan: engine.ExecutionPlan
    compiled_after: int  # the executor's programs right after its first plan


CASES = {  # rule, problem (the trace's window is the rule's)
    "gem": (rules.gem(lr=0.02), mlp),
    "downpour": (rules.downpour(lr=0.05), noisy_quadratic),
    "agn-window4": (rules.agn(lr=0.05, window=4), noisy_quadratic),
    "easgd": (rules.easgd(lr=0.05, alpha=0.2, window=2), noisy_quadratic),
}


@pytest.fixture(scope="module")
def both():
    """Each case run once by both executors; the compilation test reuses the gem case."""
    done: dict[str, Both] = {}

    def get(name: str) -> Both:
        if name not in done:
            rule, problem = CASES[name]
            done[name] = run_both(rule, hetero_trace(rule.window), problem())
        return done[name]

    return get


def waves_of(plan, executor) -> list[tuple[int, int]]:
    """The waves the executor runs for the plan (its segments, then waves within each)."""
    return [
        w for a, b in plan.segments(executor.chunk) for w in plan.waves(a, b, executor.max_width)
    ]


@pytest.mark.parametrize("name", list(CASES))
def test_batched_equals_sequential(name, both):
    seq, bat, executor, plan, _ = both(name)
    assert seq.status == bat.status and seq.n_commits == bat.n_commits == COMMITS
    scale = 1 + max(float(np.abs(x).max()) for x in jax.tree.leaves(seq.params))
    for a, b in zip(jax.tree.leaves(seq.params), jax.tree.leaves(bat.params), strict=True):
        assert np.max(np.abs(a - b)) <= 1e-5 * scale
    assert seq.metrics.keys() == bat.metrics.keys()
    for key in seq.metrics:
        np.testing.assert_allclose(
            bat.metrics[key], seq.metrics[key], rtol=1e-4, atol=1e-5, err_msg=key
        )
    assert seq.evals.keys() == bat.evals.keys()
    # waves really batch: far fewer waves than commits, and few compiled programs
    assert len(waves_of(plan, executor)) < COMMITS / 2
    assert executor.compiled_programs() <= int(np.log2(executor.max_width)) + 1


def test_waves_respect_dependencies():
    trace = hetero_trace()
    plan = engine.plan_of(trace)
    pulled = np.arange(len(plan)) - plan.staleness
    covered = []
    for a, b in plan.waves(0, len(plan), 8):
        assert np.all(pulled[a:b] <= a)
        assert len(set(plan.worker[a:b].tolist())) == b - a
        covered.extend(range(a, b))
    assert covered == list(range(len(plan)))


def test_compilations_are_bounded_by_width_buckets(both):
    """One program per padded width used, and another trace reuses the widths compiled."""
    _, _, executor, plan, first = both("gem")
    assert executor.max_width == 8
    used = {width_bucket(b - a) for a, b in waves_of(plan, executor)}
    assert first == len(used) >= 2  # exactly one program per bucket its waves used
    other = hetero_trace(n=8, seed=9)  # another trace: new wave widths reuse the buckets
    other_plan = engine.plan_of(other)
    executor.execute(other_plan)
    used |= {width_bucket(b - a) for a, b in waves_of(other_plan, executor)}
    assert executor.compiled_programs() == len(used) <= int(np.log2(8)) + 1
    assert [width_bucket(m) for m in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
