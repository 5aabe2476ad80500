"""Malenia SGD (Tyurin & Richtárik 2023) against its paper's numpy reference
(``rules_reference_malenia``, written from the pseudocode) and on the behaviour it exists for.

- Driven as the engine drives it (``rules_harness.drive``, jitted commit; once with the local
  phase vmapped over workers) on the hand-built ``CHURN`` trace: a slow worker, discarded
  gradients, a late join, a restart of a worker that had contributed, a plain pull.
- By hand: a worker's repeated gradients are averaged before the workers are weighed; S > n
  waits for more gradients, ties (a non-dyadic one included) step whatever the order of
  arrival; a restart keeps what the server received; the worker that completes a step is
  sent the point before it.
- Heterogeneous data (worker w's loss centred at its own c_w, workers of very different
  speeds): Malenia settles at the plain mean of the c_w, plain ASGD (``downpour``) at their
  commit-frequency-weighted mean.
"""

import functools
import itertools
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rules_reference_malenia as ref
from rules_harness import MAX_WINDOW, Problem, churn_trace, drive, make_problem, max_abs_error

from gemsim import rules

N = 4
TOL = 1e-6


@pytest.fixture(scope="module")
def churn():
    order, fresh = churn_trace()
    return order, fresh, make_problem(11, N, len(order))


def _check(driven, versions, infos):
    errors = [max_abs_error(v, e) for v, e in zip(driven.versions, versions, strict=True)]
    assert max(errors) <= TOL, f"max abs error {max(errors):.3g} at commit {np.argmax(errors)}"
    for k, (info, want) in enumerate(zip(driven.infos, infos, strict=True)):
        assert type(info) is rules.DelayInfo
        for field, value in want.items():
            np.testing.assert_allclose(
                np.asarray(getattr(info, field)),
                value,
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"{field} {k}",
            )


@pytest.mark.parametrize(("batch", "vmapped"), [(None, False), (6, False), (None, True)])
def test_matches_the_papers_reference_on_the_churn_trace(batch, vmapped, churn):
    order, fresh, problem = churn
    driven = drive(rules.malenia(0.1, batch), problem, order, N, fresh=fresh, vmapped=vmapped)
    versions, infos = ref.ref_malenia(problem, order, fresh, N, lr=0.1, batch=batch)
    _check(driven, versions, infos)
    assert driven.commit_recompiles == 0 and driven.commit_cache_size == 1
    # Not vacuous: two steps, gradients discarded; with S = n the restarted worker 1 (commit
    # 15) had contributed to the round in which it restarted (commit 11), which it keeps.
    steps = [k for k, i in enumerate(infos) if i["update_norm"] > 0]
    assert 0 < sum(i["weight"] for i in infos) < len(order)
    assert steps == ([6, 19] if batch is None else [7, 19])
    if batch is None:
        assert infos[11]["weight"] == infos[15]["weight"] == 1 and 6 < 11 < 15 < 19


# --- by hand ----------------------------------------------------------------------------------

THETA = {"x": jnp.zeros(2, jnp.float32)}


class Server:
    """The rule's commit and pull driven by hand, one worker's row at a time."""

    def __init__(self, rule, n):
        self.rule, self.theta = rule, THETA
        state = rule.init(THETA, n)
        self.server, self.workers = state.server, state.workers
        self.commit = jax.jit(rule.commit)

    def push(self, w, g):
        ws = jax.tree.map(lambda a: a[w], self.workers)
        work = rules.Work(self.theta, self.theta, {"x": jnp.full(2, g, jnp.float32)})
        self.theta, self.server, ws, info = self.commit(
            self.theta, self.server, ws, work, rules.commit_context(0, 0)
        )
        self._put(w, ws)
        return float(info.update_norm) > 0, float(info.weight)

    def pull(self, w, fresh):
        ws = jax.tree.map(lambda a: a[w], self.workers)
        self._put(w, rules.pull_state(self.rule, ws, self.theta, self.server, jnp.asarray(fresh)))

    def _put(self, w, ws):
        self.workers = jax.tree.map(lambda a, r: a.at[w].set(r), self.workers, ws)

    def x(self):
        return float(self.theta["x"][0])


def test_a_workers_gradients_are_averaged_before_the_workers_are_weighed():
    """g^k = 1/n sum_i g_i^k / s_i: worker 0's 1 and 3 count as their mean 2, worker 1's 10 as
    10, so the step is (2 + 10) / 2 = 6, not the mean of the three gradients (14 / 3)."""
    server = Server(rules.malenia(lr=0.1), 2)
    assert [server.push(0, 1.0), server.push(0, 3.0)] == [(False, 1.0)] * 2
    assert server.push(1, 10.0) == (True, 1.0)
    assert server.x() == pytest.approx(-0.1 * 6.0, rel=1e-6)


@pytest.mark.parametrize(
    ("batch", "pushes", "steps_at"),
    [
        (None, [0, 0, 0, 1], 3),  # S = n: one gradient or more from every worker
        (4, [0, 1, 0, 1], 3),  # S = 2n: 1/s_0 + 1/s_1 <= 1, a tie at (2, 2)
        (4, [0, 1, 0, 0, 0, 1], 5),  # (4, 1) is not enough: 1.25 > 1; (4, 2) is
        (3, [0, 1, 0, 0], 3),  # S = 3: 1/3 + 1/1 = 4/3 = n^2/S, a tie that is not dyadic
    ],
)
def test_a_larger_batch_waits_for_more_gradients(batch, pushes, steps_at):
    server = Server(rules.malenia(lr=0.1, batch=batch), 2)
    stepped = [server.push(w, 1.0)[0] for w in pushes]
    assert stepped == [k == steps_at for k in range(len(pushes))]


@pytest.mark.parametrize(
    "order",
    [
        [2] * 6 + [1] * 3 + [0] * 2,
        [0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2],
        [0, 1, 2, 0, 1, 2, 2, 1, 2, 2, 2],
    ],
)
def test_a_tie_steps_whatever_the_order_of_arrival(order):
    """n = 3, S = 9: counts (2, 3, 6) give 1/2 + 1/3 + 1/6 = 1 = n^2/S exactly. A float32 sum of
    the 1/s_i kept as the gradients come ends at 1.0000001 for two of these orders."""
    server = Server(rules.malenia(lr=0.1, batch=9), 3)
    stepped = [server.push(w, 1.0)[0] for w in order]
    assert stepped == [False] * 10 + [True]


def test_the_integer_test_is_the_exact_test_for_small_counts():
    """sum floor(U / s_i) <= floor(U n^2 / S) against fractions, n = 3, counts and S up to 8."""
    for batch, counts in itertools.product(range(1, 9), itertools.product(range(1, 9), repeat=3)):
        exact = sum(Fraction(1, c) for c in counts) <= Fraction(9, batch)
        assert ref.loop_ends(list(counts), batch) == exact, (batch, counts)
    assert not ref.loop_ends([0, 5, 5], 1)  # a worker without a gradient: 1/0 = inf


def test_a_restart_keeps_what_the_server_received():
    """Worker 0's first gradient was received before its process restarted: it still counts."""
    server = Server(rules.malenia(lr=0.1), 2)
    server.push(0, 1.0)
    server.pull(0, fresh=True)
    server.push(0, 3.0)
    assert server.push(1, 10.0) == (True, 1.0)
    assert server.x() == pytest.approx(-0.1 * 6.0, rel=1e-6)


def test_the_completing_worker_is_sent_the_point_before_the_step():
    """One worker, S = 1: each step is followed by a gradient tagged with the old index, which
    the server discards (the loop sends (x^k, k) before x^{k+1} is computed)."""
    server = Server(rules.malenia(lr=0.1, batch=1), 1)
    assert [server.push(0, 1.0)[1] for _ in range(6)] == [1.0, 0.0] * 3
    assert int(server.server.timestamp) == 3


def test_defaults_and_bad_values():
    server = rules.malenia(0.1).init(THETA, 6).server
    assert int(server.bound) == 6 * int(server.unit) and int(server.missing) == 6  # S = n
    assert int(rules.malenia(0.1, batch=12).init(THETA, 6).server.bound) == 3 * int(server.unit)
    for kwargs, field in [
        (dict(lr=0.0), "lr"),
        (dict(lr=0.1, batch=0), "batch"),
        (dict(lr=0.1, batch=1.5), "batch"),
        (dict(lr=0.1, batch=True), "batch"),
    ]:
        with pytest.raises(ValueError, match=f"malenia: {field}"):
            rules.malenia(**kwargs)


# --- heterogeneous data -----------------------------------------------------------------------

PERIODS = (1, 2, 7)  # worker w commits every PERIODS[w] time units: rates 14 : 7 : 2
OPTIMA = np.array([[1.0, 0.0], [1.0, 2.0], [-2.0, 4.0]], np.float32)  # c_w


def periodic_trace(periods, horizon):
    """(worker, pulled_version) per commit: worker w commits at t = periods[w] * m, ties in
    worker order, and pulls at its own commit."""
    events = sorted((p * m, w) for w, p in enumerate(periods) for m in range(1, horizon // p + 1))
    last, order = {}, []
    for k, (_, w) in enumerate(events):
        order.append((w, last.get(w, -1) + 1))
        last[w] = k
    return order


def shifted_problem(n_commits):
    """f_w(x) = |x - c_w|^2 / 2 on two parameters: the harness's gradient x + b[w] with
    b[w] = -c_w for every commit and local step."""
    b = np.broadcast_to(-OPTIMA[:, None, None, :], (len(OPTIMA), n_commits, MAX_WINDOW, 2))
    return Problem({"x": jnp.zeros(2, jnp.float32)}, [np.ones(2, np.float32)], [b.copy()])


def test_malenia_settles_at_the_plain_mean_and_asgd_at_the_commit_weighted_mean():
    order = periodic_trace(PERIODS, 280)
    problem = shifted_problem(len(order))
    rates = np.array([1 / p for p in PERIODS])
    plain, weighted = OPTIMA.mean(0), rates @ OPTIMA / rates.sum()
    assert np.linalg.norm(plain - weighted) > 1.0
    final = functools.partial(_settled, problem=problem, order=order)
    malenia = final(rules.malenia(lr=0.8))
    asgd = final(rules.downpour(lr=0.02))
    np.testing.assert_allclose(malenia, plain, atol=1e-5)
    np.testing.assert_allclose(asgd, weighted, atol=2e-3)


def _settled(rule, problem, order):
    """The mean of the central parameters over the last 14 time units (one period of all)."""
    versions = drive(rule, problem, order, len(OPTIMA)).versions
    per_period = sum(14 // p for p in PERIODS)
    return np.mean([np.asarray(v["x"]) for v in versions[-per_period:]], axis=0)
