"""Which executor `executor: auto` picks, from measurements recorded in benchmarks/RESULTS.md.

CPU (2 cores, the paper's CNN, b = 64): the sequential executor beats the wavefront one at
every n measured (a vmapped gradient costs more per sample than one at a time there), so
`auto` is sequential on a CPU. On an accelerator the vmapped wave is the point of the wavefront
executor (docs/design.md §5); it is chosen there from n >= 2 on.
"""

from __future__ import annotations

from enum import StrEnum

import jax

from ._sequential import SequentialExecutor
from ._wavefront import WavefrontExecutor


class ExecutorKind(StrEnum):
    AUTO = "auto"
    SEQUENTIAL = "sequential"
    WAVEFRONT = "wavefront"


def resolve_executor(kind: ExecutorKind, n_workers: int, platform: str | None = None):
    """The executor class for `kind`; AUTO decides by the default device's platform and n."""
    if kind is ExecutorKind.SEQUENTIAL:
        return SequentialExecutor
    if kind is ExecutorKind.WAVEFRONT:
        return WavefrontExecutor
    platform = platform or jax.default_backend()
    if platform == "cpu" or n_workers < 2:
        return SequentialExecutor
    return WavefrontExecutor
