"""The CIFAR-style residual network of :class:`~gemsim.problems.Resnet`, without batch
normalisation (Fixup initialisation instead; the spec's docstring says why).

Layout: images NHWC (a ``[B, H, W]`` input gets one channel), kernels HWIO; convolutions are
im2col + matmul (see ``conv_same``). A block is
``relu(scale * conv2(relu(conv1(h + b0) + b1) + b2) + b3 + shortcut(h))``; the shortcut
subsamples by the block's stride and pads the new channels with zeros (option A of the
paper), so it has no parameters.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from gemsim.types import PyTree

from ._layers import Model
from ._resnet_layout import KERNEL, block_strides, resnet_layout
from ._specs import Resnet

__all__ = ["resnet_model"]

_DIMS = ("NHWC", "HWIO", "NHWC")


def conv_same(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """A "SAME" convolution of NHWC ``x`` with an HWIO ``kernel``, as im2col + matmul.

    Equal to ``lax.conv_general_dilated(..., "SAME")`` (same padding, same window order),
    but a matrix product: XLA's CPU backend runs ``lax.conv`` many times slower inside a
    ``lax.scan`` body, where the engine runs every gradient, than at top level
    (benchmarks/RESULTS.md).
    """
    k_h, k_w, c_in, c_out = kernel.shape
    (lo_h, hi_h), (lo_w, hi_w) = lax.padtype_to_pads(
        x.shape[1:3], (k_h, k_w), (stride, stride), "SAME"
    )
    padded = jnp.pad(x, ((0, 0), (lo_h, hi_h), (lo_w, hi_w), (0, 0)))
    out_h, out_w = -(-x.shape[1] // stride), -(-x.shape[2] // stride)
    span_h, span_w = stride * (out_h - 1) + 1, stride * (out_w - 1) + 1
    patches = jnp.concatenate(
        [
            padded[:, i : i + span_h : stride, j : j + span_w : stride, :]
            for i in range(k_h)
            for j in range(k_w)
        ],
        axis=-1,
    )
    return patches @ kernel.reshape(k_h * k_w * c_in, c_out)


def conv_lax(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """The same convolution by ``lax.conv_general_dilated`` (the reference in the tests)."""
    return lax.conv_general_dilated(x, kernel, (stride, stride), "SAME", dimension_numbers=_DIMS)


_conv = conv_same


def _he_bound(shape: tuple[int, ...]) -> float:
    """U(-a, a) with a = sqrt(6 / fan_in) has He's variance 2 / fan_in."""
    fan_in = math.prod(shape[:-1])
    return math.sqrt(6.0 / fan_in)


def _bounds(spec: Resnet, layout) -> dict[str, dict[str, float]]:
    """Each tensor's uniform bound: He for the stem, He * L^-1/2 for a block's first
    convolution, 0 for its second, the biases and the head (Fixup); scales start at one."""
    n_blocks = 3 * spec.blocks_per_stage
    bounds = {"stem": {"w": _he_bound(layout["stem"]["w"]), "b": 0.0}}
    for name, shapes in layout.items():
        if name in ("stem", "head"):
            continue
        bounds[name] = {
            "w1": _he_bound(shapes["w1"]) / math.sqrt(n_blocks),
            "w2": 0.0,
            "bias": 0.0,
            "scale": 0.0,
        }
    bounds["head"] = {"w": 0.0, "b": 0.0}
    return bounds


def _init(key: jax.Array, spec: Resnet, layout) -> PyTree:
    # One uniform draw cut into tensors (as fan_in_uniform_init): fewer kernels to compile.
    bounds = _bounds(spec, layout)
    total = sum(math.prod(s) for layer in layout.values() for s in layer.values())
    unit = jax.random.uniform(key, (total,), jnp.float32, -1.0, 1.0)
    params: dict[str, dict[str, jax.Array]] = {}
    offset = 0
    for layer, shapes in layout.items():
        params[layer] = {}
        for name, shape in shapes.items():
            size = math.prod(shape)
            value = unit[offset : offset + size].reshape(shape) * bounds[layer][name]
            if name == "scale":
                value = jnp.ones(shape, jnp.float32)
            params[layer][name] = value
            offset += size
    return params


def _shortcut(h: jax.Array, stride: int, c_out: int) -> jax.Array:
    if stride > 1:
        h = h[:, ::stride, ::stride, :]
    extra = c_out - h.shape[-1]
    return jnp.pad(h, ((0, 0), (0, 0), (0, 0), (0, extra))) if extra else h


def _block(p: dict[str, jax.Array], h: jax.Array, stride: int) -> jax.Array:
    b = p["bias"]
    out = jax.nn.relu(_conv(h + b[0], p["w1"], stride) + b[1])
    out = _conv(out + b[2], p["w2"], 1) * p["scale"][0] + b[3]
    return jax.nn.relu(out + _shortcut(h, stride, p["w2"].shape[-1]))


def resnet_apply(params: PyTree, x: jax.Array, strides: dict[str, int]) -> jax.Array:
    """Logits ``[B, classes]`` of images ``x`` ``[B, H, W, C]`` (or ``[B, H, W]``)."""
    h = x[..., None] if x.ndim == 3 else x
    h = jax.nn.relu(_conv(h, params["stem"]["w"], 1) + params["stem"]["b"][None, None, None, :])
    for name, stride in strides.items():
        h = _block(params[name], h, stride)
    pooled = jnp.mean(h, axis=(1, 2))
    return pooled @ params["head"]["w"] + params["head"]["b"][None, :]


def resnet_model(spec: Resnet, input_shape: tuple[int, ...], n_classes: int) -> Model:
    """The network for images of ``input_shape`` (``(H, W)`` or ``(H, W, C)``)."""
    if len(input_shape) not in (2, 3) or min(input_shape[:2]) < KERNEL:
        raise ValueError(
            f"model resnet needs images [H, W] or [H, W, C] of at least {KERNEL}x{KERNEL} "
            f"pixels; this data set's inputs have shape {tuple(input_shape)}"
        )
    channels = input_shape[2] if len(input_shape) == 3 else 1
    layout = resnet_layout(spec, channels, n_classes)
    strides = block_strides(spec)

    def apply(params: PyTree, x: jax.Array, key: jax.Array | None) -> jax.Array:
        del key  # no stochastic layers
        return resnet_apply(params, x, strides)

    return Model(lambda key: _init(key, spec, layout), apply)
