"""FedCompass's aggregation (Li et al., ICLR 2024, "FedCompass: Efficient Cross-Silo Federated
Learning on Heterogeneous Client Devices Using a Computing Power-Aware Scheduler") against a
float64 numpy replay of its trace, written here from the authors' aggregator (APPFL's
FedCompassAggregator) and sharing no code with ``gemsim.rules``.

The replay. A row's client starts from the model it pulled (the parameters after
``pulled_version`` rows), takes ``local_steps`` plain SGD steps at ``lr`` on its own data
stream (its batches continue from task to task) and sends ``Delta = x_pulled - x_local``.
The server counts the aggregations it has applied (A) and stamps each task with A at its
pull; an update applied when the count is A has staleness ``tau = A - stamp`` and weight
``server_lr * (tau + 1) ** (-staleness_exponent) / N``.

- buffer 0 (a client's first arrival): applied at once, ``x <- x - weight * Delta``, A + 1;
- buffer 1 (a late arrival): kept in the general buffer, replacing that client's earlier
  entry;
- buffer 2 (a group's arrival): kept for the group's round (replacing the client's general
  buffer entry, if any); at the round's last row every group and general-buffer entry is
  applied, each with its own weight, the general buffer emptied, A + 1.

Gradients are computed by hand from the quadratic's documented loss (checked once against
``jax.grad(problem.loss)``), the batches read through ``problem.batch``. The run's final
parameters and each row's update norm are compared with the replay's; another staleness
exponent moves the result by far more than the tolerance (checked), so the weights are seen.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim import config, engine, problems, rules, timing
from gemsim.app import build_problem, run

ALONE, GENERAL, GROUP = 0, 1, 2  # the trace's `buffer` codes
RTOL, ATOL = 2e-5, 2e-6  # float32 run against a float64 replay
SPEEDS = (0.47, 2.31, 1.13, 0.78, 1.62)  # distinct: no two arrivals coincide
MODEL = {"name": "quadratic", "dim": 6, "noise": 0.1, "heterogeneity": 1.0, "condition": 4.0}
HYPER = {"lr": 0.05, "server_lr": 0.9}
LAWS = {
    "constant": {"dist": "constant", "value": 0.01},
    # Wide per-batch spread: clients miss their group's latest time (the general buffer).
    "lognormal": {"dist": "lognormal", "median": 0.01, "sigma": 0.8},
}


def scenario_of(law: str, exponent: float = 0.5):
    doc = {
        "name": "compass",
        "seed": 3,
        "workers": {
            "count": len(SPEEDS),
            "compute": LAWS[law],
            "groups": [{"count": 1, "speed": s} for s in SPEEDS],
        },
        "budget": {"commits": 60},
        "problem": {"model": MODEL},
        "optimizer": {
            "rule": "fedcompass",
            "window": 10,
            "min_window": 2,
            "latest": 1.2,
            "speed_momentum": 0.9,
            "staleness_exponent": exponent,
            **HYPER,
        },
    }
    return config.parse_scenario(doc, "compass.yaml")


def simulated(scenario):
    """The run of ``scenario``. The engine packs int32 worker state into float32 rows, a
    promotion this folder's strict-numerics fixture forbids; runs use the standard rules."""
    with jax.numpy_dtype_promotion("standard"):
        return run(scenario)


# --- the replay ----------------------------------------------------------------------------


class Data:
    """Each client's mini-batches (noise z and optimum c, float64), read through the problem's
    public `batch`, and the gradient of the quadratic's loss ``0.5 h (x - c)^2 + z . x``."""

    def __init__(self, problem, n_workers, n_steps):
        spec = problems.Quadratic(**{k: v for k, v in MODEL.items() if k != "name"})
        self.h = problems.quadratic_curvature(spec).astype(np.float64)
        # One read of the whole grid (one compilation): [worker, step, (z, c), dim].
        read = jax.vmap(jax.vmap(lambda w, s: problem.batch(w, s).x, (None, 0)), (0, None))
        grid = read(jnp.arange(n_workers, dtype=jnp.int32), jnp.arange(n_steps, dtype=jnp.int32))
        self.batches = np.asarray(grid, np.float64)

    def grad(self, w, step, x):
        z, centre = self.batches[w, step]
        return self.h * (x - centre) + z


def local_update(data, w, first_step, steps, x_pulled, lr):
    """``Delta = x_pulled - x_local`` after ``steps`` SGD steps on batches from first_step."""
    x = x_pulled.copy()
    for i in range(steps):
        x = x - lr * data.grad(w, first_step + i, x)
    return x_pulled - x


def fedcompass_replay(trace, data, x0, *, lr, server_lr, exponent, n, owner=None):
    """Parameters after each row (versions[k]: after k rows) and what the rounds held;
    ``owner``: each row's client (default: its worker; a population's ``client``)."""
    weight = lambda tau: server_lr * (tau + 1.0) ** (-exponent) / n
    versions, applied = [x0.copy()], [0]  # applied[k]: aggregations after k rows
    x, count = x0.copy(), 0
    general, group = {}, {}  # client -> (Delta, stamp)
    next_step = {}
    seen = {"general_rounds": 0, "replaced": 0}
    rows = zip(
        (trace.worker if owner is None else owner).tolist(),
        trace.pulled_version.tolist(),
        trace.local_steps.tolist(),
        trace.buffer.tolist(),
        trace.round_end.tolist(),
        strict=True,
    )
    for w, pulled, steps, buffer, end in rows:
        first = next_step.get(w, 0)
        delta = local_update(data, w, first, steps, versions[pulled], lr)
        next_step[w] = first + steps
        stamp = applied[pulled]
        if buffer == ALONE:
            x = x - weight(count - stamp) * delta
            count += 1
        elif buffer == GENERAL:
            general[w] = (delta, stamp)
        else:
            group[w] = (delta, stamp)
            if end:
                seen["general_rounds"] += bool(general)
                seen["replaced"] += len(general.keys() & group.keys())
                entries = {**general, **group}  # a group entry replaces its client's
                x = x - sum(weight(count - s) * d for d, s in entries.values())
                general, group = {}, {}
                count += 1
        versions.append(x.copy())
        applied.append(count)
    return versions, seen


def replay(result, data, problem, exponent=0.5):
    x0 = np.asarray(problem.init_params["theta"], np.float64)
    return fedcompass_replay(result.trace, data, x0, exponent=exponent, n=len(SPEEDS), **HYPER)


@pytest.fixture(scope="module")
def problem():
    return build_problem(scenario_of("constant"))


@pytest.fixture(scope="module")
def data(problem):
    # No client takes more than every row's steps: 60 rows of at most `window` = 10.
    return Data(problem, len(SPEEDS), 60 * 10)


@pytest.fixture(scope="module")
def runs():
    """Each law's run, and the lognormal one with another staleness exponent."""
    return {
        ("constant", 0.5): simulated(scenario_of("constant")),
        ("lognormal", 0.5): simulated(scenario_of("lognormal")),
        ("lognormal", 1.0): simulated(scenario_of("lognormal", 1.0)),
    }


def test_the_hand_gradient_is_the_problems(problem, data):
    """The replay's gradient is the problem's loss's, at a point away from the start."""
    x = np.linspace(-1.0, 1.0, MODEL["dim"])
    batch = problem.batch(jnp.int32(2), jnp.int32(3))
    params = {"theta": jnp.asarray(x, jnp.float32)}
    want = jax.grad(problem.loss)(params, batch, batch.key)["theta"]
    np.testing.assert_allclose(data.grad(2, 3, x), np.asarray(want), rtol=1e-5, atol=1e-6)


def _first_differing_row(got, want):
    bad = ~np.isclose(got, want, rtol=1e-4, atol=1e-6)
    return int(np.argmax(bad)) if bad.any() else None


@pytest.mark.parametrize(
    ("law", "exponent"), [("constant", 0.5), ("lognormal", 0.5), ("lognormal", 1.0)]
)
def test_the_run_equals_the_replay(runs, data, problem, law, exponent):
    """Final parameters, and each row's move of the model (zero where nothing is applied)."""
    result = runs[(law, exponent)]
    trace = result.trace
    assert len(trace) == 60
    versions, seen = replay(result, data, problem, exponent)
    if law == "lognormal":  # the general buffer took part in rounds, and was replaced
        assert (trace.buffer == GENERAL).any() and seen["general_rounds"] > 0
        assert seen["replaced"] > 0
    moves = np.linalg.norm(np.diff(np.asarray(versions), axis=0), axis=1)
    got = result.metrics["update_norm"].to_numpy()
    row = _first_differing_row(got, moves)
    assert row is None, (
        f"row {row} (buffer {trace.buffer[row]}, round_end {trace.round_end[row]}): "
        f"update_norm {got[row]!r}, replay {moves[row]!r}"
    )
    np.testing.assert_allclose(result.params["['theta']"], versions[-1], rtol=RTOL, atol=ATOL)
    assert np.abs(versions[-1] - versions[0]).max() > 0.1  # the run moved


def test_another_staleness_exponent_moves_the_result_far_beyond_the_tolerance(runs, data, problem):
    """The same trace replayed with exponent 0 (no damping) lands far from the run with 0.5:
    a rule that ignored the exponent would fail the comparison above."""
    result = runs[("lognormal", 0.5)]
    undamped = replay(result, data, problem, exponent=0.0)[0][-1]
    gap = np.abs(undamped - result.params["['theta']"]).max()
    assert gap > 100 * (ATOL + RTOL * np.abs(undamped).max())
    # The exponent changes the weights only: the schedule is the same.
    other = runs[("lognormal", 1.0)].trace
    assert other.sha256() == result.trace.sha256()


# --- over a population ---------------------------------------------------------------------

N_CLIENTS, N_SLOTS = 14, 4
POPULATION_SPEC = problems.Quadratic(dim=5, condition=5.0, heterogeneity=1.0)


class ClientObjectives:
    """Client c's objective ``0.5 h (x - c_c)^2`` (no noise: every step reads the same)."""

    def __init__(self):
        self.h = problems.quadratic_curvature(POPULATION_SPEC).astype(np.float64)
        self.centres = problems.worker_optima(POPULATION_SPEC, 0, N_CLIENTS).astype(np.float64)

    def grad(self, c, step, x):
        del step
        return self.h * (x - self.centres[c])


def compass_population_trace(n_clients):
    spec = timing.ClusterSpec(
        workers=(timing.WorkerSpec(timing.LogNormal(0.01, 0.8)),) * N_SLOTS,
        budget=timing.CommitBudget(120),
        population=timing.Population(n_clients, speed=timing.LogNormal(1.0, 0.6)),
        protocol=timing.Compass(10, 2, 1.2, 0.9),
        window=10,
    )
    return timing.simulate(spec, seed=5)


@pytest.fixture(scope="module")
def population_trace():
    return compass_population_trace(N_CLIENTS)


def population_run(trace, kind=engine.SequentialExecutor, rows=None, plan=None):
    n = trace.n_clients
    problem = problems.make_problem(POPULATION_SPEC, None, batch_size=1, seed=0, n_workers=n)
    rule = rules.fedcompass(lr=HYPER["lr"], window=10, server_lr=HYPER["server_lr"])
    with jax.numpy_dtype_promotion("standard"):
        ex = kind(
            rules.with_clients(rule, n, rows),
            problem,
            params=problem.init_params,
            n_workers=N_SLOTS,
            chunk=16,
        )
        return ex.execute(engine.plan_of(trace, window=10) if plan is None else plan), problem


@pytest.mark.parametrize("kind", [engine.SequentialExecutor, engine.WavefrontExecutor])
def test_a_populations_run_equals_the_replay_with_the_clients_general_buffer(
    population_trace, kind
):
    """Slots serve clients: the general buffer is the clients' (one entry a client, N rows of
    the rule's per-client state), each weight divided by the population's N."""
    trace = population_trace
    assert {ALONE, GENERAL, GROUP} <= set(trace.buffer.tolist())
    assert len(set(trace.client.tolist())) == N_CLIENTS
    result, problem = population_run(trace, kind)
    x0 = np.asarray(problem.init_params["theta"], np.float64)
    versions, seen = fedcompass_replay(
        trace, ClientObjectives(), x0, exponent=0.5, n=N_CLIENTS, owner=trace.client, **HYPER
    )
    assert seen["general_rounds"] > 0
    np.testing.assert_allclose(result.params["theta"], versions[-1], rtol=RTOL, atol=ATOL)
    assert np.abs(versions[-1] - versions[0]).max() > 0.1


@pytest.mark.parametrize("kind", [engine.SequentialExecutor, engine.WavefrontExecutor])
def test_a_populations_rows_for_the_named_clients_only_give_the_same_run(kind):
    """200 clients, 120 commits: the rows of the clients the trace names, in first-commit
    order, give the run of all 200 rows, each kept row its client's. To rounding only: the
    general buffer's weighted sum adds its held rows in row order, which differs."""
    trace = compass_population_trace(200)
    plan = engine.plan_of(trace, window=10)
    compact, named = engine.client_rows(plan)
    assert named < 100
    full, _ = population_run(trace, kind, plan=plan)
    small, _ = population_run(trace, kind, rows=named, plan=compact)
    np.testing.assert_allclose(small.params["theta"], full.params["theta"], rtol=1e-6, atol=1e-7)
    order = np.asarray(list(dict.fromkeys(plan.client.tolist())))
    for a, b in zip(
        jax.tree.leaves(small.server_state.clients),
        jax.tree.leaves(full.server_state.clients),
        strict=True,
    ):
        np.testing.assert_allclose(a, b[order], rtol=1e-6, atol=1e-7)
    assert not np.asarray(full.server_state.clients.held)[np.setdiff1d(range(200), order)].any()


def test_a_populations_runs_executed_together_equal_each_run_alone(tmp_path):
    """Through `gemsim run`: a sweep of `server_lr` over a population of 60 clients, one by
    one and two at once (each run's rows stacked; the close's `lax.cond` then runs both
    branches), gives the same rows and parameters."""
    import yaml

    from gemsim.app import run_file
    from gemsim.results import load_results, read_params

    doc = {
        "name": "compass-population",
        "seed": 2,
        "workers": {"compute": {"dist": "lognormal", "median": 0.01, "sigma": 0.8}},
        "clients": {"population": 60, "concurrency": 4},
        "budget": {"commits": 80},
        "problem": {"model": MODEL},
        "optimizer": {"rule": "fedcompass", "lr": 0.05, "window": 6, "min_window": 2},
        "sweep": {"optimizer.server_lr": [0.9, 4.0]},
    }
    params, frames = {}, {}
    for together in ("off", 2):
        doc["engine"] = {"many_runs": together}
        path = tmp_path / f"{together}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out = tmp_path / str(together)
        with jax.numpy_dtype_promotion("standard"):
            run_file(path, out=out, quiet=True)
        frames[together] = load_results(out).sort_values(["run_id", "commit"])
        params[together] = {
            p.parent.name: read_params(p)["['theta']"] for p in sorted(out.rglob("params.npz"))
        }
    assert len(frames["off"]) == 160 and list(params["off"]) == list(params[2])
    for run_id, theta in params["off"].items():
        np.testing.assert_allclose(params[2][run_id], theta, rtol=1e-6, atol=1e-7)
    a, b = (frames[k]["update_norm"].to_numpy() for k in ("off", 2))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert not np.allclose(*params["off"].values())
