"""JAX's threefry hash compiled unrolled on a CPU: the same bits, fewer kernels.

On a CPU, JAX lowers each threefry2x32 hash (every key fold, split and draw) as a loop over
its five groups of rounds, which keeps programs small; XLA then runs the loop's body kernel
by kernel. Unrolled, as JAX lowers it on accelerators, the twenty rounds fuse into one
elementwise kernel: measured on a 2-core CPU, 100 normal draws for each of 64 runs take
7 ns a draw instead of 22 (benchmarks/RESULTS.md), which is most of what a batch of small
runs (`engine: {batch_runs}`) spends on a noisy quadratic's gradients. The hash is the same
integer arithmetic either way, so every draw keeps its bits (tests/problems/test_threefry.py
compares them with JAX's own lowering in a fresh process).

JAX offers no public switch for this; the lowering is registered through its internal
module, and where that module is not there (another JAX release) nothing changes: the draws
are then only slower.
"""

from __future__ import annotations

_registered = False


def use_unrolled_threefry_on_cpu() -> bool:
    """Lower threefry2x32 unrolled on the CPU backend from now on (programs compiled before
    keep theirs). Returns whether the lowering is in place."""
    global _registered
    if _registered:
        return True
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry
    except ImportError:
        return False
    rule = getattr(threefry, "_threefry2x32_lowering_rule", None)
    primitive = getattr(threefry, "threefry2x32_p", None)
    if rule is None or primitive is None:
        return False
    mlir.register_lowering(primitive, rule, platform="cpu")
    _registered = True
    return True
