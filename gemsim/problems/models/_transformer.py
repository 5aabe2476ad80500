"""The decoder-only transformer (:class:`~gemsim.problems.Transformer`) as two pure functions.

For a sequence of tokens ``s_0 .. s_{T-1}`` (T <= context), d = ``d_model``, H heads of width
dh = d / H, F = ``mlp_ratio`` d:

- ``x_t = E[s_t] + P[t]`` (learned positions; with rotary positions no P is added);
- each block: ``h = LN1(x)``; ``[q | k | v] = h W_qkv + b_qkv`` (three [T, d] column blocks,
  head j the columns ``j dh .. (j + 1) dh``); rotary positions rotate each head's q and k at
  position t by angles ``t 10000^(-2i/dh)`` (the rotate-half pairing of i and i + dh/2);
  ``o_j = softmax(q_j k_j^T / sqrt(dh) + causal mask) v_j``; ``x += concat_j(o_j) W_o + b_o``;
  ``x += gelu(LN2(x) W_fc + b_fc) W_out + b_out`` (GELU's tanh form);
- ``logits_t = LN_f(x_t) E^T`` (tied) or ``LN_f(x_t) W_head``.

LN is a layer norm over features with epsilon 1e-5. The loss is the mean next-token
cross-entropy over every position of every sequence. Initialisation follows GPT-2: weights
from N(0, 0.02^2), the residual branches' output weights scaled by ``1 / sqrt(2 L)``, biases
zero, layer-norm scales one. Dropout (training mode, ``dropout > 0``) zeroes the embedding's
and each residual branch's outputs with that probability.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from gemsim.types import PyTree

from ._layers import Model
from ._specs import Transformer
from ._transformer_layout import block_names, param_shapes

__all__ = ["lm_loss", "token_nll", "transformer_model"]

_LN_EPS = 1e-5
_INIT_STD = 0.02


def _init(spec: Transformer, vocab: int, key: jax.Array) -> PyTree:
    shapes = param_shapes(spec, vocab)
    # One normal draw cut in order: one random-number kernel compiles faster than one per
    # tensor (as the other built-in models do).
    total = sum(math.prod(s) for s, kind in shapes.values() if kind in ("normal", "residual"))
    unit = jax.random.normal(key, (total,), jnp.float32)
    residual = _INIT_STD / math.sqrt(2 * spec.layers)
    params: dict = {}
    offset = 0
    for path, (shape, kind) in shapes.items():
        if kind == "one":
            value = jnp.ones(shape, jnp.float32)
        elif kind == "zero":
            value = jnp.zeros(shape, jnp.float32)
        else:
            size = math.prod(shape)
            std = _INIT_STD if kind == "normal" else residual
            value = unit[offset : offset + size].reshape(shape) * std
            offset += size
        node = params
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return params


def _lift(v: jax.Array, x: jax.Array) -> jax.Array:
    """A feature vector ``v`` shaped to broadcast over ``x``'s leading axes (spelled out:
    rank-promotion safe)."""
    return v.reshape((1,) * (x.ndim - 1) + v.shape)


def _layer_norm(p: dict, x: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    normed = (x - mean) * jax.lax.rsqrt(var + _LN_EPS)
    return normed * _lift(p["scale"], x) + _lift(p["bias"], x)


def _linear(p: dict, x: jax.Array) -> jax.Array:
    y = x @ p["w"]
    return y + _lift(p["b"], y)


def _rotary(x: jax.Array) -> jax.Array:
    """``x [B, H, T, dh]`` rotated by its positions (rotate-half pairing)."""
    t, dh = x.shape[-2], x.shape[-1]
    half = dh // 2
    freq = 10000.0 ** (-2.0 * jnp.arange(half, dtype=jnp.float32) / dh)
    angle = jnp.arange(t, dtype=jnp.float32)[:, None] * freq[None, :]
    cos, sin = jnp.cos(angle)[None, None], jnp.sin(angle)[None, None]
    a, b = x[..., :half], x[..., half:]
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def _attention(spec: Transformer, p: dict, h: jax.Array) -> jax.Array:
    b, t, d = h.shape
    heads, dh = spec.heads, spec.head_dim
    qkv = _linear(p["qkv"], h).reshape(b, t, 3, heads, dh)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # [B, H, T, dh]
    if spec.positions == "rotary":
        q, k = _rotary(q), _rotary(k)
    scores = jnp.einsum("bhtd,bhud->bhtu", q, k) / math.sqrt(dh)
    causal = jnp.tril(jnp.ones((t, t), bool))
    scores = jnp.where(causal[None, None], scores, -jnp.inf)
    o = jnp.einsum("bhtu,bhud->bhtd", jax.nn.softmax(scores, axis=-1), v)
    return _linear(p["out"], o.transpose(0, 2, 1, 3).reshape(b, t, d))


def _dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _apply(spec: Transformer, params: PyTree, tokens: jax.Array, key: jax.Array | None):
    t = tokens.shape[-1]
    keys = [None] * (2 * spec.layers + 1)
    if key is not None and spec.dropout > 0:
        keys = list(jax.random.split(key, 2 * spec.layers + 1))
    x = params["embed"]["tokens"][tokens]
    if spec.positions == "learned":
        x = x + params["embed"]["positions"][None, :t]
    x = _dropout(x, spec.dropout, keys[0])
    for i, name in enumerate(block_names(spec.layers)):
        block = params[name]
        attended = _attention(spec, block["attn"], _layer_norm(block["ln1"], x))
        x = x + _dropout(attended, spec.dropout, keys[2 * i + 1])
        hidden = jax.nn.gelu(_linear(block["mlp"]["fc"], _layer_norm(block["ln2"], x)))
        x = x + _dropout(_linear(block["mlp"]["out"], hidden), spec.dropout, keys[2 * i + 2])
    x = _layer_norm(params["ln_f"], x)
    if spec.tie_embeddings:
        return x @ params["embed"]["tokens"].T
    return x @ params["head"]["w"]


def transformer_model(spec: Transformer, vocab_size: int) -> Model:
    """The model: ``init(key)`` and ``apply(params, tokens [B, T] int, key) -> logits
    [B, T, vocab_size]`` (``key`` None: evaluation mode, no dropout)."""

    def init(key: jax.Array) -> PyTree:
        return _init(spec, vocab_size, key)

    def apply(params: PyTree, tokens: jax.Array, key: jax.Array | None) -> jax.Array:
        return _apply(spec, params, tokens, key)

    return Model(init, apply)


def token_nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """``-log softmax(logits)[target]`` at every position, float32 like ``targets``."""
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]


def lm_loss(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy over every position of every sequence."""
    return jnp.mean(token_nll(logits, targets))
