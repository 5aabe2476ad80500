"""The mini-batch value that ``Problem.batch`` returns and ``Problem.loss`` consumes."""

from __future__ import annotations

from typing import NamedTuple

import jax

__all__ = ["Batch"]


class Batch(NamedTuple):
    """One worker's mini-batch for one step.

    Classifiers: ``x`` float32 ``[b, *input_shape]``, ``y`` int32 ``[b]``.
    Quadratic: ``x`` is the gradient-noise vector z (float32 ``[dim]``) and
    ``y`` is empty (int32 ``[0]``).
    ``key`` is the typed PRNG key of this (seed, worker, step) for training-mode
    randomness (dropout): pass it as ``loss(params, batch, batch.key)``.
    """

    x: jax.Array
    y: jax.Array
    key: jax.Array
