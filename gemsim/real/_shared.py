"""float32 arrays in shared memory: the rows workers read and the work they send back.

Parameters never travel through pipes: the server writes a worker's row in place and the
worker writes its work into its own outbox row; the pipes carry only small messages.
"""

from __future__ import annotations

import math
from multiprocessing import shared_memory

import numpy as np


class SharedArray:
    """A float32 array over a named shared-memory block."""

    def __init__(self, block: shared_memory.SharedMemory, shape: tuple[int, ...], owner: bool):
        self._block, self.shape, self._owner = block, shape, owner
        self.array = np.ndarray(shape, np.float32, buffer=block.buf)

    @property
    def name(self) -> str:
        return self._block.name

    @staticmethod
    def create(shape: tuple[int, ...]) -> SharedArray:
        size = max(1, math.prod(shape)) * 4
        return SharedArray(shared_memory.SharedMemory(create=True, size=size), shape, True)

    @staticmethod
    def attach(name: str, shape: tuple[int, ...]) -> SharedArray:
        return SharedArray(shared_memory.SharedMemory(name=name), shape, False)

    def close(self) -> None:
        """Release this process's mapping; the creator also removes the block."""
        del self.array  # the buffer must have no exported views before close()
        self._block.close()
        if self._owner:
            self._block.unlink()

    def __enter__(self) -> SharedArray:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
