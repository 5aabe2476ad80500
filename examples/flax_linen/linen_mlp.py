"""A Flax Linen perceptron with dropout, for any flattened inputs."""

import flax.linen as nn

from gemsim.problems import from_flax_linen


class Mlp(nn.Module):
    hidden: int
    dropout: float

    @nn.compact
    def __call__(self, x, train: bool):
        h = nn.relu(nn.Dense(self.hidden)(x.reshape(x.shape[0], -1)))
        h = nn.Dropout(self.dropout, deterministic=not train)(h)
        return nn.Dense(10)(h)


def make_mlp(hidden: int = 64, dropout: float = 0.2, input_shape: tuple = (8, 8)):
    return from_flax_linen(Mlp(hidden, dropout), tuple(input_shape))
