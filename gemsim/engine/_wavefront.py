"""The wavefront executor. A commit's gradient depends only on an earlier PS
version, so every commit of a wave (see `ExecutionPlan.waves`) has its gradient work done at
once, vmapped across workers; the cheap commits are then applied in order in a `lax.scan`.

Waves are padded to power-of-two widths so that at most log2(n) + 1 programs are compiled.
A population's waves are waves of slots (a wave never holds one slot twice), each member's
gradient on its client's data (`_step.data_owner`).
This pays off where a vmapped gradient is much cheaper per sample than one at a time (an
accelerator); on a small CPU the sequential executor is faster (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._executor import Executor
from ._step import Carry, StepInput, commit_phase, data_owner, gradient_phase


def width_bucket(m: int) -> int:
    """The padded width of a wave of m commits: the next power of two."""
    return 1 << max(0, int(m - 1).bit_length())


class WavefrontExecutor(Executor):
    """Wavefront execution: vmapped gradient work, then in-order commits (final)."""

    def __init__(
        self,
        rule,
        problem,
        *,
        params,
        n_workers: int,
        chunk: int = 512,
        max_width: int | None = None,
    ):
        super().__init__(rule, problem, params=params, n_workers=n_workers, chunk=chunk)
        self.max_width = width_bucket(min(max_width or n_workers, n_workers))
        self._wave = jax.jit(self._wave_fn, donate_argnums=1)

    def compiled_programs(self) -> int:
        """How many wave programs have been compiled (one per padded width used)."""
        return self._wave._cache_size()

    def _wave_fn(self, problem, carry: Carry, inp: StepInput):
        rule, layout = self.rule, self.layout
        rows = carry.slots[jnp.where(inp.active, inp.worker, self.n_workers)]
        work = jax.vmap(
            lambda r, w, s, n: gradient_phase(rule, problem, layout.unravel(r), w, s, steps=n)
        )(rows, data_owner(inp), inp.first_step, inp.local_steps)

        def body(c, member):
            i, one = member
            member = jax.tree.map(lambda a: a[i], work)
            return commit_phase(rule, layout, c, one, member, padded=True)

        return jax.lax.scan(body, carry, (jnp.arange(inp.worker.shape[0]), inp))

    def _run_segment(self, problem, carry, inputs, start, stop, plan, recorder):
        for a, b in plan.waves(start, stop, self.max_width):
            width = width_bucket(b - a)
            wave = jax.tree.map(lambda x, a=a, b=b, w=width: _padded(x[a:b], w), inputs)
            carry, out = self._wave(problem, carry, wave)
            recorder.add(out, count=b - a)
        return carry


def _padded(column: np.ndarray, width: int) -> np.ndarray:
    """Pad a wave's column to the bucket width; padding rows have active = False (zeros)."""
    pad = width - column.shape[0]
    return np.concatenate([column, np.zeros(pad, column.dtype)]) if pad else column
