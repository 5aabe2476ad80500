"""The newer rules against their numpy references on a hand-built trace with churn.

The trace (``rules_harness.CHURN``) has four workers, staleness from 0 to 7, a slow worker,
a late join, a restart and a plain pull that is not a restart; the harness applies each
rule's pull hook where the engine would. Driven jitted and with the local phases vmapped
over workers, as the two executors run them.
"""

import functools

import jax
import numpy as np
import optax
import pytest
import rules_reference_newer as ref
from rules_harness import (
    churn_trace,
    drive,
    host_pulls,
    make_problem,
    max_abs_error,
    round_ends,
    staleness_of,
    sync_trace,
)

from gemsim import rules

N = 4
TOL = 1e-6
P = functools.partial

CASES = {
    "delay_adaptive": (
        rules.delay_adaptive(0.1),
        P(ref.ref_delay_adaptive, lr=0.1),
    ),
    "delay_adaptive-tau_c": (
        rules.delay_adaptive(lr=0.1, tau_c=2.5),
        P(ref.ref_delay_adaptive, lr=0.1, tau_c=2.5),
    ),
    "ringmaster": (rules.ringmaster(0.1), P(ref.ref_ringmaster, lr=0.1)),
    "ringmaster-threshold2": (
        rules.ringmaster(lr=0.1, threshold=2),
        P(ref.ref_ringmaster, lr=0.1, threshold=2),
    ),
    "rennala": (rules.rennala(0.1), P(ref.ref_rennala, lr=0.1)),
    "rennala-batch2": (
        rules.rennala(lr=0.1, batch=2),
        P(ref.ref_rennala, lr=0.1, batch=2),
    ),
    "fedbuff": (
        rules.fedbuff(lr=0.05, window=3, buffer=3, server_lr=0.8),
        P(ref.ref_fedbuff, lr=0.05, window=3, buffer=3, server_lr=0.8),
    ),
    "fedasync-polynomial-prox": (
        rules.fedasync(lr=0.05, alpha=0.6, rho=0.5, window=3),
        P(
            ref.ref_fedasync,
            lr=0.05,
            alpha=0.6,
            rho=0.5,
            window=3,
            weight=lambda t: (t + 1) ** -0.5,
        ),
    ),
    "fedasync-hinge": (
        rules.fedasync(lr=0.05, alpha=0.9, window=2, weight=rules.Hinge(a=0.5, b=2)),
        P(
            ref.ref_fedasync,
            lr=0.05,
            alpha=0.9,
            rho=0.0,
            window=2,
            weight=lambda t: 1.0 if t <= 2 else 1 / (0.5 * (t - 2) + 1),
        ),
    ),
    "server_momentum": (
        rules.server_momentum(lr=0.05, momentum=0.7),
        P(ref.ref_server_momentum, lr=0.05, momentum=0.7, implicit_correction=False),
    ),
    "server_momentum-corrected": (
        rules.server_momentum(lr=0.05, momentum=0.9, implicit_correction=True),
        P(ref.ref_server_momentum, lr=0.05, momentum=0.9, implicit_correction=True),
    ),
    "gap_aware": (rules.gap_aware(0.1), P(ref.ref_gap_aware, lr=0.1)),
    "gap_aware-momentum": (
        rules.gap_aware(lr=0.1, momentum=0.5),
        P(ref.ref_gap_aware, lr=0.1, momentum=0.5),
    ),
    "eamsgd": (
        rules.eamsgd(lr=0.05, alpha=0.3, window=3, momentum=0.9),
        P(ref.ref_eamsgd, lr=0.05, alpha=0.3, window=3, momentum=0.9),
    ),
    "local-adamw": (
        rules.local(inner=optax.adamw(0.01), window=3),
        P(
            ref.ref_local,
            inner=("adamw", dict(lr=0.01)),
            window=3,
            outer_lr=0.7,
            outer_momentum=0.9,
        ),
    ),
    "local-momentum-sgd": (
        rules.local(
            inner=optax.sgd(0.05, momentum=0.5),
            outer=optax.sgd(0.5, momentum=0.8, nesterov=True),
            window=2,
        ),
        P(
            ref.ref_local,
            inner=("momentum_sgd", dict(lr=0.05, momentum=0.5)),
            window=2,
            outer_lr=0.5,
            outer_momentum=0.8,
        ),
    ),
}


@pytest.fixture(scope="module")
def churn():
    order, fresh = churn_trace()
    return order, fresh, make_problem(11, N, len(order))


def _check(driven, versions, infos):
    errors = [max_abs_error(v, e) for v, e in zip(driven.versions, versions, strict=True)]
    assert len(driven.versions) == len(versions)
    assert max(errors) <= TOL, f"max abs error {max(errors):.3g} at commit {np.argmax(errors)}"
    for k, (info, want) in enumerate(zip(driven.infos, infos, strict=True)):
        assert info._fields[:2] == ("update_norm", "weight")
        for field, value in want.items():
            np.testing.assert_allclose(
                np.asarray(getattr(info, field)),
                value,
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"info.{field} at commit {k}",
            )


def _drive(name, *args, **kw):
    """optax's own code (adamw's bias correction) needs standard dtype promotion."""
    promotion = "standard" if name.startswith("local") else "strict"
    with jax.numpy_dtype_promotion(promotion):
        return drive(CASES[name][0], *args, **kw)


def _expected(name, churn):
    order, fresh, problem = churn
    if name.startswith("local"):
        return CASES[name][1](problem, order, fresh, N, round_end=[True] * len(order))
    return CASES[name][1](problem, order, fresh, N)


def test_the_trace_has_churn_and_varied_staleness():
    order, fresh = churn_trace()
    assert set(staleness_of(order)) >= {0, 1, 2, 3, 4, 6, 7}
    by_version = {k + 1: ws for k, ws in host_pulls(order, fresh).items()}
    assert by_version == {5: [(3, True)], 14: [(1, True)], 20: [(3, False)]}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_numpy_reference_jitted(name, churn):
    order, fresh, problem = churn
    driven = _drive(name, problem, order, N, fresh=fresh)
    _check(driven, *_expected(name, churn))
    assert driven.commit_recompiles == 0 and driven.commit_cache_size == 1


# The rules with worker state or local steps, their local phases vmapped over workers (the
# batched executor's way); the others' local phase is the plain gradient.
VMAPPED = [
    "ringmaster-threshold2",
    "rennala-batch2",
    "fedbuff",
    "fedasync-polynomial-prox",
    "eamsgd",
    "local-adamw",
]


@pytest.mark.parametrize("name", VMAPPED)
def test_matches_numpy_reference_vmapped_workers(name, churn):
    order, fresh, problem = churn
    driven = _drive(name, problem, order, N, fresh=fresh, vmapped=True)
    _check(driven, *_expected(name, churn))


def test_the_trace_exercises_discards_buffers_and_gaps(churn):
    """The cases above are not vacuous: gradients are discarded, buffered and penalised."""
    order, fresh, problem = churn
    _, ring = ref.ref_ringmaster(problem, order, fresh, N, lr=0.1, threshold=2)
    assert 0 < sum(i["weight"] for i in ring) < len(order)
    _, ren = ref.ref_rennala(problem, order, fresh, N, lr=0.1, batch=2)
    assert 0 < sum(i["weight"] for i in ren) < len(order)
    assert sum(i["update_norm"] > 0 for i in ren) >= 3
    _, buf = ref.ref_fedbuff(problem, order, fresh, N, lr=0.05, window=3, buffer=3, server_lr=1)
    assert {i["delay"] for i in buf} >= {0.0, 1.0, 2.0}
    _, gap = ref.ref_gap_aware(problem, order, fresh, N, lr=0.1)
    assert max(i["frac_penalized"] for i in gap) > 0.5


def test_restart_and_join_reset_worker_state(churn):
    """Without the pull hook (no fresh lives) EAMSGD and local give other results."""
    order, fresh, problem = churn
    for name in ("eamsgd", "local-adamw"):
        with_hook, _ = _expected(name, churn)
        kw = dict(round_end=[True] * len(order)) if name.startswith("local") else {}
        no_hook, _ = CASES[name][1](problem, order, [k == 0 for k in range(len(order))], N, **kw)
        assert max_abs_error(with_hook[-1], no_hook[-1]) > 1e-3


def test_local_averages_each_barrier_round():
    n = 3
    order = sync_trace(2, n, 5)
    problem = make_problem(5, n, len(order))
    ends = round_ends(order)
    rule = rules.local(inner=optax.sgd(0.05, momentum=0.5), window=2)
    driven = drive(rule, problem, order, n, round_end=ends)
    fresh = [k < n for k in range(len(order))]
    expected = ref.ref_local(
        problem,
        order,
        fresh,
        n,
        inner=("momentum_sgd", dict(lr=0.05, momentum=0.5)),
        window=2,
        outer_lr=0.7,
        outer_momentum=0.9,
        round_end=ends,
    )
    _check(driven, *expected)


def test_defaults_follow_the_number_of_workers():
    params = {"w": jax.numpy.zeros(3)}
    assert float(rules.delay_adaptive(0.1).init(params, 7).server.tau_c) == 7.0
    assert int(rules.ringmaster(0.1).init(params, 5).server.threshold) == 5
    assert int(rules.rennala(0.1).init(params, 6).server.batch) == 6
    mu = rules.server_momentum(0.1, momentum=0.9, implicit_correction=True).init(params, 4)
    assert float(mu.server.momentum) == pytest.approx(0.15)
    mu = rules.server_momentum(0.1, momentum=0.5, implicit_correction=True).init(params, 8)
    assert float(mu.server.momentum) == 0.0
