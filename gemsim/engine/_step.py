"""The engine's step, in two phases: the worker's gradient work (local steps from its start
point) and the atomic commit at the PS. The sequential executor runs them back to back in a
compiled loop; the wavefront executor vmaps the first over a wave of commits, then scans the second.

A population's steps (`StepInput.client` given; None for persistent workers, whose programs
are those of a plan without one) read the batches of the commit's client, and write the
committed row with a fresh rule state: the slot's next task belongs to a client of its own.
Which of the two a program does is static, fixed by the inputs' structure.

So is a pull before apply (`StepInput.pre_pull` given; None for plans without one, whose
programs are unchanged): where it is true, the committed row gets the version the commit was
applied to as its snapshot, and the rule's pull hook on the committer's new state, as at a
plain pull of that version (`ExecutionPlan.fill_pre`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.rules import ClientServer, CommitContext, Work, apart, pull_state
from gemsim.types import PyTree

from ._layout import RowLayout


class Carry(NamedTuple):
    theta: PyTree  # the central variable
    server: PyTree  # the rule's server state
    slots: jax.Array  # float32[n + 1, K]: each worker's snapshot and rule state
    diverged: jax.Array  # bool[]: a commit was non-finite (later ones are discarded)
    diverged_at: jax.Array  # int32[]: the commit that produced non-finite values, or -1


class StepInput(NamedTuple):
    commit: jax.Array  # int32[]
    worker: jax.Array  # int32[]
    staleness: jax.Array  # int32[]
    first_step: jax.Array  # int32[]: the commit's first mini-batch in the worker's stream
    active: jax.Array  # bool[]: False for the padding of a wave
    round_end: jax.Array  # bool[]: the protocol closes a round at this commit
    # int32[]: a population's commit, the client whose task it ends (the data owner; `worker`
    # is the slot). None for persistent workers: no leaf, so their programs are unchanged.
    client: jax.Array | None = None
    # bool[]: the committer pulled the version before this commit (`ExecutionPlan.fill_pre`).
    # None where no commit of the plan does: no leaf, so those programs are unchanged.
    pre_pull: jax.Array | None = None
    # int32[]: the commit's own number of local steps (workers with windows of their own).
    # None where every commit holds the rule's window: no leaf, so those programs are unchanged.
    local_steps: jax.Array | None = None
    # int32[]: the data owner where `worker` is only a row index (the real backends' one-row
    # buffer), for a rule's per-client state. None: `client`, else `worker`.
    owner: jax.Array | None = None
    # int32[]: where a FedCompass server put the commit (`ExecutionPlan.buffer`). None for
    # every other protocol: no leaf.
    buffer: jax.Array | None = None
    # int32[]: the committer's row among the per-client rows kept for the clients a plan
    # names (`ExecutionPlan.client_row`). None where a rule keeps every client's: no leaf.
    client_row: jax.Array | None = None


def data_owner(inp: StepInput) -> jax.Array:
    """Whose mini-batches the commit's gradient reads and whose per-client state its commit
    reads: its client in a population, else its worker."""
    if inp.owner is not None:
        return inp.owner
    return inp.worker if inp.client is None else inp.client


class StepOutput(NamedTuple):
    batch_loss: jax.Array  # mean loss of the worker's own mini-batches (free with the gradient)
    finite: jax.Array
    info: Any  # the rule's info NamedTuple


class LocalWork(NamedTuple):
    """What a worker's local phase produces: its work for the commit, its state, its loss."""

    x0: PyTree
    x: PyTree
    acc: PyTree
    ws: PyTree
    loss: jax.Array


def gradient_phase(rule, problem, pulled, worker, first_step, token=None, steps=None) -> LocalWork:
    """The worker's local work from its row, `pulled = (snapshot, ws)`: `window` gradients
    and local steps, or `steps` of them (a run-time count: the commit's own local steps).

    `token` (default `first_step`): the run-time scalar that stores the work before the
    commit reads it (`_materialize`); it must not carry the run axis where the phase is vmapped
    over runs, or the boundary becomes a select that XLA fuses through.
    """
    snapshot, ws = pulled
    x0 = rule.start(snapshot, ws)
    grad_fn = jax.value_and_grad(problem.loss)

    def body(carry, i):
        x, acc, ws = carry
        batch = problem.batch(worker, first_step + i)
        loss, g = grad_fn(x, batch, batch.key)
        x, acc, ws = rule.local_step(x, acc, g, ws)
        return (x, acc, ws), loss

    carry = (x0, rule.init_acc(x0), ws)
    if steps is not None:
        carry, loss = _own_steps(body, carry, steps)
        x, acc, ws = carry
    elif rule.window == 1:
        (x, acc, ws), loss = body(carry, 0)
    else:
        (x, acc, ws), losses = jax.lax.scan(body, carry, jnp.arange(rule.window))
        loss = jnp.mean(losses)
    token = first_step if token is None else token
    if rule.window > 1 or steps is not None:
        x, acc = _materialize((x, acc), token)
    else:
        acc = _materialize(acc, token)
    return LocalWork(x0, x, acc, ws, loss)


def _own_steps(body, carry, steps: jax.Array):
    """`steps` (run-time) iterations of the local step `body`, and their mean loss: a loop
    of the commit's own length (vmapped over a wave, it runs the longest member's and keeps
    each member's state once its own steps are done)."""

    def one(state):
        i, carry, total = state
        carry, loss = body(carry, i)
        return i + 1, carry, total + loss

    loss = jnp.zeros((), jnp.float32)
    _, carry, total = jax.lax.while_loop(lambda s: s[0] < steps, one, (0, carry, loss))
    return carry, total / jnp.maximum(steps, 1)  # a wave's padding takes no step


def _materialize(tree: PyTree, token: jax.Array) -> PyTree:
    """`tree`, stored to memory before the commit reads it, as when a real worker sends its
    work to the server (gemsim.real). Otherwise XLA fuses the last local step into the
    commit: theta + (-lr * g) becomes one fused multiply-add, rounded once instead of
    twice, and the replay of a real run drifts from it by an ulp per commit, which training
    amplifies. `x` is only materialized for windowed rules: the others' commits do not read
    it.

    The boundary is `rules.apart` (a loop XLA keeps on a CPU; a conditional returning the
    tree copied it on every commit). `rules.stored`'s multiplication by a run-time one would
    round the same without a boundary, but the gradient's last kernels (the bias gradients'
    reductions) then fuse into every commit kernel that reads them, and the CNN's commit
    costs more (both measured: benchmarks/RESULTS.md, "Figures the code cites").
    """
    return apart(tree, token)


class Committed(NamedTuple):
    """A commit's effect on one run, before its row is written into the slots."""

    theta: PyTree
    server: PyTree
    ws: PyTree  # the committer's new rule state (its new row: theta as its snapshot, ws)
    row_index: jax.Array  # int32[]: where the row goes (the spare row for padding)
    diverged: jax.Array
    diverged_at: jax.Array
    snapshot: PyTree = None  # the row's snapshot where it is not theta (a pull before apply)

    @property
    def row_snapshot(self) -> PyTree:
        """The snapshot the committer's row gets: theta, or the version before the commit."""
        return self.theta if self.snapshot is None else self.snapshot


def commit_math(
    rule, carry, inp: StepInput, work: LocalWork, spare, *, padded=False
) -> tuple[Committed, StepOutput]:
    """The atomic commit at the PS: the rule's commit, the committer's new rule state, where
    its row goes, and the divergence flags (`carry` needs theta, server, diverged and
    diverged_at; `spare` is the index of the spare row, where padding writes)."""
    ctx = CommitContext(
        staleness=inp.staleness,
        commit=inp.commit,
        round_end=inp.round_end,
        client=data_owner(inp),
        active=inp.active,
        buffer=0 if inp.buffer is None else inp.buffer,
        row=inp.client_row,
    )
    theta, server, ws, info = rule.commit(
        carry.theta, carry.server, work.ws, Work(work.x0, work.x, work.acc), ctx
    )
    finite = jnp.isfinite(work.loss) & jnp.isfinite(info.update_norm)
    if padded:
        finite = finite | ~inp.active
        theta = _select(inp.active, theta, carry.theta)
        server = select_server(inp.active, server, carry.server)
    if inp.client is not None:
        # A population: the slot's next task (a self fill, pulled at this commit) is a new
        # client's, whose state starts anew, as at a host fill of a fresh life. Where the next
        # task is not a self fill, a host fill overwrites the row before it is read.
        ws = pull_state(rule, ws, theta, server, True)
    snapshot = None
    if inp.pre_pull is not None:
        # The server sent the worker what it held before applying this commit: that version,
        # with the pull hook as at any plain pull of it (a state kept by the worker, such as
        # GEM's proxy, stays the one this commit left).
        pulled = pull_state(rule, ws, carry.theta, carry.server, False)
        ws = _select(inp.pre_pull, pulled, ws)
        snapshot = _select(inp.pre_pull, carry.theta, theta)
    row_index = jnp.where(inp.active, inp.worker, spare)
    newly = ~finite & ~carry.diverged
    committed = Committed(
        theta=theta,
        server=server,
        ws=ws,
        row_index=row_index,
        diverged=carry.diverged | ~finite,
        diverged_at=jnp.where(newly, inp.commit, carry.diverged_at),
        snapshot=snapshot,
    )
    return committed, StepOutput(batch_loss=work.loss, finite=finite, info=info)


def commit_phase(
    rule, layout: RowLayout, carry: Carry, inp: StepInput, work: LocalWork, *, padded: bool = False
):
    """The atomic commit at the PS, then the worker's row written back: its new rule state
    and theta as its next snapshot.

    Writing theta unconditionally is exact: a worker whose next pull is not this commit's
    version gets that pull as a host fill, which runs later and overwrites the snapshot
    (`plan.make_plan`). Divergence is only detected here, from two scalars the commit has
    anyway (the worker's loss and the norm of the update applied); the executor then
    re-runs the commits before it to recover the last finite state (`Executor.execute`).
    Guards on theta and on the row were passes over them on every commit, a tenth of a
    commit's cost beside its gradient. `padded` (waves of the wavefront executor): inactive
    padding members must leave theta and the server state unchanged.
    """
    spare = carry.slots.shape[0] - 1
    done, out = commit_math(rule, carry, inp, work, spare, padded=padded)
    slots = layout.write(carry.slots, done.row_index, done.row_snapshot, done.ws)
    carry = Carry(done.theta, done.server, slots, done.diverged, done.diverged_at)
    return carry, out


def make_step(rule, layout: RowLayout):
    """`step(problem, carry, StepInput) -> (carry, StepOutput)`: one commit, both phases.

    The problem is an argument, not a closure: it is a pytree whose data arrays then reach
    the compiled program as inputs instead of being baked in as constants.
    """

    def step(problem, carry: Carry, inp: StepInput):
        pulled = layout.read(carry.slots, inp.worker)
        work = gradient_phase(
            rule, problem, pulled, data_owner(inp), inp.first_step, steps=inp.local_steps
        )
        return commit_phase(rule, layout, carry, inp, work)

    return step


def make_chunk(rule, layout: RowLayout, *, padded: bool = False):
    """`chunk(problem, carry, piece, n_steps) -> (carry, outputs)`: commits [0, n_steps) of a
    piece of the plan's inputs (`step_piece`), in one loop, pipelined.

    The piece is padded to the executor's chunk length, and the loop runs for a run-time
    number of steps, so that one compiled program serves every segment length (a scan's
    length is part of its program: segments cut by evaluations and fills needed several).
    The outputs come back padded to the chunk length; the first `n_steps` are the commits'.

    The row of commit k + 1 is read right after commit k's in-place write and carried as a
    buffer of its own, so that nothing else in a step reads the [n + 1, K] slots. When the
    read is left inside the step, XLA fuses it into the computations that feed the write;
    where the new row depends on other offsets of the old one (GEM: theta depends on s, the
    snapshot on theta) it then copies the whole slots array on every commit (docs/design.md §9).
    `padded`: the inputs may hold inactive steps (runs of unequal length executed together).
    """

    def chunk(problem, carry: Carry, piece, n_steps):
        inputs, next_workers = piece

        def step(carry: Carry, pulled, i):
            inp = jax.tree.map(lambda x: x[i], inputs)
            work = gradient_phase(
                rule, problem, pulled, data_owner(inp), inp.first_step, steps=inp.local_steps
            )
            carry, out = commit_phase(rule, layout, carry, inp, work, padded=padded)
            return carry, layout.read(carry.slots, next_workers[i]), out

        pulled = layout.read(carry.slots, inputs.worker[0])
        return loop_steps(step, carry, pulled, inputs.commit.shape[0], n_steps)

    return chunk


def traced_once(fn, *args):
    """``(replay, shapes)``: `fn` traced once on `args` (arrays or tracers of their shapes),
    and a function that emits the traced operations again on new arguments, with the shapes
    of its outputs. Where a program needs a function's output shapes before it uses it (a
    loop's buffers, a conditional's other branch), a second trace of its Python (the
    `jax.eval_shape` it replaces) took half of the tracing of every chunk: 0.1 s of the 0.23 s
    of the 16-run study of benchmarks/fixed_costs.py. The operations are the same, in the same
    order: the program is the same (its compilation cache key too)."""
    traced, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
    results = jax.tree.structure(shapes)

    def replay(*new_args):
        flat = jax.core.eval_jaxpr(traced.jaxpr, traced.consts, *jax.tree.leaves(new_args))
        return jax.tree.unflatten(results, flat)

    return replay, shapes


def loop_steps(step, carry, row, size: int, n_steps):
    """Steps 0 .. n_steps - 1 of ``step(carry, row, i) -> (carry, next_row, out)`` in one
    while loop, the row each step reads carried from the step before (see `make_chunk`).
    Returns the last carry and every step's `out` stacked in buffers of `size` steps (a
    static length, so that one program serves any run-time `n_steps <= size`; the rest
    is zeros)."""
    step, shapes = traced_once(step, carry, row, jnp.int32(0))
    outs = jax.tree.map(lambda a: jnp.zeros((size, *a.shape), a.dtype), shapes[2])

    def body(state):
        i, carry, row, outs = state
        carry, row, out = step(carry, row, i)
        outs = jax.tree.map(lambda b, o: b.at[i].set(o), outs, out)
        return i + 1, carry, row, outs

    state = (jnp.int32(0), carry, row, outs)
    _, carry, _, outs = jax.lax.while_loop(lambda s: s[0] < n_steps, body, state)
    return carry, outs


def step_piece(inputs: StepInput, start: int, stop: int, size: int, spare: int):
    """Steps [start, stop) of the inputs (`step_inputs`, or time-major with a run axis after
    the step axis), padded to `size` steps, and the worker whose row each step reads next
    (`spare`, the spare row, after the last): the arguments of one chunk call."""
    n = stop - start

    def padded(x: np.ndarray) -> np.ndarray:
        out = np.zeros((size, *x.shape[1:]), x.dtype)
        out[:n] = x[start:stop]
        return out

    piece = StepInput(*(None if x is None else padded(x) for x in inputs))
    following = np.full((size, *inputs.worker.shape[1:]), spare, np.int32)
    following[: n - 1] = inputs.worker[start + 1 : stop]
    return piece, following


def step_inputs(plan) -> StepInput:
    """The step inputs of a whole plan (numpy; cut into pieces by the executors); `client`
    only for a population's plan."""
    return StepInput(
        commit=np.arange(len(plan), dtype=np.int32),
        worker=plan.worker,
        staleness=plan.staleness,
        first_step=plan.first_step,
        active=np.ones(len(plan), dtype=bool),
        round_end=plan.round_end,
        client=plan.client,
        pre_pull=plan.fill_pre,
        local_steps=plan.local_steps,
        buffer=plan.buffer,
        client_row=plan.client_row,
    )


def _select(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def select_server(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    """`_select` of a rule's server state, but for a `ClientServer`'s rows: its commit wrote
    a padding's row back unchanged (`rules.with_clients`), and a select would copy all N rows
    at every commit."""
    if isinstance(on_true, ClientServer):
        return ClientServer(_select(pred, on_true.rule, on_false.rule), on_true.clients)
    return _select(pred, on_true, on_false)
