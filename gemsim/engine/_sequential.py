"""The sequential executor: the reference. Commits run in trace order inside compiled loops of
up to `chunk` commits, one gradient per commit; the host steps in only between segments."""

from __future__ import annotations

import jax
import numpy as np

from ._executor import Executor
from ._step import make_chunk, step_piece


class SequentialExecutor(Executor):
    """Every commit's gradient then its commit, in order, inside a loop (final)."""

    def __init__(self, rule, problem, *, params, n_workers: int, chunk: int = 512):
        super().__init__(rule, problem, params=params, n_workers=n_workers, chunk=chunk)
        self._loop = jax.jit(make_chunk(rule, self.layout), donate_argnums=1)

    def compiled_programs(self) -> int:
        """How many commit loops have been compiled: one, whatever the segments' lengths."""
        return self._loop._cache_size()

    def _run_segment(self, problem, carry, inputs, start, stop, plan, recorder):
        piece = step_piece(inputs, start, stop, self.chunk, self.n_workers)
        carry, out = self._loop(problem, carry, piece, np.int32(stop - start))
        recorder.add(out, count=stop - start)
        return carry
