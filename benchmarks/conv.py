"""Convolution back-ends for the paper's CNN: im2col + matmul versus lax.

Measures forward + backward (``jax.jit(jax.value_and_grad(loss))``) throughput
in samples per second of the GEM paper's MNIST network at batch size b, with
the two implementations of its convolutions and pooling:

- ``im2col``: patches gathered by slicing, one matmul, reshape + max pooling
  (what ``gemsim.problems`` uses);
- ``lax``: ``lax.conv_general_dilated`` + ``lax.reduce_window`` pooling (kept
  here only, as the alternative).

Each is measured plainly (one worker's batch) and under ``jax.vmap`` over
``--workers`` workers, each with its own parameters, batch and dropout key
(as the batched executor runs it). Repetitions are interleaved (every
variant once per round) so that slow drifts of the machine hit all variants
alike; the table reports medians over rounds, and the im2col / lax ratio as
the median of per-round ratios (robust to other load on the machine).

    python benchmarks/conv.py            # table
    python benchmarks/conv.py --json     # JSON
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from gemsim.problems import IM2COL, ConvOps, cnn_apply, cnn_init, cross_entropy


def conv_lax(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """Valid stride-1 convolution with XLA's convolution op (NHWC, HWIO)."""
    dims = ("NHWC", "HWIO", "NHWC")
    out = lax.conv_general_dilated(x, kernel, (1, 1), "VALID", dimension_numbers=dims)
    return out + bias.reshape(1, 1, 1, -1)


def max_pool_lax(x: jax.Array) -> jax.Array:
    """2x2 max-pooling, stride 2, with ``reduce_window``."""
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


LAX = ConvOps(conv_lax, max_pool_lax)
IMPLEMENTATIONS = {"im2col": IM2COL, "lax": LAX}


def make_loss(ops: ConvOps) -> Callable:
    """The training-mode loss (with dropout) of the CNN built on ``ops``."""

    def loss(params, x, y, key):
        return cross_entropy(cnn_apply(params, x, key, ops=ops), y)

    return loss


def _inputs(batch: int, workers: int) -> tuple:
    keys = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(keys[0], (workers, batch, 28, 28), jnp.float32)
    y = jax.random.randint(keys[1], (workers, batch), 0, 10)
    params = jax.vmap(cnn_init)(jax.random.split(keys[2], workers))
    return params, x, y, jax.random.split(keys[3], workers)


def _variants(batch: int, workers: int) -> dict[str, tuple[Callable, tuple, int]]:
    """name -> (compiled step, its arguments, samples per call)."""
    params, x, y, dropout = _inputs(batch, workers)
    one = (jax.tree.map(lambda a: a[0], params), x[0], y[0], dropout[0])
    out = {}
    for name, ops in IMPLEMENTATIONS.items():
        step = jax.value_and_grad(make_loss(ops))
        out[f"{name}/plain"] = (jax.jit(step), one, batch)
        out[f"{name}/vmap"] = (jax.jit(jax.vmap(step)), (params, x, y, dropout), batch * workers)
    return out


def _rate(fn: Callable, args: tuple, samples: int, seconds: float) -> float:
    calls, start = 0, time.perf_counter()
    while True:
        jax.block_until_ready(fn(*args))
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * samples / elapsed


def measure(batch: int = 64, workers: int = 8, rounds: int = 7, seconds: float = 0.5) -> dict:
    """Median samples/s per variant over interleaved rounds."""
    variants = _variants(batch, workers)
    for fn, args, _ in variants.values():  # compile and warm up
        jax.block_until_ready(fn(*args))
        jax.block_until_ready(fn(*args))
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (fn, args, samples) in variants.items():
            rates[name].append(_rate(fn, args, samples, seconds))
    paired = lambda mode: statistics.median(
        a / b for a, b in zip(rates[f"im2col/{mode}"], rates[f"lax/{mode}"], strict=True)
    )
    return {
        "batch": batch,
        "workers": workers,
        "rounds": rounds,
        "device": str(jax.devices()[0]),
        "cpu": platform.processor() or platform.machine(),
        "jax": jax.__version__,
        "samples_per_s": {name: statistics.median(r) for name, r in rates.items()},
        "im2col_over_lax": {mode: paired(mode) for mode in ("plain", "vmap")},
        "all_rounds": rates,
    }


def _table(result: dict) -> str:
    med = result["samples_per_s"]
    lines = [
        f"CNN value_and_grad, b={result['batch']}, vmap over {result['workers']} workers, "
        f"median of {result['rounds']} interleaved rounds "
        f"({result['device']}, jax {result['jax']})",
        f"{'implementation':<16}{'plain samples/s':>18}{'vmapped samples/s':>20}",
    ]
    for name in IMPLEMENTATIONS:
        lines.append(f"{name:<16}{med[name + '/plain']:>18,.0f}{med[name + '/vmap']:>20,.0f}")
    ratio = result["im2col_over_lax"]
    lines.append(f"{'im2col / lax':<16}{ratio['plain']:>18.2f}{ratio['vmap']:>20.2f}")
    lines.append("(ratio: median over rounds of the same round's im2col / lax rates)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.5, help="timed seconds per variant")
    args = parser.parse_args()
    result = measure(args.batch, args.workers, args.rounds, args.seconds)
    print(json.dumps(result, indent=2) if args.json else _table(result))


if __name__ == "__main__":
    main()
