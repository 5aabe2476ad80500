"""The transformer against an independent numpy (float64) reference: logits, loss, gradient.

The reference below is written from the architecture's equations (pre-norm decoder blocks:
layer norm, causal multi-head attention with learned or rotary positions, tanh-GELU MLP; final
layer norm; tied or untied output head; mean next-token cross-entropy), not from the model's
code, so the two agree only if both follow the equations. The checks, on tiny configurations
with every parameter replaced by random values (biases and layer-norm parameters included):

- the model's logits and loss equal the reference's (float32 against float64 tolerances),
  for learned and rotary positions, tied and untied embeddings, 1, 2 and 4 heads, 2 and 3
  layers, sequences as long as the context and shorter;
- the model's gradient (jax.grad, float32) equals central finite differences of the reference
  loss, along random directions in parameter space and at single coordinates;
- causality: changing token t changes no logit at an earlier position (reference and model).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gemsim.problems import Transformer
from gemsim.problems.models._transformer import lm_loss, transformer_model

VOCAB = 11
D_MODEL = 16
CONTEXT = 8
BATCH = 3
LN_EPS = 1e-5


# --- the numpy reference, from the equations ----------------------------------------------


def _layer_norm(z: np.ndarray, p: dict) -> np.ndarray:
    mean = z.mean(axis=-1, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=-1, keepdims=True)
    return (z - mean) / np.sqrt(var + LN_EPS) * p["scale"] + p["bias"]


def _gelu(z: np.ndarray) -> np.ndarray:
    return 0.5 * z * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (z + 0.044715 * z**3)))


def _rotary(x: np.ndarray) -> np.ndarray:
    """Rotate-half rotary positions on x [B, H, T, dh]; position t is x's index t."""
    t_len, dh = x.shape[-2], x.shape[-1]
    half = dh // 2
    freq = 10000.0 ** (-2.0 * np.arange(half) / dh)
    angle = np.arange(t_len)[:, None] * freq[None, :]  # [T, half]
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _block_name(i: int, layers: int) -> str:
    return f"block_{i:0{len(str(layers - 1))}d}"


def reference_logits(params: dict, tokens: np.ndarray, spec: Transformer) -> np.ndarray:
    """Logits [B, T, V] of int tokens [B, T]; params a nested dict of float64 arrays."""
    d, n_heads = spec.d_model, spec.heads
    dh = d // n_heads
    batch, t_len = tokens.shape
    emb = params["embed"]["tokens"]
    x = emb[tokens]  # [B, T, d]
    if spec.positions == "learned":
        x = x + params["embed"]["positions"][:t_len]
    future = np.triu(np.ones((t_len, t_len), dtype=bool), k=1)  # [t, u]: u > t

    def heads(z: np.ndarray) -> np.ndarray:  # [B, T, d] -> [B, H, T, dh]
        return z.reshape(batch, t_len, n_heads, dh).transpose(0, 2, 1, 3)

    for i in range(spec.layers):
        blk = params[_block_name(i, spec.layers)]
        h = _layer_norm(x, blk["ln1"])
        qkv = h @ blk["attn"]["qkv"]["w"] + blk["attn"]["qkv"]["b"]
        q, k, v = heads(qkv[..., :d]), heads(qkv[..., d : 2 * d]), heads(qkv[..., 2 * d :])
        if spec.positions == "rotary":
            q, k = _rotary(q), _rotary(k)
        scores = q @ k.swapaxes(-1, -2) / np.sqrt(dh)  # [B, H, T, T]
        scores = np.where(future, -np.inf, scores)
        o = _softmax(scores) @ v  # [B, H, T, dh]
        o = o.transpose(0, 2, 1, 3).reshape(batch, t_len, d)
        x = x + o @ blk["attn"]["out"]["w"] + blk["attn"]["out"]["b"]
        h2 = _layer_norm(x, blk["ln2"])
        hidden = _gelu(h2 @ blk["mlp"]["fc"]["w"] + blk["mlp"]["fc"]["b"])
        x = x + hidden @ blk["mlp"]["out"]["w"] + blk["mlp"]["out"]["b"]
    h = _layer_norm(x, params["ln_f"])
    return h @ emb.T if spec.tie_embeddings else h @ params["head"]["w"]


def reference_loss(logits: np.ndarray, targets: np.ndarray) -> float:
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(logp, targets[..., None], axis=-1).mean())


# --- helpers -------------------------------------------------------------------------------


def _spec(positions: str, tie: bool, heads: int, layers: int = 2) -> Transformer:
    return Transformer(
        layers=layers,
        d_model=D_MODEL,
        heads=heads,
        context=CONTEXT,
        mlp_ratio=4,
        positions=positions,
        tie_embeddings=tie,
        dropout=0.0,
    )


def _random_params(spec: Transformer, seed: int):
    """The model's init with every leaf replaced by random normals: (float32 jax, float64 np)."""
    # The init's tree (shapes and dtypes) without running it: eval_shape only traces.
    template = jax.eval_shape(transformer_model(spec, vocab_size=VOCAB).init, jax.random.key(0))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        centre = 1.0 if path[-1].key == "scale" else 0.0
        return (centre + 0.3 * rng.standard_normal(leaf.shape)).astype(np.float32)

    drawn = jax.tree_util.tree_map_with_path(draw, template)
    params = jax.tree.map(jnp.asarray, drawn)
    return params, jax.tree.map(lambda a: a.astype(np.float64), drawn)


def _tokens(seed: int, t_len: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, size=(BATCH, t_len)).astype(np.int32)
    targets = rng.integers(0, VOCAB, size=(BATCH, t_len)).astype(np.int32)
    return tokens, targets


def _expected_shapes(spec: Transformer) -> dict:
    d, f = spec.d_model, spec.mlp_ratio * spec.d_model
    embed = {"tokens": (VOCAB, d)}
    if spec.positions == "learned":
        embed["positions"] = (spec.context, d)
    block = {
        "ln1": {"scale": (d,), "bias": (d,)},
        "attn": {"qkv": {"w": (d, 3 * d), "b": (3 * d,)}, "out": {"w": (d, d), "b": (d,)}},
        "ln2": {"scale": (d,), "bias": (d,)},
        "mlp": {"fc": {"w": (d, f), "b": (f,)}, "out": {"w": (f, d), "b": (d,)}},
    }
    shapes = {"embed": embed, "ln_f": {"scale": (d,), "bias": (d,)}}
    shapes.update({_block_name(i, spec.layers): block for i in range(spec.layers)})
    if not spec.tie_embeddings:
        shapes["head"] = {"w": (d, VOCAB)}
    return shapes


# (positions, tie_embeddings, heads, layers, sequence length)
FORWARD_CASES = [
    ("learned", True, 1, 2, CONTEXT),
    ("learned", False, 2, 2, 5),
    ("learned", True, 4, 2, 3),
    ("rotary", True, 4, 2, CONTEXT),
    ("rotary", False, 1, 2, 6),
    ("rotary", False, 2, 3, CONTEXT),
    ("rotary", True, 2, 2, 1),
]


@pytest.mark.parametrize(("positions", "tie"), [("learned", False), ("rotary", True)])
def test_parameter_tree_is_the_documented_one(positions, tie):
    for layers in (2, 11):
        spec = _spec(positions, tie, heads=2, layers=layers)
        init = transformer_model(spec, vocab_size=VOCAB).init
        params = jax.eval_shape(init, jax.random.key(0))
        assert jax.tree.map(lambda a: a.shape, params) == _expected_shapes(spec)
        assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(params))


@pytest.mark.parametrize(("positions", "tie", "heads", "layers", "t_len"), FORWARD_CASES)
def test_logits_and_loss_match_the_reference(positions, tie, heads, layers, t_len):
    spec = _spec(positions, tie, heads, layers)
    model = transformer_model(spec, vocab_size=VOCAB)
    params, ref_params = _random_params(spec, seed=heads + 10 * layers + 100 * t_len)
    tokens, targets = _tokens(seed=t_len, t_len=t_len)

    logits = jax.jit(model.apply)(params, jnp.asarray(tokens), None)
    assert logits.shape == (BATCH, t_len, VOCAB) and logits.dtype == jnp.float32
    expected = reference_logits(ref_params, tokens, spec)
    print(
        f"{positions} tie={tie} H={heads} L={layers} T={t_len}: logits max abs diff "
        f"{np.max(np.abs(np.asarray(logits, np.float64) - expected)):.2e}, "
        f"logit scale {np.max(np.abs(expected)):.2f}"
    )
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)

    loss = lm_loss(logits, jnp.asarray(targets))
    assert loss.shape == ()
    expected_loss = reference_loss(expected, targets)
    print(f"  loss {float(loss):.6f} vs {expected_loss:.6f}")
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-4, atol=1e-5)


# (positions, tie_embeddings, heads, sequence length)
GRADIENT_CASES = [("learned", False, 2, 5), ("rotary", True, 4, CONTEXT)]


@pytest.mark.parametrize(("positions", "tie", "heads", "t_len"), GRADIENT_CASES)
def test_gradient_matches_finite_differences_of_the_reference(positions, tie, heads, t_len):
    spec = _spec(positions, tie, heads)
    model = transformer_model(spec, vocab_size=VOCAB)
    params, ref_params = _random_params(spec, seed=7 + heads)
    tokens, targets = _tokens(seed=3, t_len=t_len)
    x, y = jnp.asarray(tokens), jnp.asarray(targets)
    grad = jax.jit(jax.grad(lambda p: lm_loss(model.apply(p, x, None), y)))(params)
    grad = jax.tree.map(lambda a: np.asarray(a, np.float64), grad)

    def ref_loss(p: dict) -> float:
        return reference_loss(reference_logits(p, tokens, spec), targets)

    def central_difference(direction: dict, eps: float = 1e-5) -> float:
        plus = jax.tree.map(lambda p, u: p + eps * u, ref_params, direction)
        minus = jax.tree.map(lambda p, u: p - eps * u, ref_params, direction)
        return (ref_loss(plus) - ref_loss(minus)) / (2 * eps)

    def dot(a: dict, b: dict) -> float:
        return float(
            sum(np.vdot(u, v) for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))
        )

    grad_norm = np.sqrt(dot(grad, grad))
    assert grad_norm > 1e-2  # a gradient worth checking

    # Along random unit directions in the whole parameter space.
    rng = np.random.default_rng(11)
    for _ in range(4):
        direction = jax.tree.map(lambda a: rng.standard_normal(a.shape), ref_params)
        norm = np.sqrt(dot(direction, direction))
        direction = jax.tree.map(lambda a, n=norm: a / n, direction)
        fd, analytic = central_difference(direction), dot(grad, direction)
        print(f"direction: fd {fd:+.6e} jax {analytic:+.6e} diff {abs(fd - analytic):.1e}")
        np.testing.assert_allclose(analytic, fd, rtol=1e-3, atol=1e-5 * grad_norm)

    # Along the gradient itself (the directional derivative is then |g|, far from zero).
    unit = jax.tree.map(lambda g: g / grad_norm, grad)
    np.testing.assert_allclose(central_difference(unit), grad_norm, rtol=1e-3)

    # At single coordinates, in every kind of parameter.
    coordinates = [
        (("embed", "tokens"), (int(tokens[0, 0]), 1)),
        (("block_0", "ln1", "scale"), (2,)),
        (("block_0", "ln1", "bias"), (3,)),
        (("block_0", "attn", "qkv", "w"), (1, 5)),  # a query weight
        (("block_1", "attn", "qkv", "w"), (4, D_MODEL + 6)),  # a key weight
        (("block_0", "attn", "qkv", "b"), (2 * D_MODEL + 3,)),  # a value bias
        (("block_1", "attn", "out", "b"), (0,)),
        (("block_0", "ln2", "bias"), (9,)),
        (("block_0", "mlp", "fc", "b"), (7,)),
        (("block_1", "mlp", "out", "w"), (20, 3)),
        (("ln_f", "scale"), (0,)),
        (("ln_f", "bias"), (5,)),
    ]
    if positions == "learned":
        coordinates.append((("embed", "positions"), (1, 2)))
    if not tie:
        coordinates.append((("head", "w"), (3, 4)))

    def leaf(tree: dict, path: tuple[str, ...]) -> np.ndarray:
        for key in path:
            tree = tree[key]
        return tree

    for path, index in coordinates:
        direction = jax.tree.map(np.zeros_like, ref_params)
        leaf(direction, path)[index] = 1.0
        fd, analytic = central_difference(direction), leaf(grad, path)[index]
        print(f"{'.'.join(path)}{list(index)}: fd {fd:+.6e} jax {analytic:+.6e}")
        np.testing.assert_allclose(analytic, fd, rtol=1e-3, atol=1e-6, err_msg=str(path))


@pytest.mark.parametrize(("positions", "heads"), [("learned", 2), ("rotary", 4)])
def test_causality(positions, heads):
    spec = _spec(positions, tie=False, heads=heads)
    model = transformer_model(spec, vocab_size=VOCAB)
    params, ref_params = _random_params(spec, seed=5)
    tokens, _ = _tokens(seed=9, t_len=CONTEXT)
    apply = jax.jit(model.apply)
    logits = np.asarray(apply(params, jnp.asarray(tokens), None))
    expected = reference_logits(ref_params, tokens, spec)
    for t in range(CONTEXT):
        changed = tokens.copy()
        changed[:, t] = (changed[:, t] + 1 + t) % VOCAB
        new_expected = reference_logits(ref_params, changed, spec)
        new_logits = np.asarray(apply(params, jnp.asarray(changed), None))
        # The reference: earlier positions untouched, position t moved.
        np.testing.assert_allclose(new_expected[:, :t], expected[:, :t], rtol=0, atol=1e-12)
        assert np.all(np.max(np.abs(new_expected[:, t] - expected[:, t]), axis=-1) > 1e-3)
        # The model: the same.
        np.testing.assert_allclose(new_logits[:, :t], logits[:, :t], rtol=0, atol=1e-6)
        assert np.all(np.max(np.abs(new_logits[:, t] - logits[:, t]), axis=-1) > 1e-3)
        np.testing.assert_allclose(new_logits, new_expected, rtol=1e-4, atol=1e-5)
