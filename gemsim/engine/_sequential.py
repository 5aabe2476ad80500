"""The sequential executor: the reference. Commits run in trace order inside `lax.scan`
chunks, one gradient per commit; the host steps in only between segments."""

from __future__ import annotations

import jax

from ._executor import Executor, chunk_sizes
from ._step import make_chunk


class SequentialExecutor(Executor):
    """Every commit's gradient then its commit, in order, inside a scan (final)."""

    def __init__(self, rule, problem, *, params, n_workers: int, chunk: int = 512):
        super().__init__(rule, problem, params=params, n_workers=n_workers, chunk=chunk)
        self._scan = jax.jit(make_chunk(rule, self.layout), donate_argnums=1)

    def _run_segment(self, problem, carry, inputs, start, stop, plan, recorder):
        a = start
        for size in chunk_sizes(stop - start, self.chunk):
            chunk = jax.tree.map(lambda x, a=a, size=size: x[a : a + size], inputs)
            carry, out = self._scan(problem, carry, chunk)
            recorder.add(out)
            a += size
        return carry
