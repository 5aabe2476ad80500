"""The unrolled threefry lowering (gemsim.problems._threefry) draws the very bits of JAX's
own CPU lowering: every kind of draw the problems make, compared with a fresh interpreter
that never registered it."""

import json
import subprocess
import sys

DRAWS = """
import json, sys
import jax, jax.numpy as jnp
if sys.argv[1] == "unrolled":
    from gemsim.problems._threefry import use_unrolled_threefry_on_cpu
    assert use_unrolled_threefry_on_cpu()
root = jax.random.fold_in(jax.random.key(1234), 7)
keys = jax.vmap(lambda w: jax.random.fold_in(jax.random.fold_in(root, w), 3))(jnp.arange(5))
out = {
    "normal": jax.vmap(lambda k: jax.random.normal(k, (101,)))(keys),
    "uniform": jax.random.uniform(root, (33,)),
    "bits": jax.random.bits(root, (17,), jnp.uint32),
    "permutation": jax.random.permutation(root, 1000),
    "split": jax.random.key_data(jax.random.split(root, 4)),
    "dropout": jax.random.bernoulli(root, 0.3, (64,)),
}
print(json.dumps({k: jnp.asarray(v).astype(jnp.float64).tolist() for k, v in out.items()}))
"""


def draws(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", DRAWS, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,  # two small programs compiled; seconds even on a slow loaded machine
    )
    return json.loads(done.stdout)


def test_unrolled_threefry_draws_the_same_bits():
    default, unrolled = draws("default"), draws("unrolled")
    assert default.keys() == unrolled.keys()
    for name in default:
        assert default[name] == unrolled[name], name
