"""A Flax NNX convolutional network for 28x28 grey images (mnist-5k, fashion-mnist)."""

import jax
from flax import nnx

from gemsim.problems import from_flax_nnx


class SmallCnn(nnx.Module):
    def __init__(self, channels: int, hidden: int, dropout: float, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, channels, kernel_size=(3, 3), strides=(2, 2), rngs=rngs)
        self.conv2 = nnx.Conv(channels, channels, kernel_size=(3, 3), strides=(2, 2), rngs=rngs)
        self.dense = nnx.Linear(7 * 7 * channels, hidden, rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.out = nnx.Linear(hidden, 10, rngs=rngs)

    def __call__(self, x):
        h = jax.nn.relu(self.conv1(x[..., None]))
        h = jax.nn.relu(self.conv2(h))
        h = self.dropout(jax.nn.relu(self.dense(h.reshape(h.shape[0], -1))))
        return self.out(h)


def make_cnn(channels: int = 8, hidden: int = 64, dropout: float = 0.25):
    return from_flax_nnx(lambda rngs: SmallCnn(channels, hidden, dropout, rngs=rngs))
