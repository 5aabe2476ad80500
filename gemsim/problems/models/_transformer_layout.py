"""The transformer's parameter tree as shapes, without JAX (the timing side counts the
parameters of a model it does not build)."""

from __future__ import annotations

import math

from ._specs import Transformer

__all__ = ["block_names", "param_shapes", "transformer_param_count"]


def block_names(layers: int) -> list[str]:
    # Zero-padded so that the pytree's (sorted) key order is the layer order.
    width = len(str(layers - 1))
    return [f"block_{i:0{width}d}" for i in range(layers)]


def param_shapes(spec: Transformer, vocab: int) -> dict:
    """The parameter tree's shapes: ``{path: (shape, kind)}`` (kind: how it is initialised)."""
    d, f = spec.d_model, spec.mlp_ratio * spec.d_model
    shapes = {("embed", "tokens"): ((vocab, d), "normal")}
    if spec.positions == "learned":
        shapes[("embed", "positions")] = ((spec.context, d), "normal")
    for name in block_names(spec.layers):
        shapes.update({
            (name, "ln1", "scale"): ((d,), "one"),
            (name, "ln1", "bias"): ((d,), "zero"),
            (name, "attn", "qkv", "w"): ((d, 3 * d), "normal"),
            (name, "attn", "qkv", "b"): ((3 * d,), "zero"),
            (name, "attn", "out", "w"): ((d, d), "residual"),
            (name, "attn", "out", "b"): ((d,), "zero"),
            (name, "ln2", "scale"): ((d,), "one"),
            (name, "ln2", "bias"): ((d,), "zero"),
            (name, "mlp", "fc", "w"): ((d, f), "normal"),
            (name, "mlp", "fc", "b"): ((f,), "zero"),
            (name, "mlp", "out", "w"): ((f, d), "residual"),
            (name, "mlp", "out", "b"): ((d,), "zero"),
        })  # fmt: skip
    shapes[("ln_f", "scale")] = ((d,), "one")
    shapes[("ln_f", "bias")] = ((d,), "zero")
    if not spec.tie_embeddings:
        shapes[("head", "w")] = ((d, vocab), "normal")
    return shapes


def transformer_param_count(spec: Transformer, vocab: int) -> int:
    """Number of parameters for a vocabulary of ``vocab`` tokens."""
    return sum(math.prod(shape) for shape, _ in param_shapes(spec, vocab).values())
