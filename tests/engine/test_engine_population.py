"""Population runs through the engine: K slots serving N clients (`timing.Population`).

A population's trace has one row per slot (`worker`, K of them) and names the client whose
task each commit ends (`client`, N of them). The engine keeps K rows, reads each commit's
mini-batches from its client's own stream (counted in the client's commits) and starts every
task's rule state anew (a task belongs to a client, not to its slot).

The reference below shares no code with the engine: a plain loop over the trace's commits
that keeps every parameter-server version (theta and the rule's server state), takes each
commit's gradient at the version it pulled, from a fresh rule state built with the rules'
public pull hook (`rules.pull_state`, fresh), on its client's batches at the client's step
counter, then applies the rule's commit. It drives the `Rule` interface in its documented
order, a commit's local work (its `window` steps, a `lax.scan`) compiled apart from the
commit, as a real backend's worker and server do; the operations are then the engine's, and
the parameters are compared bit for bit (run op by op instead, JAX rounds some multiply-adds
twice where XLA fuses them into one, and the two drift by ulps). A wrong client, a state kept
across tasks or a wrong version moves them by orders of magnitude more (checked below).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from engine_helpers import assert_same

from gemsim import engine, problems, rules, timing

N_CLIENTS, N_SLOTS = 12, 3
RULES = {
    # GEM's worker state (its proxy m and its s) is what a task must start anew.
    "gem": lambda: rules.gem(lr=0.05, momentum=0.9),
    # Local steps: a client's stream is counted in windows of its own commits.
    "downpour-window": lambda: rules.downpour(lr=0.05, window=2),
}


def population_trace(seed=1, budget=None):
    """N = 12 clients, K = 3 slots; churn loses some tasks, and slots start fresh lives."""
    budget = budget or timing.CommitBudget(120)
    churn = timing.Churn(timing.Exponential(4.0), timing.Exponential(1.5))
    spec = timing.ClusterSpec(
        workers=(timing.WorkerSpec(timing.LogNormal(0.3, 0.5)),) * N_SLOTS,
        budget=budget,
        population=timing.Population(N_CLIENTS, churn=churn),
    )
    return timing.simulate_run(spec, seed=seed)


def quadratic(n_owners, seed=0):
    """Heterogeneous (each data owner its own optimum) and noisy (each its own noise stream):
    another client's batches give another gradient."""
    spec = problems.Quadratic(dim=6, condition=10.0, noise=0.1, heterogeneity=1.0)
    return problems.make_problem(spec, None, batch_size=1, seed=seed, n_workers=n_owners)


def reference(rule, problem, trace, *, owner=None, per_task=True):
    """Final central parameters of the trace's commits, replayed one by one.

    `owner`: whose data each commit reads (default: its client). `per_task`: every commit's
    state is a fresh pull of the version it computed on; False: persistent workers, whose
    state carries over from their own commit and starts anew only at a new life (`fresh`).
    """
    if owner is None:
        owner = trace.worker if trace.client is None else trace.client
    grad = jax.value_and_grad(problem.loss)

    @jax.jit
    def local_work(problem, pulled, ws, data_owner, first):
        x0 = rule.start(pulled, ws)

        def step(carry, i):
            x, acc, ws = carry
            batch = problem.batch(data_owner, first + i)
            _, g = grad(x, batch, batch.key)
            return rule.local_step(x, acc, g, ws), None

        steps = jnp.arange(rule.window)
        (x, acc, ws), _ = jax.lax.scan(step, (x0, rule.init_acc(x0), ws), steps)
        return rules.Work(x0, x, acc), ws

    commit = jax.jit(rule.commit)
    init = rule.init(problem.init_params, trace.n_workers)
    row = jax.tree.map(lambda a: a[0], init.workers)
    theta, server = problem.init_params, init.server
    versions = [(theta, server)]  # version v: theta and the server state after v commits
    steps = {}  # data owner -> its batches so far
    kept, prev = {}, {}  # persistent workers: state after, and index of, their last commit
    for k in range(len(trace)):
        w, o, v = int(trace.worker[k]), int(owner[k]), int(trace.pulled_version[k])
        pulled, pulled_server = versions[v]
        if per_task or trace.fresh[k]:
            ws = rules.pull_state(rule, row, pulled, pulled_server, True)
        else:
            assert v == prev[w] + 1  # a persistent worker pulls at its own commit
            ws = kept[w]
        first = steps.get(o, 0)
        work, ws = local_work(problem, pulled, ws, np.int32(o), np.int32(first))
        steps[o] = first + rule.window
        ctx = rules.commit_context(int(trace.staleness[k]), k, bool(trace.round_end[k]))
        theta, server, kept[w], _ = commit(theta, server, ws, work, ctx)
        versions.append((theta, server))
        prev[w] = k
    return np.asarray(theta["theta"])


def executed(rule, problem, trace, kind=engine.SequentialExecutor, chunk=32, **kwargs):
    plan = engine.plan_of(trace, window=rule.window, eval_every=kwargs.pop("eval_every", None))
    ex = kind(rule, problem, params=problem.init_params, n_workers=trace.n_workers, chunk=chunk)
    return ex.execute(plan, **kwargs), ex, plan


@pytest.fixture(scope="module")
def run():
    return population_trace()


def test_the_trace_loses_tasks_and_starts_fresh_lives(run):
    trace = run.trace
    assert trace.n_workers == N_SLOTS and trace.n_clients == N_CLIENTS
    assert run.clients.lost.sum() > 0 and run.workers.lost.sum() > 0
    assert np.any(trace.fresh & (trace.pulled_version > 0))  # host fills of fresh lives
    assert len(np.unique(trace.client)) == N_CLIENTS
    # slots change clients: a slot's data is not its client's
    assert any(len(np.unique(trace.client[trace.worker == w])) > 1 for w in range(N_SLOTS))


@pytest.mark.bitexact
@pytest.mark.parametrize("name", list(RULES))
def test_engine_equals_the_reference_loop(run, name):
    rule, trace = RULES[name](), run.trace
    problem = quadratic(N_CLIENTS)
    out, ex, _ = executed(rule, problem, trace, eval_every=40)
    assert out.status.value == "ok" and out.n_commits == len(trace)
    # memory by slot: K rows and a spare one, whatever N
    assert ex.initial_carry().slots.shape[0] == N_SLOTS + 1
    ex.release()
    got = np.asarray(out.params["theta"])
    np.testing.assert_array_equal(got, reference(rule, problem, trace))
    assert not np.allclose(got, 1.0, atol=1e-2)  # the run moved
    # What the comparison catches: the slot's data instead of the client's ...
    wrong = reference(rule, problem, trace, owner=trace.worker)
    assert np.abs(wrong - got).max() > 1e-3
    if name == "gem":  # ... and, for a rule with worker state, a state kept across tasks
        kept = reference(rule, problem, trace, per_task=False)
        assert np.abs(kept - got).max() > 1e-3
    # every evaluation of a population's run covers its N clients' data
    assert {v["loss"].shape for v in out.worker_evals.values()} == {(N_CLIENTS,)}


@pytest.mark.bitexact
@pytest.mark.parametrize("name", list(RULES))
def test_wavefront_equals_sequential(run, name):
    rule, trace = RULES[name](), run.trace
    problem = quadratic(N_CLIENTS)
    seq, _, plan = executed(rule, problem, trace, eval_every=40)
    wave, ex, _ = executed(rule, problem, trace, engine.WavefrontExecutor, eval_every=40)
    assert len([w for a, b in plan.segments(32) for w in plan.waves(a, b, 4)]) < len(plan) / 1.5
    # Parameters bit for bit (the quadratic's arithmetic is elementwise); the reported sums
    # within 1e-6 (vmapped, XLA may sum them in another order).
    assert_same(wave, seq, metrics_rtol=1e-6)


@pytest.mark.bitexact
def test_k_clients_never_down_are_persistent_workers_but_for_the_state():
    """N = K, no churn, uniform selection: the persistent workers' trace (timing model's
    docstring), each slot keeping one client. Relabelled by client, the persistent run reads
    the same data; a rule without worker state gives the same bits, GEM differs only by its
    state starting anew for each task (each result matches its reference)."""
    law = timing.LogNormal(0.3, 0.5)
    persistent = timing.ClusterSpec(
        workers=(timing.WorkerSpec(law),) * N_SLOTS, budget=timing.CommitBudget(90)
    )
    population = dataclasses.replace(persistent, population=timing.Population(N_SLOTS))
    trace = timing.simulate(population, seed=2)
    plain = dataclasses.replace(trace, client=None, n_clients=None)
    assert plain.sha256() == timing.simulate(persistent, seed=2).sha256()
    slots = [np.unique(trace.client[trace.worker == w]) for w in range(N_SLOTS)]
    assert all(len(s) == 1 for s in slots)
    by_client = dataclasses.replace(plain, worker=trace.client)  # worker w = client w
    problem = quadratic(N_SLOTS)

    downpour = rules.downpour(lr=0.05)
    a, _, _ = executed(downpour, problem, trace, eval_every=30)
    b, _, _ = executed(downpour, problem, by_client, eval_every=30)
    assert_same(a, b)

    gem = rules.gem(lr=0.05)
    a, _, _ = executed(gem, problem, trace)
    b, _, _ = executed(gem, problem, by_client)
    assert np.abs(a.params["theta"] - b.params["theta"]).max() > 1e-3
    np.testing.assert_array_equal(a.params["theta"], reference(gem, problem, trace))
    kept = reference(gem, problem, by_client, per_task=False)
    np.testing.assert_array_equal(b.params["theta"], kept)


@pytest.mark.bitexact
def test_population_runs_executed_together_equal_each_run_alone():
    """Three seeds (traces of unequal lengths, with losses and fresh lives), each with its
    own problem; every result of the batch is the run's own (as in test_engine_many)."""
    rule = RULES["gem"]()
    runs = []
    for seed in range(3):
        trace = population_trace(seed, timing.SecondsBudget(12.0)).trace
        problem = quadratic(N_CLIENTS, seed=seed)
        plan = engine.plan_of(trace, window=rule.window, eval_every=25)
        runs.append(engine.RunInputs(plan, problem, problem.init_params, {}))
    assert len({len(r.plan) for r in runs}) > 1 and all(r.plan.host_fills for r in runs)
    many = engine.ManyRunsExecutor(lambda h: rule, runs[0], n_workers=N_SLOTS, chunk=32)
    for r, got in zip(runs, many.execute(runs), strict=True):
        alone = engine.SequentialExecutor(rule, r.problem, params=r.params, n_workers=N_SLOTS)
        assert_same(got, alone.execute(r.plan), metrics_rtol=1e-6)


def test_population_and_persistent_runs_are_not_executed_together(run):
    rule = rules.downpour(lr=0.05)
    problem = quadratic(N_CLIENTS)
    pop = engine.plan_of(run.trace)
    plain = engine.plan_of(dataclasses.replace(run.trace, client=None, n_clients=None))
    runs = [engine.RunInputs(p, problem, problem.init_params, {}) for p in (pop, plain)]
    many = engine.ManyRunsExecutor(lambda h: rule, runs[0], n_workers=N_SLOTS)
    with pytest.raises(ValueError, match="populations"):
        many.execute(runs)


def test_the_plan_counts_batches_by_client_and_fills_fresh(run):
    trace = run.trace
    plan = engine.plan_of(trace, window=2)
    assert plan.population and plan.n_clients == N_CLIENTS and plan.n_workers == N_SLOTS
    np.testing.assert_array_equal(plan.client, trace.client)
    earlier = [int(np.sum(trace.client[:k] == trace.client[k])) for k in range(len(trace))]
    np.testing.assert_array_equal(plan.first_step, 2 * np.asarray(earlier))
    assert plan.host_fills and all(f.all() for f in plan.host_fresh.values())
    cut = plan.truncated(50)
    np.testing.assert_array_equal(cut.client, trace.client[:50])
    assert cut.n_clients == N_CLIENTS
    assert engine.step_inputs(plan).client is not None
    # persistent workers: no client column, no client input (their programs are unchanged)
    plain = engine.plan_of(dataclasses.replace(trace, client=None, n_clients=None))
    assert not plain.population and plain.n_clients is None
    assert engine.step_inputs(plain).client is None
    assert len(jax.tree.leaves(engine.step_inputs(plain))) == 6
    with pytest.raises(ValueError, match="n_clients"):
        engine.make_plan(trace.worker, trace.pulled_version, N_SLOTS, client=trace.client)
    with pytest.raises(ValueError, match="client ids"):
        engine.make_plan(
            trace.worker, trace.pulled_version, N_SLOTS, client=trace.client, n_clients=5
        )
    # a problem built for the slots, not the clients, would read clamped indices: refused
    slots_only = quadratic(N_SLOTS)
    ex = engine.SequentialExecutor(
        rules.downpour(lr=0.05), slots_only, params=slots_only.init_params, n_workers=N_SLOTS
    )
    with pytest.raises(ValueError, match="n_workers=12"):
        ex.execute(plan)


def test_the_caller_limits_which_data_owners_are_evaluated(run):
    rule = rules.downpour(lr=0.05)
    problem = quadratic(N_CLIENTS)
    full, _, _ = executed(rule, problem, run.trace, eval_every=40)
    none, _, _ = executed(rule, problem, run.trace, eval_every=40, eval_owners=[])
    some, _, _ = executed(rule, problem, run.trace, eval_every=40, eval_owners=[7, 0, 3])
    assert none.worker_evals == {} and none.final_workers == {}
    assert none.evals.keys() == full.evals.keys()
    assert none.evals[39]["test_loss"] == full.evals[39]["test_loss"]
    np.testing.assert_array_equal(some.worker_eval_owners, [7, 0, 3])
    assert full.worker_eval_owners is None
    for k, values in some.worker_evals.items():
        np.testing.assert_array_equal(values["loss"], full.worker_evals[k]["loss"][[7, 0, 3]])
    with pytest.raises(ValueError, match="eval_owners"):
        executed(rule, problem, run.trace, eval_every=40, eval_owners=[N_CLIENTS])
    # runs executed together keep each run's own selection
    plan = engine.plan_of(run.trace, eval_every=40)
    runs = [
        engine.RunInputs(plan, problem, problem.init_params, {}, eval_owners=owners)
        for owners in (None, [], [7, 0, 3])
    ]
    many = engine.ManyRunsExecutor(lambda h: rule, runs[0], n_workers=N_SLOTS, chunk=32)
    got = many.execute(runs)
    assert got[1].worker_evals == {}
    for k in full.worker_evals:
        np.testing.assert_allclose(got[0].worker_evals[k]["loss"], full.worker_evals[k]["loss"])
        np.testing.assert_array_equal(
            got[2].worker_evals[k]["loss"], got[0].worker_evals[k]["loss"][[7, 0, 3]]
        )
