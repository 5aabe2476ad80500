"""The compiled functions a real run executes: the engine's own two phases, nothing else.

A worker runs `gradient_phase` on the row the parameter server wrote for it and sends the
result back as one flat float32 vector; the server applies it with `commit_phase`. Both are
the engine's own (`gemsim.engine`), so a real run and the replay of its trace compute every
commit with the same code and differ only where XLA fuses differently.

A population's run (`population`: the rows are slots serving clients) reads each task's
batches from its client (the data owner given to `gradient`) and commits with a client in the
`StepInput`, so that the committed row gets a fresh rule state, as the engine's population
steps do (`engine.commit_math`).

A run whose server sends a committing worker the version before its commit
(`pull_before_apply`, `server.pull: before_apply`) commits with `StepInput.pre_pull` set, so
that the committed row is the one the engine's pre fill writes (`engine.ExecutionPlan.fill_pre`).

Workers with local steps of their own (`windows`, one per worker) run the engine's loop of a
run-time length, as the engine does for a trace with a `local_steps` column; so do the tasks of
FedCompass's scheduler (`buffered`), each of the steps the server gives it, and its commits
say where the server put each (`StepInput.buffer`, `round_end` at a group's close).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from gemsim.engine import (
    Carry,
    RowLayout,
    StepInput,
    commit_phase,
    gradient_phase,
    initial_slots,
)
from gemsim.rules import ClientServer, pull_state


@dataclass(frozen=True)
class Compiled:
    """One rule on one problem: the row layout, the worker's and the server's functions."""

    rule: Any
    problem: Any
    n_workers: int
    population: bool
    pull_before_apply: bool
    layout: RowLayout
    work_size: int
    _unravel_work: Any
    _gradient: Any
    _commit: Any
    _pull: Any
    _row_of: Any  # a client's row out of the rows (`commit` keeps it for a non-finite one)
    _put_row: Any
    # each data owner's local steps (a worker's, or a population's client's); None: the rule's
    windows: tuple[int, ...] | np.ndarray | None = None
    # FedCompass's scheduler: each task's steps are the server's, each commit names its buffer
    buffered: bool = False

    def window_of(self, owner: int) -> int:
        """Mini-batches a commit of data owner ``owner`` holds."""
        return self.rule.window if self.windows is None else int(self.windows[owner])

    @staticmethod
    def of(
        rule,
        problem,
        n_workers: int,
        *,
        population: bool = False,
        pull_before_apply: bool = False,
        windows: tuple[int, ...] | np.ndarray | None = None,
        buffered: bool = False,
    ) -> Compiled:
        params = problem.init_params
        layout = RowLayout.for_rule(rule, params, n_workers)
        row = jnp.zeros((layout.row_size,), jnp.float32)
        zero = jnp.zeros((), jnp.int32)
        pulled = layout.unravel(row)
        one = None if windows is None and not buffered else jnp.ones((), jnp.int32)
        work = jax.eval_shape(lambda: gradient_phase(rule, problem, pulled, zero, zero, steps=one))
        flat, unravel = ravel_pytree(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), work))

        def gradient(problem, row, worker, first_step, steps):
            pulled = layout.unravel(row)
            work = gradient_phase(rule, problem, pulled, worker, first_step, steps=steps)
            return ravel_pytree(work)[0]

        def commit(carry, inp, flat_work):
            new, out = commit_phase(rule, layout, carry, inp, unravel(flat_work))
            return kept_if_finite(out.finite, new, carry), out, new.slots[0]

        def pull(theta, server, row, fresh):
            _, ws = layout.unravel(row)
            return layout.ravel(theta, pull_state(rule, ws, theta, server, fresh))

        return Compiled(
            rule=rule,
            problem=problem,
            n_workers=n_workers,
            population=population,
            pull_before_apply=pull_before_apply,
            layout=layout,
            work_size=int(flat.size),
            _unravel_work=unravel,
            _gradient=jax.jit(gradient),
            # The carry is donated: the server state, N client rows included, is updated in
            # place instead of copied at every commit (O(N params) with per-client state).
            _commit=jax.jit(commit, donate_argnums=0),
            _pull=jax.jit(pull),
            _row_of=jax.jit(lambda rows, owner: jax.tree.map(lambda r: r[owner], rows)),
            _put_row=jax.jit(_put_row, donate_argnums=0),
            windows=windows,
            buffered=buffered,
        )

    # --- worker side -------------------------------------------------------------------

    def gradient(
        self, row: np.ndarray, owner: int, first_step: int, steps: int | None = None
    ) -> np.ndarray:
        """The work from a row on the batches of data owner `owner` (the worker, or a
        population's client) from its mini-batch `first_step`, flat (blocks until computed);
        `steps`: the task's local steps where the server gives them (`buffered`), else the
        owner's window."""
        if self.buffered:
            steps = np.int32(steps)
        elif self.windows is not None:
            steps = np.int32(self.windows[owner])
        flat = self._gradient(self.problem, row, np.int32(owner), np.int32(first_step), steps)
        return np.asarray(flat)

    # --- server side -------------------------------------------------------------------

    def initial_rows(self) -> np.ndarray:
        """float32[n, K]: every worker's row at the start (as the engine's slots)."""
        state = self.rule.init(self.problem.init_params, self.n_workers)
        slots = initial_slots(self.layout, self.problem.init_params, state.workers, self.n_workers)
        return np.array(slots[: self.n_workers])  # writable: the server updates it

    def initial_carry(self) -> Carry:
        """The server's state. Its slot buffer has one row: the committer's new row is
        written there and copied out to the worker; the server keeps no per-worker rows."""
        params = self.problem.init_params
        state = self.rule.init(params, self.n_workers)
        return Carry(
            theta=jax.tree.map(jnp.copy, params),
            # Copies: a rule's initial state may hold one array in several leaves, and a
            # donated carry must not give the commit the same buffer twice.
            server=jax.tree.map(jnp.copy, state.server),
            slots=jnp.zeros((1, self.layout.row_size), jnp.float32),
            diverged=jnp.zeros((), bool),
            diverged_at=jnp.full((), -1, jnp.int32),
        )

    def commit(
        self,
        carry: Carry,
        commit: int,
        staleness: int,
        flat_work: np.ndarray,
        owner: int = 0,
        *,
        buffer: int = 0,
        round_end: bool = True,
    ):
        """Apply one commit of data owner `owner` (the worker, or a population's client: whose
        per-client state a rule reads): `(carry, StepOutput on the host, the committer's new
        row)`. FedCompass's server (`buffered`) says where it put the commit (`buffer`) and
        whether it closes a group (`round_end`); every other commit closes its round."""
        inp = StepInput(
            commit=np.int32(commit),
            worker=np.int32(0),  # the row index in the one-row buffer
            staleness=np.int32(staleness),
            first_step=np.int32(0),  # unused by the commit
            active=np.bool_(True),
            round_end=np.bool_(round_end),
            # Its value is not read by the commit, only whether there is one (static).
            client=np.int32(0) if self.population else None,
            pre_pull=np.bool_(True) if self.pull_before_apply else None,
            owner=np.int32(owner),
            buffer=np.int32(buffer) if self.buffered else None,
        )
        rows = carry.server.clients if isinstance(carry.server, ClientServer) else None
        before = None if rows is None else self._row_of(rows, np.int32(owner))
        carry, out, row = self._commit(carry, inp, flat_work)
        out = jax.device_get(out)
        if before is not None and not bool(out.finite):  # its row as it was before it
            rows = self._put_row(carry.server.clients, np.int32(owner), before)
            carry = carry._replace(server=ClientServer(carry.server.rule, rows))
        return carry, out, np.asarray(row)

    def warm_up(self) -> None:
        """Compile the server's functions now, so the first commit's service time is not
        a compilation (the result is discarded)."""
        carry, _, _ = self.commit(self.initial_carry(), 0, 0, np.zeros(self.work_size, np.float32))
        self.pulled_row(carry, np.zeros(self.layout.row_size, np.float32), True)

    def pulled_row(self, carry: Carry, row: np.ndarray, fresh: bool) -> np.ndarray:
        """A worker's row after it pulls the current version other than at its own commit: the
        snapshot is theta and the rule's pull hook updates its state (`fresh`: a new process,
        i.e. a join or a restart). The engine's host fills apply the same hook."""
        return np.asarray(self._pull(carry.theta, carry.server, row, np.bool_(fresh)))


def kept_if_finite(finite: jax.Array, new: Carry, old: Carry) -> Carry:
    """The carry after a commit, or the one before it where the commit was non-finite (the
    server then stops with its last finite state, as the engine's re-run recovers it). A
    rule's per-client rows (`rules.ClientServer`) are the commit's own: choosing among them
    in the program copied all N rows at every commit, so `Compiled.commit` puts the
    committer's row back itself after a non-finite one (O(row))."""
    pick = partial(jax.tree.map, lambda a, b: jnp.where(finite, a, b))
    if isinstance(new.server, ClientServer):
        server = ClientServer(pick(new.server.rule, old.server.rule), new.server.clients)
    else:
        server = pick(new.server, old.server)
    return Carry(
        theta=pick(new.theta, old.theta),
        server=server,
        slots=new.slots,
        diverged=jnp.zeros((), bool),
        diverged_at=jnp.full((), -1, jnp.int32),
    )


def _put_row(rows, owner, row):
    return jax.tree.map(lambda r, x: r.at[owner].set(x), rows, row)
