"""Models written with Flax (NNX or Linen) or Equinox, as gemsim models (:class:`UserModel`).

Each adapter keeps the parameters as a pytree of float32 arrays and rebuilds the library's
model from them inside ``loss`` and ``predict``, so that the engine sees pure functions:
``loss`` runs the model in training mode with the batch's key for dropout, ``predict`` in
evaluation mode. The libraries are optional (``pip install gemsim[flax]`` or
``gemsim[equinox]``); each is imported only when its adapter is called.

Batch normalisation is refused: its running statistics are state outside the parameters,
which each asynchronous worker would update on its own and the parameter server would never
see. Use a normalisation without batch statistics (LayerNorm, GroupNorm) instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ._layers import cross_entropy
from ._model_imports import ModelError
from ._user import UserModel

__all__ = ["from_equinox", "from_flax_linen", "from_flax_nnx"]

Loss = Callable[[jax.Array, jax.Array], jax.Array]
"""``loss(outputs, y) -> scalar``: the batch mean (default: softmax cross-entropy on
integer labels)."""


def _require(module: str, extra: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise ModelError(
            f"{module} adapter", f"{module} is not installed: pip install 'gemsim[{extra}]'"
        ) from exc


def _model(forward: Callable, loss: Loss, init: Callable, name: str) -> UserModel:
    return UserModel(
        init=init,
        loss=lambda params, x, y, key: loss(forward(params, x, key), y),
        predict=lambda params, x: forward(params, x, None),
        eval_loss=lambda params, x, y: loss(forward(params, x, None), y),
        name=name,
    )


def from_flax_nnx(
    make: Callable[[Any], Any], *, loss: Loss = cross_entropy, name: str = "flax nnx model"
) -> UserModel:
    """A Flax NNX module as a gemsim model.

    Args:
      make: builds the module from an ``nnx.Rngs`` (e.g. ``lambda rngs: Net(rngs=rngs)``);
        its ``__call__(x)`` maps a batch to outputs, and ``train()`` / ``eval()`` switch
        its dropout on and off.
      loss: ``loss(outputs, y)`` (default: cross-entropy on integer labels).
      name: for messages.

    The parameters are the module's ``nnx.Param`` variables as a nested dict. In ``loss``
    the module is built again with ``nnx.Rngs(key)`` (XLA drops the unused initialisers)
    and given the parameters, so dropout draws from the batch's key.
    """
    nnx = _require("flax.nnx", "flax")
    abstract = nnx.eval_shape(lambda: make(nnx.Rngs(0)))
    if jax.tree.leaves(nnx.state(abstract, nnx.BatchStat)):
        raise ModelError(name, "holds BatchNorm statistics (nnx.BatchStat); " + _NO_BATCH_STATS)

    def init(key):
        return nnx.to_pure_dict(nnx.state(make(nnx.Rngs(key)), nnx.Param))

    def forward(params, x, key):
        module = make(nnx.Rngs(jax.random.key(0) if key is None else key))
        state = nnx.state(module, nnx.Param)
        nnx.replace_by_pure_dict(state, params)
        nnx.update(module, state)
        if key is None:
            module.eval()
        else:
            module.train()
        return module(x)

    return _model(forward, loss, init, name)


_NO_BATCH_STATS = (
    "running statistics live outside the parameters and would not be shared through the "
    "parameter server; use LayerNorm or GroupNorm"
)


def from_flax_linen(
    module: Any,
    input_shape: tuple[int, ...],
    *,
    loss: Loss = cross_entropy,
    train_kwarg: str | None = "train",
    name: str = "flax linen model",
) -> UserModel:
    """A Flax Linen module as a gemsim model.

    Args:
      module: the ``nn.Module``; ``module.apply(variables, x, train=...)`` maps a batch to
        outputs, with dropout drawn from the ``"dropout"`` rng stream.
      input_shape: one example's shape (``init`` traces the module on a batch of one).
      loss: ``loss(outputs, y)`` (default: cross-entropy on integer labels).
      train_kwarg: the keyword that switches training mode (True in ``loss``, False in
        ``predict``), or None when the module takes none.
      name: for messages.

    The parameters are the ``"params"`` collection; a module with other collections
    (``batch_stats``) is refused.
    """
    _require("flax.linen", "flax")
    mode = (lambda train: {train_kwarg: train}) if train_kwarg else (lambda train: {})
    example = jnp.zeros((1, *input_shape), jnp.float32)
    shapes = jax.eval_shape(
        lambda k: module.init({"params": k}, example, **mode(False)), jax.random.key(0)
    )
    others = sorted(set(shapes) - {"params"})
    if others:
        raise ModelError(
            name, f"has variable collections {others} besides params; " + _NO_BATCH_STATS
        )

    def init(key):
        return module.init({"params": key}, example, **mode(False))["params"]

    def forward(params, x, key):
        rngs = {} if key is None else {"dropout": key}
        return module.apply({"params": params}, x, rngs=rngs, **mode(key is not None))

    return _model(forward, loss, init, name)


def from_equinox(
    make: Callable[[jax.Array], Any],
    *,
    loss: Loss = cross_entropy,
    name: str = "equinox model",
) -> UserModel:
    """An Equinox module as a gemsim model.

    Args:
      make: builds the module from a key (e.g. ``lambda key: eqx.nn.MLP(..., key=key)``);
        as is Equinox's custom, its ``__call__(x, *, key=None)`` maps *one* example to its
        output (``key`` for dropout; modules without a ``key`` argument are called without).
        Batches are mapped with ``jax.vmap``, one key per example; evaluation runs
        ``eqx.nn.inference_mode`` of the module.
      loss: ``loss(outputs, y)`` on the batch (default: cross-entropy on integer labels).
      name: for messages.

    The parameters are the module's float arrays (``eqx.filter(module, eqx.is_inexact_array)``:
    the module itself, its other leaves None).
    """
    eqx = _require("equinox", "equinox")
    abstract = eqx.filter_eval_shape(make, jax.random.key(0))
    if any(
        isinstance(m, eqx.nn.BatchNorm)
        for m in jax.tree.leaves(abstract, is_leaf=lambda m: isinstance(m, eqx.nn.BatchNorm))
    ):
        raise ModelError(name, "holds eqx.nn.BatchNorm; " + _NO_BATCH_STATS)
    static = eqx.partition(abstract, eqx.is_inexact_array)[1]
    takes_key = "key" in inspect.signature(type(abstract).__call__).parameters

    def init(key):
        return eqx.filter(make(key), eqx.is_inexact_array)

    def forward(params, x, key):
        model = eqx.combine(params, static)
        if not takes_key:
            return jax.vmap(model)(x)
        if key is None:
            model = eqx.nn.inference_mode(model)
            return jax.vmap(lambda xi: model(xi, key=None))(x)
        keys = jax.random.split(key, x.shape[0])
        return jax.vmap(lambda xi, ki: model(xi, key=ki))(x, keys)

    return _model(forward, loss, init, name)
