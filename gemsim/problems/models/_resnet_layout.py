"""The shapes of a :class:`Resnet`'s parameters (no JAX): the model initialises from them and
`gemsim trace` counts them without building the model."""

from __future__ import annotations

import math

from ._specs import Resnet

__all__ = ["ResnetLayout", "resnet_layout"]

ResnetLayout = dict[str, dict[str, tuple[int, ...]]]
"""Layer name -> parameter name -> shape, in initialisation order."""

KERNEL = 3


def _stages(spec: Resnet) -> list[tuple[str, int, int, int]]:
    """(block name, input channels, output channels, stride) of every residual block."""
    blocks, c_in = [], spec.width
    for stage in range(3):
        c_out = spec.width * 2**stage
        for b in range(spec.blocks_per_stage):
            stride = 2 if stage > 0 and b == 0 else 1
            blocks.append((f"s{stage + 1}b{b + 1:02d}", c_in, c_out, stride))
            c_in = c_out
    return blocks


def resnet_layout(spec: Resnet, in_channels: int, n_classes: int) -> ResnetLayout:
    """Every parameter's shape: the stem convolution, each block's two convolutions with
    its four scalar biases and its scalar multiplier (Fixup), and the dense head."""
    layout: ResnetLayout = {
        "stem": {"w": (KERNEL, KERNEL, in_channels, spec.width), "b": (spec.width,)}
    }
    for name, c_in, c_out, _ in _stages(spec):
        layout[name] = {
            "w1": (KERNEL, KERNEL, c_in, c_out),
            "w2": (KERNEL, KERNEL, c_out, c_out),
            "bias": (4,),
            "scale": (1,),
        }
    layout["head"] = {"w": (4 * spec.width, n_classes), "b": (n_classes,)}
    return layout


def resnet_param_count(spec: Resnet, in_channels: int, n_classes: int) -> int:
    layout = resnet_layout(spec, in_channels, n_classes)
    return sum(math.prod(shape) for layer in layout.values() for shape in layer.values())


def block_strides(spec: Resnet) -> dict[str, int]:
    """Block name -> stride of its first convolution."""
    return {name: stride for name, _, _, stride in _stages(spec)}
