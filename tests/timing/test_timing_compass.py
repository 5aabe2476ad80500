"""FedCompass's scheduler in the timing model (Li et al., ICLR 2024, "FedCompass: Efficient
Cross-Silo Federated Learning on Heterogeneous Client Devices Using a Computing Power-Aware
Scheduler"), against a reference event loop written here from the algorithm as the authors'
implementation defines it (APPFL's CompassScheduler), sharing no code with gemsim.

What the reference does, in short. The server estimates each client's seconds per local step
(the first observation, then an exponential average ``(1 - m) * old + m * observed``) and
keeps groups of clients expected to arrive together: each group has an expected arrival time
T_exp and a latest one T_max, with a timer at T_max. A client's first arrival is applied at
once (buffer 0); after it, a client is assigned to a group and given as many local steps as
fit before the group's T_exp (joining the existing group that gives it the most steps, within
[Q_min, Q_max]), or a new group is made whose T_exp lines up with where the existing groups
will next be. An arrival after its group's T_max goes to the general buffer (buffer 1); an
arrival on time waits in its group's buffer, and the group is aggregated when its last
pending member arrives or at its timer, its rows written then, in arrival order (buffer 2),
the last closing the round. Every client starts its next task as soon as it is assigned.

The tests compare the trace column by column with the reference on drawn speeds and
settings, with a constant law (no client is ever late: the estimate is exact) and a
lognormal one (clients are late, timers fire, the general buffer fills), check the trace's
invariants (first arrivals, consecutive groups, tasks starting at once, each task's compute
its own steps), and refuse bad input naming the field.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pytest
from compass_reference import ALONE, GENERAL, GROUP, CompassReference, assert_trace_is

from gemsim import config
from gemsim.app import simulate_timing
from gemsim.config import ScenarioError

BATCH = 0.01  # seconds a mini-batch takes at speed factor 1 (the constant law's value)
# Per-batch spread wide enough that a task's sum misses its estimate by more than lambda allows.
LOGNORMAL = {"dist": "lognormal", "median": BATCH, "sigma": 0.8}


# --- scenarios -----------------------------------------------------------------------------


def _doc(speeds, optimizer=None, *, seed=3, commits=60, compute=None, **extra) -> dict:
    optimizer = {
        "rule": "fedcompass",
        "lr": 0.05,
        "window": 10,
        "min_window": 2,
        **(optimizer or {}),
    }
    return {
        "name": "compass",
        "seed": seed,
        "workers": {
            "count": len(speeds),
            "compute": compute or {"dist": "constant", "value": BATCH},
            "groups": [{"count": 1, "speed": float(s)} for s in speeds],
        },
        "budget": {"commits": commits},
        "optimizer": optimizer,
        **extra,
    }


def _scenario(*args, **kwargs):
    return config.parse_scenario(_doc(*args, **kwargs), "compass.yaml")


@dataclass(frozen=True)
class Setting:
    """One drawn configuration: hidden speed factors and the scheduler's knobs."""

    speeds: tuple[float, ...]
    q_max: int
    q_min: int | None  # None: left to the default, max(1, q_max // 5)
    latest: float
    momentum: float

    @property
    def window_min(self) -> int:
        return self.q_min if self.q_min is not None else max(1, self.q_max // 5)

    def optimizer(self) -> dict:
        block = {"window": self.q_max, "latest": self.latest, "speed_momentum": self.momentum}
        if self.q_min is not None:  # else left out: the default is what is tested
            block["min_window"] = self.q_min
        return block


def _drawn_setting(seed: int) -> Setting:
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(4, 8))
    # Distinct factors drawn from a continuum: no two events coincide.
    speeds = tuple(float(s) for s in rng.uniform(0.3, 3.0, n))
    q_max = int(rng.integers(5, 41))
    q_min = [None, q_max // 5 or 1, int(rng.integers(1, q_max // 2 + 1))][seed % 3]
    latest = float(rng.choice([1.2, 1.5, 2.0]))
    momentum = float(rng.choice([0.9, 0.5]))
    return Setting(speeds, q_max, q_min, latest, momentum)


def _scenario_of(setting: Setting, **kwargs):
    doc = _doc(setting.speeds, setting.optimizer(), **kwargs)
    if setting.q_min is None:
        del doc["optimizer"]["min_window"]  # the default Q_min = max(1, Q_max // 5)
    return config.parse_scenario(doc, "compass.yaml")


# --- the reference scheduler (compass_reference.py) ----------------------------------------


def reference(setting: Setting, duration, commits=60):
    ref = CompassReference(
        len(setting.speeds),
        q_max=setting.q_max,
        q_min=setting.window_min,
        latest=setting.latest,
        momentum=setting.momentum,
        commits=commits,
        duration=duration,
    )
    return ref.run(), ref


def constant_durations(speeds):
    """A task of q mini-batches at the constant law: q batches of BATCH / speed seconds."""
    return lambda w, j, q: q * BATCH / speeds[w]


def durations_of(trace):
    """Each client's task durations read from a (longer) trace: its j-th row is its j-th
    task; a task with no row never arrives (see `_check_long_enough`)."""
    per_worker = {}
    for w, c in zip(trace.worker.tolist(), trace.compute_time.tolist(), strict=True):
        per_worker.setdefault(w, []).append(c)

    def duration(w, j, q):
        known = per_worker.get(w, [])
        return known[j] if j < len(known) else math.inf

    return duration


@pytest.mark.parametrize("seed", range(6))
def test_the_trace_is_the_schedulers_with_a_constant_law(seed):
    """Drawn speeds, Q_max, Q_min (given or default), lambda and m: with exact estimates every
    client arrives on time, so rows are first arrivals and whole groups."""
    setting = _drawn_setting(seed)
    trace = simulate_timing(_scenario_of(setting))
    rows, ref = reference(setting, constant_durations(setting.speeds))
    assert ref.late == 0 and any(r.buffer == GROUP for r in rows)
    assert_trace_is(trace, rows)


def _check_long_enough(long, short_end):
    """Every client's last recorded arrival in the long trace is after the short run's end:
    every task that arrives before that end has a row there, hence a known duration."""
    arrival = long.time - long.queue_time
    for w in np.unique(long.worker).tolist():
        assert arrival[long.worker == w].max() > short_end


@pytest.mark.parametrize("seed", range(4))
def test_the_trace_is_the_schedulers_with_late_clients(seed):
    """A lognormal law: estimates miss, clients arrive after T_max (the general buffer),
    timers aggregate part of a group. Task durations come from a longer run's trace (the
    draws are the timing model's, checked on their own below), every decision from the
    reference."""
    setting = dataclasses.replace(_drawn_setting(seed), latest=(1.2, 1.5)[seed % 2])
    long = simulate_timing(_scenario_of(setting, compute=LOGNORMAL, commits=240))
    trace = simulate_timing(_scenario_of(setting, compute=LOGNORMAL))
    rows, ref = reference(setting, durations_of(long))
    _check_long_enough(long, rows[-1].time)
    assert ref.late > 0 and ref.timer_rounds > 0
    assert_trace_is(trace, rows)


def test_a_lognormal_task_sums_its_steps_draws_from_the_workers_stream():
    """Client w's per-batch draws come from its compute stream (SeedSequence(seed, spawn_key
    = (0, w, 0)), gemsim's documented keys); a task of q steps takes the next q, divided by
    the speed factor. With those durations the reference gives the trace itself."""
    setting = dataclasses.replace(_drawn_setting(1), latest=1.2)
    scenario = _scenario_of(setting, compute=LOGNORMAL, seed=11)
    trace = simulate_timing(scenario)
    streams = []
    for w in range(len(setting.speeds)):
        key = np.random.SeedSequence(11, spawn_key=(0, w, 0))
        streams.append(
            iter(np.random.default_rng(key).lognormal(math.log(BATCH), LOGNORMAL["sigma"], 8192))
        )

    def duration(w, j, q):
        return sum(next(streams[w]) for _ in range(q)) / setting.speeds[w]

    rows, ref = reference(setting, duration)
    assert ref.late > 0
    assert_trace_is(trace, rows)


# --- invariants ----------------------------------------------------------------------------


def _groups(trace):
    """Index ranges [a, b] of the runs of consecutive buffer-2 rows closed by round_end."""
    runs, a = [], None
    for k, (b, end) in enumerate(zip(trace.buffer.tolist(), trace.round_end.tolist(), strict=True)):
        if b == GROUP:
            a = k if a is None else a
            if end:
                runs.append((a, k))
                a = None
        else:
            assert a is None, f"row {k}: a group's rows are interrupted before round_end"
    return runs, a  # a: start of a group cut by the budget, or None


def assert_invariants(trace, setting: Setting, constant: bool):
    """What any FedCompass trace shows, whatever the durations."""
    buffer, end, worker = trace.buffer, trace.round_end, trace.worker
    assert set(buffer.tolist()) <= {ALONE, GENERAL, GROUP}
    # Each client's first row, and no other, is applied alone.
    first = {int(w): int(np.argmax(worker == w)) for w in np.unique(worker)}
    assert len(first) == len(setting.speeds)
    assert sorted(first.values()) == np.flatnonzero(buffer == ALONE).tolist()
    assert end[buffer == ALONE].all() and not end[buffer == GENERAL].any()
    runs, _ = _groups(trace)
    assert runs
    closes = {}  # row -> the row whose round applied it
    for a, b in runs:
        assert np.all(trace.time[a : b + 1] == trace.time[b]), f"rows {a}..{b}"
        closes.update({k: b for k in range(a, b + 1)})
    arrival = trace.time - trace.queue_time
    assert np.all(trace.queue_time[buffer != GROUP] == 0) and np.all(trace.queue_time >= 0)
    # A client's task starts the moment its previous row is written, from the model after
    # the row that applied it (its own, or its group's last).
    for w in first:
        rows = np.flatnonzero(worker == w)
        assert trace.pulled_version[rows[0]] == 0 and trace.local_steps[rows[0]] == setting.q_max
        np.testing.assert_allclose(arrival[rows[0]], trace.compute_time[rows[0]], rtol=1e-12)
        for prev, k in zip(rows[:-1], rows[1:], strict=True):
            assert trace.pulled_version[k] == closes.get(prev, prev) + 1, f"row {k}"
            np.testing.assert_allclose(
                arrival[k], trace.time[prev] + trace.compute_time[k], rtol=1e-12
            )
    steps = trace.local_steps
    assert steps.min() >= setting.window_min and steps.max() <= setting.q_max
    if constant:
        speeds = np.asarray(setting.speeds)
        np.testing.assert_allclose(trace.compute_time, steps * BATCH / speeds[worker], rtol=1e-12)


@pytest.mark.parametrize("compute", [None, LOGNORMAL], ids=["constant", "lognormal"])
def test_the_traces_invariants(compute):
    setting = dataclasses.replace(_drawn_setting(2), latest=1.2)
    trace = simulate_timing(_scenario_of(setting, compute=compute))
    assert len(trace) == 60
    assert_invariants(trace, setting, constant=compute is None)
    if compute is not None:
        assert (trace.buffer == GENERAL).any()
    # A longer budget continues the same run (the last row's round_end may be a cut's).
    longer = simulate_timing(_scenario_of(setting, compute=compute, commits=90))
    for name in ("time", "worker", "pulled_version", "local_steps", "buffer"):
        np.testing.assert_array_equal(getattr(longer, name)[:60], getattr(trace, name))


# --- bad input -----------------------------------------------------------------------------


def _checked(doc):
    """Parse and build what a run builds: a refusal may come at either stage."""
    scenario = config.parse_scenario(doc, "compass.yaml")
    config.build_cluster(scenario)
    config.build_rule(scenario)
    return scenario


SPEEDS = (1.0, 2.0, 0.5, 1.5)


@pytest.mark.parametrize(
    ("optimizer", "field"),
    [
        ({"window": 4, "min_window": 5}, "optimizer.min_window"),
        ({"latest": 0.9}, "optimizer.latest"),
    ],
)
def test_bad_knobs_are_refused_naming_the_field(optimizer, field):
    with pytest.raises(ScenarioError) as err:
        _checked(_doc(SPEEDS, optimizer))
    assert field in str(err.value)
    _checked(_doc(SPEEDS, {"window": 5, "min_window": 5, "latest": 1.0}))  # the bounds pass


@pytest.mark.parametrize("protocol", ["sync", {"name": "ssp", "bound": 2}], ids=["sync", "ssp"])
def test_a_protocol_other_than_async_is_refused(protocol):
    with pytest.raises(ScenarioError):
        _checked(_doc(SPEEDS, server={"protocol": protocol}))
    _checked(_doc(SPEEDS, server={"protocol": "async"}))
    fedbuff = {"rule": "fedbuff", "window": 10}
    doc = _doc(SPEEDS, server={"protocol": {"name": "ssp", "bound": 2}})
    _checked({**doc, "optimizer": {"lr": 0.05, **fedbuff}})  # the protocol itself is valid


def test_the_buffer_column_round_trips_enters_the_hash_and_is_checked(tmp_path):
    """A FedCompass trace through parquet (format 5) and back, equal and hashing equally;
    without its buffer column it hashes otherwise; values outside 0, 1, 2 are refused."""
    import json

    import pyarrow.parquet as pq

    from gemsim.trace import CommitTrace

    trace = simulate_timing(config.parse_scenario(_doc([0.5, 1.3, 2.1]), "c.yaml"))
    trace.to_parquet(tmp_path / "t.parquet")
    meta = pq.read_schema(tmp_path / "t.parquet").metadata[b"gemsim.commit_trace"]
    assert json.loads(meta)["format"] == 5
    back = CommitTrace.from_parquet(tmp_path / "t.parquet")
    assert back == trace and back.sha256() == trace.sha256()
    np.testing.assert_array_equal(back.buffer, trace.buffer)
    plain = dataclasses.replace(trace, buffer=None)
    assert plain.sha256() != trace.sha256()
    with pytest.raises(ValueError, match="buffer must be 0, 1 or 2"):
        dataclasses.replace(trace, buffer=np.full(len(trace), 3))
