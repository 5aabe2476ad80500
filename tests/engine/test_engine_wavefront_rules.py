"""Rules with server timestamps, buffers, discards, gaps and local optimizers in both
executors: the batched (wavefront) executor gives the sequential executor's parameters and
diagnostics on a trace with a late join and a restart (the classic rules:
test_engine_batched.py)."""

import jax
import numpy as np
import optax
import pytest
from engine_helpers import cluster, quadratic

from gemsim import engine, rules, timing

# Each rule compiles both executors (~6 s of CPU here, the bulk of this file's time).
pytestmark = pytest.mark.slow
COMMITS = 240

RULES = {
    "delay_adaptive": rules.delay_adaptive(lr=0.02, tau_c=2.0),
    "ringmaster": rules.ringmaster(lr=0.02, threshold=3),
    "rennala": rules.rennala(lr=0.05, batch=3),
    "malenia": rules.malenia(lr=0.05, batch=3),
    "fedbuff": rules.fedbuff(lr=0.02, window=2, buffer=3, server_lr=0.9),
    "fedasync": rules.fedasync(lr=0.02, alpha=0.5, rho=0.1, window=2),
    "server_momentum": rules.server_momentum(lr=0.01, momentum=0.9, implicit_correction=True),
    "gap_aware": rules.gap_aware(lr=0.02, momentum=0.5),
    "eamsgd": rules.eamsgd(lr=0.02, alpha=0.2, window=2, momentum=0.9),
    "local": rules.local(inner=optax.adamw(0.01), window=2),
}

DIAGNOSTICS = {
    "ringmaster": ("delay",),
    "rennala": ("delay",),
    "malenia": ("delay",),
    "fedbuff": ("delay",),
    "fedasync": ("mixing",),
    "gap_aware": ("gap_max", "frac_penalized"),
}


def churn_trace(window: int):
    spec = cluster(
        4,
        compute=timing.LogNormal(0.1, 0.3),
        speeds=[1.0, 2.0, 0.5, 1.0],
        failures={1: [timing.Failure(at=2.0, restart_after=0.5)]},
        joins={3: 1.0},
        budget=COMMITS,
        window=window,
    )
    trace = timing.simulate(spec, seed=4)
    # a late join and a restart: new lives that pull a version past 0
    assert np.count_nonzero(trace.fresh & (trace.pulled_version > 0)) == 2
    return trace


@pytest.fixture(scope="module")
def problem():
    return quadratic(dim=6, condition=10.0, noise=0.1, seed=2)


@pytest.mark.parametrize("name", list(RULES))
def test_batched_equals_sequential_under_churn(name, problem):
    rule = RULES[name]
    plan = engine.plan_of(churn_trace(rule.window), window=rule.window, eval_every=80)
    kw = dict(params=problem.init_params, n_workers=plan.n_workers, chunk=64)
    seq = engine.SequentialExecutor(rule, problem, **kw).execute(plan)
    bat = engine.WavefrontExecutor(rule, problem, **kw).execute(plan)
    assert seq.status == bat.status and seq.n_commits == bat.n_commits == COMMITS
    # the same bar as tests/engine/test_engine_batched.py: the two executors fuse the same
    # arithmetic differently (adamw's normalisation turns ulps into 1e-6 steps)
    for a, b in zip(jax.tree.leaves(seq.params), jax.tree.leaves(bat.params), strict=True):
        assert np.max(np.abs(a - b)) <= 1e-5 * (1 + np.max(np.abs(a)))
    assert not np.allclose(np.asarray(seq.params["theta"]), 1.0)  # it moved
    # every diagnostic of the rule's info is a metrics column
    assert {"update_norm", "weight", *DIAGNOSTICS.get(name, ())} <= set(seq.metrics)
    for key in seq.metrics:
        np.testing.assert_allclose(
            bat.metrics[key], seq.metrics[key], rtol=1e-4, atol=1e-5, err_msg=key
        )
