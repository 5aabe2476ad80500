"""Local steps by speed: DyLU (Liu, Douillard et al. 2024, "Asynchronous Local-SGD Training
for Language Modeling", arXiv 2401.09135, eq. 6) gives a worker ``floor(v / max v * H)``
local steps, ``v`` its speed in steps per second, so that every commit takes about as long as
the fastest one's H steps; at least one step.

Persistent workers get their counts when the scenario is read (`gemsim.config`, from each
worker's compute law and speed factor). A population's clients get theirs from their speed
factors (`client_speeds`), which the timing model draws from the seed: the slots' compute
law is the cluster's, shared by every client, so a client's step rate is its speed factor
over one common mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ._calendar import client_speeds
from ._cluster import ClusterSpec
from ._population import Population


def dylu_windows(rates: Sequence[float], h: int) -> tuple[int, ...]:
    """``max(1, floor(v_w / max v * H))`` for each step rate ``v_w``."""
    top = max(rates)
    return tuple(max(1, math.floor(v / top * h)) for v in rates)


def client_windows(population: Population, seed: int, h: int) -> np.ndarray:
    """int64[N]: each client's DyLU local steps from its speed factor, H for the fastest."""
    return speed_windows(client_speeds(population, seed), h)


def speed_windows(speeds: np.ndarray, h: int) -> np.ndarray:
    """int64: `dylu_windows` of float64 speeds (the same divisions and products)."""
    return np.maximum(1, np.floor(speeds / speeds.max() * h)).astype(np.int64)


def owner_windows(spec: ClusterSpec, seed: int) -> tuple[int, ...] | np.ndarray | None:
    """Each data owner's local steps where they differ (a worker's, or a population's
    client's under `ClusterSpec.dynamic_window`), else None: every commit holds the window."""
    if spec.dynamic_window is not None and spec.population is not None:
        return client_windows(spec.population, seed, spec.dynamic_window)
    return spec.windows
