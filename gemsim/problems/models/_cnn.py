"""The GEM paper's MNIST convolutional network.

Convolutions are written as im2col + matmul and pooling as a reshape + max:
on a 2-core CPU this gives more samples/s than ``lax.conv_general_dilated`` +
``reduce_window`` for value_and_grad at b = 64, both plainly and under ``vmap``
over 8 workers (``benchmarks/conv.py``, which also holds the lax variant; its
figures in benchmarks/RESULTS.md). Both are exchangeable through :class:`ConvOps`.

Layout: images NHWC, kernels HWIO ``[5, 5, c_in, c_out]``; an im2col patch
lists its values kernel-row first, then kernel-column, then input channel, which
is exactly the row order of ``kernel.reshape(25 * c_in, c_out)``. The 320
features entering ``fc1`` are flattened in (row, column, channel) order, not
PyTorch's (channel, row, column): only relevant when porting weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from gemsim.types import PyTree

from ._layers import Layout, Model, dense, dense_layout, fan_in_uniform_init
from ._specs import CNN_CHANNELS, CNN_HIDDEN, CNN_KERNEL, Cnn

__all__ = [
    "IM2COL",
    "ConvOps",
    "cnn_apply",
    "cnn_init",
    "cnn_layout",
    "cnn_model",
    "conv_im2col",
    "max_pool_2x2",
]

KERNEL, CHANNELS, HIDDEN = CNN_KERNEL, CNN_CHANNELS, CNN_HIDDEN


class ConvOps(NamedTuple):
    """The two primitive operations the network's feature extractor needs."""

    conv: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
    """``conv(x [B,H,W,Ci], kernel [k,k,Ci,Co], bias [Co]) -> [B,H-k+1,W-k+1,Co]`` (valid)."""
    pool: Callable[[jax.Array], jax.Array]
    """``pool(x [B,H,W,C]) -> [B,H/2,W/2,C]``: 2x2 max-pooling, stride 2."""


def conv_im2col(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """Valid 2-D convolution (cross-correlation, stride 1) as patches @ kernel."""
    k_h, k_w, c_in, c_out = kernel.shape
    out_h, out_w = x.shape[1] - k_h + 1, x.shape[2] - k_w + 1
    patches = jnp.concatenate(
        [x[:, i : i + out_h, j : j + out_w, :] for i in range(k_h) for j in range(k_w)], axis=-1
    )
    return patches @ kernel.reshape(k_h * k_w * c_in, c_out) + bias.reshape(1, 1, 1, c_out)


def max_pool_2x2(x: jax.Array) -> jax.Array:
    """2x2 max-pooling with stride 2 as a reshape and a max (H and W even)."""
    b, h, w, c = x.shape
    return x.reshape(b, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


IM2COL = ConvOps(conv_im2col, max_pool_2x2)


def cnn_layout(n_classes: int = 10) -> Layout:
    """Shapes and fan-ins of the parameters (kernels HWIO)."""
    layout: Layout = {}
    for i, (c_in, c_out) in enumerate(zip(CHANNELS[:-1], CHANNELS[1:], strict=True)):
        fan_in = KERNEL * KERNEL * c_in
        layout[f"conv{i + 1}"] = {
            "w": ((KERNEL, KERNEL, c_in, c_out), fan_in),
            "b": ((c_out,), fan_in),
        }
    sizes = (*HIDDEN, n_classes)
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layout[f"fc{i + 1}"] = dense_layout(n_in, n_out)
    return layout


def cnn_init(key: jax.Array, n_classes: int = 10) -> PyTree:
    """Parameters with PyTorch's default initialisation (U(+-1/sqrt(fan_in)))."""
    return fan_in_uniform_init(key, cnn_layout(n_classes))


def channel_dropout(x: jax.Array, key: jax.Array, rate: float) -> jax.Array:
    """Zeroes whole channels of NHWC ``x`` with probability ``rate``, scales the rest.

    Like PyTorch's Dropout2d: one draw per (example, channel), survivors
    multiplied by 1 / (1 - rate) so the expectation is unchanged.
    """
    keep = jax.random.bernoulli(key, 1.0 - rate, (x.shape[0], 1, 1, x.shape[3]))
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def cnn_apply(
    params: PyTree,
    x: jax.Array,
    key: jax.Array | None,
    *,
    dropout: float = 0.5,
    ops: ConvOps = IM2COL,
) -> jax.Array:
    """Logits ``[B, classes]`` for images ``x [B, 28, 28]``.

    Args:
      params: from :func:`cnn_init`.
      x: normalised images.
      key: dropout key (training mode), or None for evaluation mode.
      dropout: channel dropout rate after the second convolution.
      ops: convolution and pooling implementation.
    """
    h = x[..., None]
    h = jax.nn.relu(ops.pool(ops.conv(h, params["conv1"]["w"], params["conv1"]["b"])))
    h = ops.conv(h, params["conv2"]["w"], params["conv2"]["b"])
    if key is not None and dropout > 0.0:
        h = channel_dropout(h, key, dropout)
    h = jax.nn.relu(ops.pool(h))
    h = h.reshape(h.shape[0], -1)
    h = jax.nn.relu(dense(params["fc1"], h))
    h = jax.nn.relu(dense(params["fc2"], h))
    return dense(params["fc3"], h)


def cnn_model(spec: Cnn, input_shape: tuple[int, ...], n_classes: int) -> Model:
    """The network as a :class:`Model`; needs 28x28 single-channel inputs."""
    if tuple(input_shape) != (28, 28):
        raise ValueError(
            f"model cnn needs 28x28 single-channel images (datasets mnist, mnist-5k); this data "
            f"set's inputs have shape {tuple(input_shape)}: use mlp or logistic for it"
        )
    init = lambda key: cnn_init(key, n_classes)
    apply = lambda params, x, key: cnn_apply(params, x, key, dropout=spec.dropout)
    return Model(init, apply)
