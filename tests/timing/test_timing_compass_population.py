"""FedCompass's scheduler over a population (K slots serving N clients that stay up), against
the reference event loop of `test_timing_compass` (written from the authors'
implementation) carried over to a population here: its clients are chosen by round robin
(the next free id after the last one chosen, the documented `clients.selection:
round_robin`, which draws nothing).

What the population adds to the reference: estimates, groups and tasks are the clients'; a
slot serves one client's task at a time. A client not seen yet takes Q_max steps in no group
and is applied alone; once a client's task is over (applied alone, put in the general
buffer, or aggregated with its group, fastest first), its slot chooses its next client
before the next slot does, and that client starts at once. The trace's ``worker`` is the
slot, ``client`` the client. N = K gives the persistent workers' trace.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from compass_reference import ALONE, GENERAL, GROUP, Budget, CompassReference, Row, assert_trace_is

from gemsim import config, timing
from gemsim.app.verbs._timing_only import checked_cluster
from gemsim.config import ScenarioError

BATCH = 0.01  # seconds a mini-batch takes at speed factor 1
CONSTANT = {"dist": "constant", "value": BATCH}
LOGNORMAL = {"dist": "lognormal", "median": BATCH, "sigma": 0.8}  # clients miss their estimates


def population_doc(n, k, *, seed=3, commits=150, compute=None, speed_sigma=0.6, **knobs):
    return {
        "name": "compass-population",
        "seed": seed,
        "workers": {"compute": compute or CONSTANT},
        "clients": {
            "population": n,
            "concurrency": k,
            "selection": "round_robin",
            "speed": {"dist": "lognormal", "median": 1.0, "sigma": speed_sigma},
        },
        "budget": {"commits": commits},
        "optimizer": {
            "rule": "fedcompass",
            "lr": 0.05,
            "window": 12,
            "min_window": 3,
            "latest": 1.2,
            "speed_momentum": 0.9,
            **knobs,
        },
    }


def simulated(doc):
    scenario = config.parse_scenario(doc, "compass_population.yaml")
    return timing.simulate_run(checked_cluster(scenario), scenario.seed)


class PopulationReference(CompassReference):
    """`CompassReference` keyed by client, with K slots choosing clients by round robin;
    ``duration(slot, client, q)`` gives each task's compute time."""

    def __init__(self, n_clients, k, duration, **knobs):
        super().__init__(n_clients, duration=self._duration, **knobs)
        self.k, self.slot_of, self.next_id = k, {}, 0
        self.slot_duration = duration
        self.row_clients: list[int] = []

    def _duration(self, c, j, q):
        del j
        return self.slot_duration(self.slot_of[c], c, q)

    def _begin(self):
        for _ in range(self.k):  # t = 0: the slots choose in index order, Q_max steps each
            self._take(len(self.slot_of), 0.0)

    def _take(self, slot, t):
        for i in range(self.n):
            c = (self.next_id + i) % self.n
            if c not in self.slot_of:
                break
        self.next_id = (c + 1) % self.n
        self.slot_of[c] = slot
        if self.speed[c] is None:  # not seen yet: Q_max steps, no group
            self._start_task(c, t, self.q_max, None)
        else:
            CompassReference._assign(self, c, t)

    def _write(self, t, w, buffer, round_end, arrival):
        slot = self.slot_of[w]
        self.rows.append(
            Row(t, slot, self.pulled[w], self.q[w], buffer, round_end, t - arrival, self.compute[w])
        )
        self.row_clients.append(w)
        if len(self.rows) == self.commits:
            raise Budget

    def _assign(self, w, t):
        """Client ``w``'s task is over: its slot chooses its next client, which starts."""
        self._take(self.slot_of.pop(w), t)


def reference_of(n, k, duration, commits=150, q_max=12, q_min=3, latest=1.2, momentum=0.9):
    ref = PopulationReference(
        n,
        k,
        duration,
        q_max=q_max,
        q_min=q_min,
        latest=latest,
        momentum=momentum,
        commits=commits,
    )
    return ref.run(), ref


def slot_streams(seed, k):
    """Slot w's per-batch lognormal draws (SeedSequence(seed, spawn_key=(0, w, 0)), gemsim's
    documented keys, as for a persistent worker)."""
    streams = []
    for w in range(k):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0, w, 0)))
        streams.append(iter(rng.lognormal(math.log(BATCH), LOGNORMAL["sigma"], 1 << 15)))
    return streams


@pytest.mark.parametrize(("seed", "n", "k"), [(0, 9, 3), (1, 14, 5), (2, 30, 4)])
def test_the_trace_is_the_schedulers_over_a_population(seed, n, k):
    """Lognormal per-batch draws: estimates miss, late clients go to the general buffer,
    timers aggregate part of a group; every client is met and first applied alone."""
    sim = simulated(population_doc(n, k, seed=seed, compute=LOGNORMAL))
    speeds = sim.clients.speed.tolist()
    streams = slot_streams(seed, k)

    def duration(slot, c, q):
        return sum(next(streams[slot]) for _ in range(q)) / speeds[c]

    rows, ref = reference_of(n, k, duration)
    assert_trace_is(sim.trace, rows)
    np.testing.assert_array_equal(sim.trace.client, ref.row_clients)
    assert ref.late > 0 and ref.timer_rounds > 0
    buffer, client = sim.trace.buffer, sim.trace.client
    assert {ALONE, GENERAL, GROUP} <= set(buffer.tolist())
    first = {c: int(np.argmax(client == c)) for c in np.unique(client).tolist()}
    assert len(first) == n
    assert sorted(first.values()) == np.flatnonzero(buffer == ALONE).tolist()


def test_a_constant_law_gives_exact_estimates_and_whole_groups():
    sim = simulated(population_doc(20, 4, seed=5))
    speeds = sim.clients.speed.tolist()
    rows, ref = reference_of(20, 4, lambda slot, c, q: q * BATCH / speeds[c])
    assert_trace_is(sim.trace, rows)
    np.testing.assert_array_equal(sim.trace.client, ref.row_clients)
    assert ref.late == 0 and (sim.trace.buffer == GROUP).sum() > 100


def test_n_equal_to_k_is_the_persistent_workers_trace():
    """Each freed slot finds only its own client free: the trace is the persistent workers'
    with the clients' speeds (times to rounding: a slot divides a task's sum by its client's
    speed, a worker each draw by its own)."""
    sim = simulated(population_doc(5, 5, seed=7, compute=LOGNORMAL))
    speeds = sim.clients.speed.tolist()
    np.testing.assert_array_equal(sim.trace.client, sim.trace.worker)
    doc = population_doc(5, 5, seed=7, compute=LOGNORMAL)
    doc.pop("clients")
    doc["workers"] = {
        "count": 5,
        "compute": LOGNORMAL,
        "groups": [{"count": 1, "speed": s} for s in speeds],
    }
    persistent = timing.simulate(checked_cluster(config.parse_scenario(doc, "p.yaml")), 7)
    streams = slot_streams(7, 5)
    rows, _ = reference_of(
        5, 5, lambda slot, c, q: sum(next(streams[slot]) / speeds[c] for _ in range(q))
    )
    assert_trace_is(persistent, rows)
    for name in ("worker", "local_steps", "buffer", "round_end", "pulled_version"):
        np.testing.assert_array_equal(getattr(sim.trace, name), getattr(persistent, name))
    np.testing.assert_allclose(sim.trace.time, persistent.time, rtol=1e-12)


def test_the_client_report_counts_each_clients_tasks():
    sim = simulated(population_doc(30, 6, seed=4, compute=LOGNORMAL, commits=300))
    report, trace = sim.clients, sim.trace
    np.testing.assert_array_equal(report.completed, np.bincount(trace.client, minlength=30))
    in_flight = report.started - report.completed
    assert report.lost.sum() == 0 and in_flight.sum() == 6 and in_flight.max() == 1


@pytest.mark.parametrize(
    ("clients", "match"),
    [
        (
            {
                "churn": {
                    "uptime": {"dist": "exponential", "mean": 3.0},
                    "downtime": {"dist": "exponential", "mean": 1.0},
                }
            },
            "fedcompass' groups clients that stay up",
        ),
    ],
)
def test_a_population_that_goes_down_is_refused(clients, match):
    doc = population_doc(10, 3)
    doc["clients"].update(clients)
    with pytest.raises(ScenarioError, match=match):
        config.parse_scenario(doc, "compass_population.yaml")


def test_the_timing_model_refuses_churn_under_compass():
    population = timing.Population(
        10, churn=timing.Churn(timing.Exponential(3.0), timing.Exponential(1.0))
    )
    with pytest.raises(ValueError, match="a population's clients that stay up"):
        timing.ClusterSpec(
            workers=(timing.WorkerSpec(timing.Constant(BATCH)),) * 3,
            population=population,
            protocol=timing.Compass(12, 3),
            window=12,
            budget=timing.CommitBudget(10),
        )
