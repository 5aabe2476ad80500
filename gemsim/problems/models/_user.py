"""Models brought by the user: the contract, its checks, and loading one by import path.

A model is any object with ``init(key) -> params`` and ``loss(params, x, y, key) -> scalar``
(the batch mean in training mode; ``key`` drives dropout), and optionally
``predict(params, x) -> outputs`` (integer labels: logits ``[B, classes]``, which enables
accuracy) and ``eval_loss(params, x, y) -> scalar`` (evaluation mode; defaults to ``loss``
with a fixed key). docs/problems.md is the full contract.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gemsim.types import PyTree

from ._model_imports import ModelError, call_factory, import_factory
from ._specs import Imported

__all__ = ["UserModel", "as_user_model", "check_user_model", "load_model"]

CONTRACT = (
    "a model needs init(key) -> params and loss(params, x, y, key) -> scalar, and may have "
    "predict(params, x) and eval_loss(params, x, y) (docs/problems.md)"
)


@dataclass(frozen=True, eq=False)
class UserModel:
    """A model as plain functions (the public problem contract).

    Compared and hashed by identity: a :class:`~gemsim.problems.Problem` holds it as static
    metadata, so problems built from the same ``UserModel`` share compiled code.
    """

    init: Callable[[jax.Array], PyTree]
    loss: Callable[[PyTree, jax.Array, jax.Array, jax.Array], jax.Array]
    predict: Callable[[PyTree, jax.Array], jax.Array] | None = None
    eval_loss: Callable[[PyTree, jax.Array, jax.Array], jax.Array] | None = None
    name: str = "user model"


def as_user_model(obj: Any, name: str = "user model") -> UserModel:
    """``obj`` as a :class:`UserModel` (its ``init``, ``loss`` and optional ``predict`` and
    ``eval_loss`` attributes), or a :class:`ModelError` saying what is missing."""
    if isinstance(obj, UserModel):
        return obj
    fns = {key: getattr(obj, key, None) for key in ("init", "loss", "predict", "eval_loss")}
    missing = [key for key in ("init", "loss") if not callable(fns[key])]
    wrong = [
        key for key in ("predict", "eval_loss") if fns[key] is not None and not callable(fns[key])
    ]
    if missing or wrong:
        what = ", ".join(
            [f"no callable {k}" for k in missing] + [f"{k} not callable" for k in wrong]
        )
        raise ModelError(name, f"got {type(obj).__name__} with {what}: {CONTRACT}")
    return UserModel(**fns, name=name)


def load_model(spec: Imported) -> tuple[UserModel, Any]:
    """Imports the factory ``spec`` names and calls it: ``(model, data)``, where ``data`` is
    None unless the factory returned a ``(model, data)`` pair."""
    result = call_factory(import_factory(spec), spec)
    data = None
    if isinstance(result, tuple) and len(result) == 2 and getattr(result, "init", None) is None:
        result, data = result
        if data is None:
            raise ModelError(
                f"model import {spec.target!r}",
                "returned (model, None): return the model alone when it brings no data",
            )
    return as_user_model(result, name=spec.describe()), data


def _abstract_params(model: UserModel) -> PyTree:
    try:
        params = jax.eval_shape(model.init, jax.random.key(0))
    except Exception as exc:  # the user's init failed
        raise ModelError(model.name, f"init(key) raised {type(exc).__name__}: {exc}") from exc
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    if not leaves:
        raise ModelError(model.name, "init(key) returned no arrays: the model has no parameters")
    for path, leaf in leaves:
        if getattr(leaf, "dtype", None) != jnp.float32:
            raise ModelError(
                model.name,
                f"init(key) must return float32 arrays; parameter {jax.tree_util.keystr(path)} "
                f"is {getattr(leaf, 'dtype', type(leaf).__name__)} (cast it with .astype("
                "jnp.float32))",
            )
    return params


def _scalar(model: UserModel, what: str, fn: Callable, *args) -> None:
    try:
        out = jax.eval_shape(fn, *args)
    except Exception as exc:  # the user's function failed on a batch of the data's shape
        raise ModelError(model.name, f"{what} raised {type(exc).__name__}: {exc}") from exc
    if getattr(out, "shape", None) != () or not jnp.issubdtype(out.dtype, jnp.floating):
        raise ModelError(
            model.name,
            f"{what} must return a float scalar (the batch mean), got "
            f"{getattr(out, 'dtype', '')}{list(getattr(out, 'shape', ()))}",
        )


def check_user_model(
    model: UserModel,
    x_example: tuple[int, ...],
    y_example: tuple[tuple[int, ...], Any],
    batch_size: int,
    n_classes: int,
) -> int:
    """Traces the model's functions on abstract batches of the data's shapes (nothing is
    computed) and returns its number of parameters.

    Raises:
      ModelError: a function fails or returns the wrong kind of value; the message names it.
    """
    params = _abstract_params(model)
    b = batch_size
    x = jax.ShapeDtypeStruct((b, *x_example), jnp.float32)
    y = jax.ShapeDtypeStruct((b, *y_example[0]), y_example[1])
    key = jax.random.key(0)
    shapes = f"x float32{[b, *x_example]}, y {np.dtype(y_example[1])}{[b, *y_example[0]]}"
    _scalar(model, f"loss(params, x, y, key) with {shapes}", model.loss, params, x, y, key)
    try:
        jax.eval_shape(jax.grad(model.loss), params, x, y, key)
    except Exception as exc:  # not differentiable in the parameters
        raise ModelError(
            model.name, f"the gradient of loss in params raised {type(exc).__name__}: {exc}"
        ) from exc
    if model.eval_loss is not None:
        _scalar(model, f"eval_loss(params, x, y) with {shapes}", model.eval_loss, params, x, y)
    if model.predict is not None and n_classes > 0:
        _check_predict(model, params, x, b, n_classes)
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))


def _check_predict(model: UserModel, params: PyTree, x, b: int, n_classes: int) -> None:
    try:
        out = jax.eval_shape(model.predict, params, x)
    except Exception as exc:  # the user's predict failed
        raise ModelError(
            model.name, f"predict(params, x) raised {type(exc).__name__}: {exc}"
        ) from exc
    shape = getattr(out, "shape", ())
    if len(shape) != 2 or shape[0] != b or shape[1] < n_classes:
        raise ModelError(
            model.name,
            f"predict(params, x) must return logits [batch, classes] = [{b}, >= {n_classes}] "
            f"for integer labels, got {list(shape)}",
        )
