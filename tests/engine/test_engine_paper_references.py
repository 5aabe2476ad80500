"""The engine's sequential executor against the papers' numpy references, every rule.

The references (`tests/rules/rules_reference.py`, `tests/rules/rules_reference_local.py`) are
written from the papers' pseudocode and share nothing with `gemsim.rules`; they keep every
server version, so they check the engine's snapshot slots, its host fills at a late join, a
restart and a plain pull (the trace's `fresh` flag: state that lived in the worker process
starts anew from the pulled version) and its commit order independently. Three traces per
rule, run by one compiled executor: a simulated one (five workers of different speeds, one
joining late and one restarting after a crash, 80 commits), the hand-built
`rules_harness.CHURN` (staleness 0 to 7, a join, a restart and a plain pull), and the
simulated one's timing with pulls before apply (`server.pull: before_apply`: every worker's
next gradient on the version its commit was applied to, the engine's pre fills). The problem is
the noiseless quadratic (the references' gradient `a * x + b` with `a` its curvature, `b = 0`).
"""

import dataclasses
import functools
import sys
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import cluster, curvature, quadratic

from gemsim import engine, rules, timing
from gemsim.trace import CommitTrace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
import rules_reference as ref  # noqa: E402
import rules_reference_local as ref_local  # noqa: E402
import rules_reference_malenia as ref_malenia  # noqa: E402
from rules_harness import CHURN, MAX_WINDOW, Problem  # noqa: E402

N, COMMITS = 5, 80
P = functools.partial

# name -> (rule, reference with the same hyperparameters); GEM at a small step, where its
# float32 pi stays well-posed (tests/engine/test_engine_reference.py says why).
CASES = {
    "gem": (
        rules.gem(lr=0.002),
        P(
            ref.ref_gem,
            lr=0.002,
            momentum=0.9,
            kappa=1.0,
            pi_max=5.0,
            eps=1e-12,
            inside=False,
            pulled=False,
        ),
    ),
    "staleness": (
        rules.staleness(lr=0.02, weight=rules.Polynomial(0.5)),
        P(ref.ref_scaled, lr=0.02, weight=lambda t: (t + 1) ** -0.5),
    ),
    "softsync": (
        rules.softsync(lr=0.02, c=2, momentum=0.5),
        P(ref.ref_softsync, lr=0.02, c=2, momentum=0.5),
    ),
    "dcasgd": (
        rules.dcasgd(lr=0.02, adaptive=True),
        P(ref.ref_dcasgd, lr=0.02, lam=0.04, adaptive=True, decay=0.95, lam0=2.0),
    ),
    "sync": (rules.sync(lr=0.02, momentum=0.8), P(ref.ref_sync, lr=0.02, momentum=0.8)),
    "delay_adaptive": (
        rules.delay_adaptive(lr=0.02, tau_c=2.0),
        P(ref.ref_delay_adaptive, lr=0.02, tau_c=2.0),
    ),
    "ringmaster": (
        rules.ringmaster(lr=0.02, threshold=2),
        P(ref.ref_ringmaster, lr=0.02, threshold=2),
    ),
    "rennala": (rules.rennala(lr=0.05, batch=3), P(ref.ref_rennala, lr=0.05, batch=3)),
    "malenia": (rules.malenia(lr=0.1, batch=10), P(ref_malenia.ref_malenia, lr=0.1, batch=10)),
    "server_momentum": (  # n = 5: the correction leaves mu_e = 0.9 - 0.8 = 0.1
        rules.server_momentum(lr=0.01, momentum=0.9, implicit_correction=True),
        P(ref.ref_server_momentum, lr=0.01, momentum=0.9, implicit_correction=True),
    ),
    "gap_aware": (
        rules.gap_aware(lr=0.02, momentum=0.5),
        P(ref.ref_gap_aware, lr=0.02, momentum=0.5),
    ),
    "downpour": (
        rules.downpour(lr=0.02, window=2, local_momentum=0.5),
        P(ref_local.ref_downpour, lr=0.02, window=2, local_momentum=0.5),
    ),
    "agn": (rules.agn(lr=0.02, window=3), P(ref_local.ref_agn, lr=0.02, window=3)),
    "easgd": (
        rules.easgd(lr=0.02, alpha=0.3, window=2),
        P(ref_local.ref_easgd, lr=0.02, alpha=0.3, window=2),
    ),
    "eamsgd": (
        rules.eamsgd(lr=0.02, alpha=0.2, window=3, momentum=0.9),
        P(ref_local.ref_eamsgd, lr=0.02, alpha=0.2, window=3, momentum=0.9),
    ),
    "fedbuff": (
        rules.fedbuff(lr=0.02, window=3, buffer=3, server_lr=0.9),
        P(ref_local.ref_fedbuff, lr=0.02, window=3, buffer=3, server_lr=0.9),
    ),
    "fedasync": (
        rules.fedasync(lr=0.02, alpha=0.5, rho=0.1, window=2),
        P(
            ref_local.ref_fedasync,
            lr=0.02,
            alpha=0.5,
            rho=0.1,
            window=2,
            weight=lambda t: (t + 1) ** -0.5,
        ),
    ),
    "local": (  # the defaults: DiLoCo's AdamW (weight decay 0.1), Nesterov SGD 0.7, 0.9
        rules.local(lr=0.01, window=2),
        P(
            ref_local.ref_local,
            inner=("adamw", dict(lr=0.01)),
            window=2,
            outer_lr=0.7,
            outer_momentum=0.9,
        ),
    ),
}
# Malenia steps only once every worker has contributed: worker 4 never commits in the
# hand-built trace, so there it would never move.
ONLY_ON = {"malenia": ("simulated",)}


@pytest.fixture(scope="module")
def traces():
    spec = cluster(
        N,
        compute=timing.LogNormal(0.1, 0.3),
        speeds=[1.0, 1.0, 2.0, 4.0, 1.5],
        failures={1: [timing.Failure(at=0.25, restart_after=0.1)]},
        joins={4: 0.15},
        budget=COMMITS,
    )
    simulated = timing.simulate(spec, seed=3)
    # a late join and a restart: new lives that pull a version past 0
    assert np.count_nonzero(simulated.fresh & (simulated.pulled_version > 0)) == 2
    assert simulated.staleness.min() == 0 and simulated.staleness.max() >= 8
    n = len(CHURN)
    churn = CommitTrace.from_columns(
        time=np.arange(n, dtype=float),
        worker=[w for w, _, _ in CHURN],
        pulled_version=[pv for _, pv, _ in CHURN],
        compute_time=np.ones(n),
        queue_time=np.zeros(n),
        service_time=np.zeros(n),
        n_workers=N,  # the executor's; worker 4 never commits in the hand-built trace
        duration=float(n),
        fresh=[f for _, _, f in CHURN],
    )
    # The server sends the committing worker the version before its commit (Mishchenko et
    # al. 2022's notebook): the references read those pulls as plain pulls of that version.
    before = timing.simulate(dataclasses.replace(spec, pull_at=timing.PullAt.BEFORE_APPLY), seed=3)
    assert before.staleness[~before.fresh].min() >= 1
    return {"simulated": simulated, "churn": churn, "before_apply": before}


@pytest.fixture(scope="module")
def problem():
    return quadratic(dim=6, condition=10.0)


def reference(name, trace, problem):
    h = curvature(problem)
    shifts = np.zeros((N, len(trace), MAX_WINDOW, h.size), np.float32)
    harness = Problem(problem.init_params, [h], [shifts])
    order = list(zip(trace.worker.tolist(), trace.pulled_version.tolist(), strict=True))
    fresh = trace.fresh.tolist()
    ends = {"round_end": [True] * len(trace)} if name in ("local", "sync") else {}
    return CASES[name][1](harness, order, fresh, N, **ends)


@pytest.mark.parametrize("name", list(CASES))
def test_sequential_executor_equals_the_papers_numpy_reference(name, traces, problem):
    rule = CASES[name][0]
    executor = engine.SequentialExecutor(
        rule, problem, params=problem.init_params, n_workers=N, chunk=32
    )
    for which, trace in traces.items():
        if which not in ONLY_ON.get(name, traces):
            continue
        out = executor.execute(engine.plan_of(trace, window=rule.window))
        versions, infos = reference(name, trace, problem)
        assert out.n_commits == len(trace) == len(versions) - 1
        np.testing.assert_allclose(
            out.params["theta"], versions[-1][0], atol=1e-6, rtol=1e-5, err_msg=which
        )
        assert not np.allclose(versions[-1][0], 1.0)  # the run moved
        for field in set(infos[0]) - {"pi_median_per_leaf"}:  # every scalar diagnostic
            want = np.array([info[field] for info in infos])
            np.testing.assert_allclose(
                out.metrics[field], want, rtol=1e-4, atol=1e-6, err_msg=f"{which}: {field}"
            )


def test_the_traces_exercise_discards_buffers_and_penalties(traces, problem):
    """The comparisons above are not vacuous on these traces."""
    for trace in traces.values():
        weights = {
            n: np.array([i["weight"] for i in reference(n, trace, problem)[1]])
            for n in ("ringmaster", "rennala", "delay_adaptive")
        }
        assert 0 < weights["ringmaster"].sum() < len(trace)  # some gradients discarded
        assert 0 < weights["rennala"].sum() < len(trace)  # some too stale for the batch
        assert np.ptp(weights["delay_adaptive"]) > 0  # the step shrank for some delays
        _, buffered = reference("fedbuff", trace, problem)
        assert 0 < sum(i["update_norm"] > 0 for i in buffered) < len(trace)
        _, gaps = reference("gap_aware", trace, problem)
        assert max(i["frac_penalized"] for i in gaps) > 0
    _, malenia = reference("malenia", traces["simulated"], problem)
    assert sum(i["update_norm"] > 0 for i in malenia) >= 3  # steps after the join and restart
    assert 0 < sum(i["weight"] for i in malenia) < len(traces["simulated"])
