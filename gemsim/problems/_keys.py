"""How every random stream of a problem is derived from the problem's seed.

Randomness used inside computations (initialisation, shuffling, dropout,
gradient noise) comes from ``jax.random.key(seed)`` folded with one tag per
purpose. Randomness used once on the host while building a problem (the
evaluation subset, synthetic data) comes from numpy generators seeded with
``SeedSequence(seed, spawn_key=(0x9E, tag))``: no compilation, and the
result does not depend on the accelerator. Streams are independent of each
other and reproducible; nothing uses a global generator.
"""

from __future__ import annotations

import functools
from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import jax

__all__ = ["KeyTag", "derive_key", "host_rng"]

_HOST_DOMAIN = 0x9E
"""First spawn-key entry of host generators, keeping them apart from the timing model's."""


class KeyTag(IntEnum):
    """The purposes a problem's seed is split into (the values are part of the format)."""

    INIT = 1
    """Initial parameters (``Problem.init_params``)."""
    STREAM = 2
    """Shuffling: then folded with the worker and the epoch."""
    DROPOUT = 3
    """Dropout keys: then folded with the worker and the step."""
    NOISE = 4
    """Quadratic gradient noise: then folded with the worker and the step."""
    EVAL = 5
    """Choice of the fixed training subset that ``evaluate`` measures (host)."""
    DATA = 6
    """Generated data sets (``Synthetic``, host)."""
    FED_SIZES = 7
    """``SyntheticFed``: each device's number of samples (host)."""
    FED_DATA = 8
    """``SyntheticFed``: the devices' models and samples (host)."""
    CENTRES = 9
    """The heterogeneous quadratic's per-worker optima (host), then folded with the worker."""
    WORKER_EVAL = 10
    """Choice of the fixed sample of each worker's shard that ``evaluate_workers`` measures
    (host)."""
    EVAL_OWNERS = 11
    """Choice of the data owners (a population's clients) that ``evaluate_workers`` measures
    when not all of them are (host)."""


@functools.lru_cache(maxsize=4096)
def derive_key(seed: int, tag: KeyTag) -> jax.Array:
    """Returns the typed key for one purpose of a seed (kept: a sweep builds a problem per run,
    and each key costs two dispatches of JAX operations; keys are immutable)."""
    import jax  # here: the host generators below, and the sizes of data sets, need no JAX

    return jax.random.fold_in(jax.random.key(seed), int(tag))


def host_rng(seed: int, tag: KeyTag, *more: int) -> np.random.Generator:
    """A numpy generator for one host-side purpose of a seed (`more`: further spawn-key entries,
    e.g. a worker, for a stream per worker that does not depend on how many there are)."""
    key = (_HOST_DOMAIN, int(tag), *(int(m) for m in more))
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))
