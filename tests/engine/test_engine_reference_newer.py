"""The engine's sequential executor against independent numpy references: the newer rules.

The references (`tests/rules/rules_reference_newer.py`) are written from the papers'
equations and share nothing with `gemsim.rules`; they keep every server version, so they
check the engine's snapshot slots, its host fills at a late join and a restart (the trace's
`fresh` flag: state that lived in the worker process starts anew from the pulled version)
and its commit order independently. The trace is simulated: five workers of different
speeds, one joining late and one restarting after a crash, 80 commits; the problem is the
noiseless quadratic (the references' gradient `a * x + b` with `a` its curvature, `b = 0`).
One compiled executor per rule.
"""

import functools
import sys
from pathlib import Path

import numpy as np
import optax
import pytest
from engine_helpers import cluster, curvature, execute, quadratic

from gemsim import rules, timing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
import rules_reference_newer as ref  # noqa: E402
from rules_harness import MAX_WINDOW, Problem  # noqa: E402

N, COMMITS = 5, 80
P = functools.partial

# name -> (rule, reference with the same hyperparameters)
CASES = {
    "delay_adaptive": (
        rules.delay_adaptive(lr=0.02, tau_c=2.0),
        P(ref.ref_delay_adaptive, lr=0.02, tau_c=2.0),
    ),
    "ringmaster": (
        rules.ringmaster(lr=0.02, threshold=3),
        P(ref.ref_ringmaster, lr=0.02, threshold=3),
    ),
    "rennala": (rules.rennala(lr=0.05, batch=3), P(ref.ref_rennala, lr=0.05, batch=3)),
    "fedbuff": (
        rules.fedbuff(lr=0.02, window=3, buffer=3, server_lr=0.9),
        P(ref.ref_fedbuff, lr=0.02, window=3, buffer=3, server_lr=0.9),
    ),
    "fedasync": (
        rules.fedasync(lr=0.02, alpha=0.5, rho=0.1, window=2),
        P(
            ref.ref_fedasync,
            lr=0.02,
            alpha=0.5,
            rho=0.1,
            window=2,
            weight=lambda t: (t + 1) ** -0.5,
        ),
    ),
    "server_momentum": (  # n = 5: the correction leaves mu_e = 0.9 - 0.8 = 0.1
        rules.server_momentum(lr=0.01, momentum=0.9, implicit_correction=True),
        P(ref.ref_server_momentum, lr=0.01, momentum=0.9, implicit_correction=True),
    ),
    "gap_aware": (
        rules.gap_aware(lr=0.02, momentum=0.5),
        P(ref.ref_gap_aware, lr=0.02, momentum=0.5),
    ),
    "eamsgd": (
        rules.eamsgd(lr=0.02, alpha=0.2, window=3, momentum=0.9),
        P(ref.ref_eamsgd, lr=0.02, alpha=0.2, window=3, momentum=0.9),
    ),
    "local": (  # default outer optimizer: Nesterov SGD, 0.7, momentum 0.9
        rules.local(inner=optax.adamw(0.01), window=2),
        P(
            ref.ref_local,
            inner=("adamw", dict(lr=0.01)),
            window=2,
            outer_lr=0.7,
            outer_momentum=0.9,
        ),
    ),
}


@pytest.fixture(scope="module")
def trace():
    spec = cluster(
        N,
        compute=timing.LogNormal(0.1, 0.3),
        speeds=[1.0, 1.0, 2.0, 4.0, 1.5],
        failures={1: [timing.Failure(at=0.25, restart_after=0.1)]},
        joins={4: 0.15},
        budget=COMMITS,
    )
    trace = timing.simulate(spec, seed=3)
    # a late join and a restart: new lives that pull a version past 0
    assert np.count_nonzero(trace.fresh & (trace.pulled_version > 0)) == 2
    assert trace.staleness.min() == 0 and trace.staleness.max() >= 8  # varied staleness
    return trace


@pytest.fixture(scope="module")
def problem():
    return quadratic(dim=6, condition=10.0)


def reference(name, trace, problem):
    h = curvature(problem)
    shifts = np.zeros((N, len(trace), MAX_WINDOW, h.size), np.float32)
    harness = Problem(problem.init_params, [h], [shifts])
    order = list(zip(trace.worker.tolist(), trace.pulled_version.tolist(), strict=True))
    fresh = trace.fresh.tolist()
    extra = {"round_end": [True] * len(trace)} if name == "local" else {}
    return CASES[name][1](harness, order, fresh, N, **extra)


@pytest.mark.parametrize("name", list(CASES))
def test_sequential_executor_equals_numpy_reference(name, trace, problem):
    out = execute(CASES[name][0], problem, trace, chunk=32)
    versions, infos = reference(name, trace, problem)
    assert out.n_commits == len(trace) == len(versions) - 1
    np.testing.assert_allclose(out.params["theta"], versions[-1][0], atol=1e-6, rtol=1e-5)
    assert not np.allclose(versions[-1][0], 1.0)  # the run moved
    for field in infos[0]:  # every diagnostic the reference states, commit by commit
        want = np.array([info[field] for info in infos])
        np.testing.assert_allclose(out.metrics[field], want, rtol=1e-4, atol=1e-6, err_msg=field)


def test_the_trace_exercises_discards_buffers_and_penalties(trace, problem):
    """The comparisons above are not vacuous on this trace."""
    weights = {n: np.array([i["weight"] for i in reference(n, trace, problem)[1]]) for n in CASES}
    assert 0 < weights["ringmaster"].sum() < len(trace)  # some gradients discarded
    assert 0 < weights["rennala"].sum() < len(trace)  # some too stale for the batch
    _, buffered = reference("fedbuff", trace, problem)
    flushes = sum(i["update_norm"] > 0 for i in buffered)
    assert 0 < flushes < len(trace)
    _, gaps = reference("gap_aware", trace, problem)
    assert max(i["frac_penalized"] for i in gaps) > 0
    assert np.ptp(weights["delay_adaptive"]) > 0  # the step shrank for some delays
