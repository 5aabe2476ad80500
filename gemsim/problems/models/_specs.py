"""Typed specifications of the models (the data sets' are in ``data/_specs.py``).

A spec is a small frozen value: it names *what* to build and is validated when
constructed, so a bad value fails before any data is loaded or any array is
allocated. Specs are hashable and compare by value, which makes them usable as
static (compile-time) metadata of a :class:`~gemsim.problems.Problem`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .._spec_checks import check_float_field, check_int_field

__all__ = [
    "Cnn",
    "Imported",
    "Logistic",
    "Mlp",
    "ModelSpec",
    "Quadratic",
    "Resnet",
    "Transformer",
]


# The CNN's architecture (kernel size, channels, dense widths), shared by the model and by
# the parameter count `gemsim trace` computes without building it.
CNN_KERNEL = 5
CNN_CHANNELS = (1, 10, 20)
CNN_HIDDEN = (320, 300, 200)


@dataclass(frozen=True)
class Cnn:
    """The GEM paper's MNIST network (28x28 single-channel images, 10 classes).

    conv 1->10 (5x5) -> max-pool 2 -> relu -> conv 10->20 (5x5) -> channel
    dropout p=0.5 (training only) -> max-pool 2 -> relu -> dense 320->300 ->
    relu -> 200 -> relu -> 10 -> log-softmax. 163,790 parameters.
    """

    dropout: float = 0.5
    """Probability of zeroing a whole conv2 channel in training mode."""

    def __post_init__(self) -> None:
        check_float_field("Cnn", "dropout", self.dropout, 0.0, 0.99)


@dataclass(frozen=True)
class Mlp:
    """A relu multi-layer perceptron on flattened inputs."""

    hidden: tuple[int, ...]
    """Widths of the hidden layers, input side first (at least one)."""

    def __post_init__(self) -> None:
        if not isinstance(self.hidden, tuple) or not self.hidden:
            raise ValueError(
                f"Mlp: hidden must be a non-empty tuple of layer widths, got {self.hidden!r} "
                "(use Logistic() for a model without hidden layers)"
            )
        for i, width in enumerate(self.hidden):
            check_int_field("Mlp", f"hidden[{i}]", width, 1)


@dataclass(frozen=True)
class Logistic:
    """Softmax (multinomial logistic) regression on flattened inputs."""


@dataclass(frozen=True)
class Quadratic:
    """A noisy ill-conditioned quadratic; needs no data set.

    loss(theta) = 0.5 * sum_i h_i theta_i^2 with h_i = condition ** (i / (dim - 1))
    (so h runs from 1 to ``condition``; ``dim == 1`` gives h = [1]), theta0 = ones.
    Each mini-batch adds a Gaussian vector z with standard deviation ``noise``
    to the gradient: grad = h * theta + z.

    With ``heterogeneity`` h > 0 each worker has its own optimum ``c_w`` (its coordinates
    drawn from N(0, h^2) for (seed, worker)): worker w's loss is ``0.5 * sum_i h_i (theta_i -
    c_w,i)^2``, its gradient ``h * (theta - c_w) + z``. The objective the evaluation
    reports is the mean of the workers' losses, minimised at the plain mean of the ``c_w``.
    """

    dim: int = 2
    condition: float = 1.0
    """Ratio of the largest to the smallest curvature (>= 1)."""
    noise: float = 0.0
    """Standard deviation of each gradient coordinate's noise per mini-batch (0: exact)."""
    heterogeneity: float = 0.0
    """Spread of the workers' optima around 0 (0: one optimum, 0, for every worker)."""

    def __post_init__(self) -> None:
        check_int_field("Quadratic", "dim", self.dim, 1)
        check_float_field("Quadratic", "condition", self.condition, 1.0)
        check_float_field("Quadratic", "noise", self.noise, 0.0)
        check_float_field("Quadratic", "heterogeneity", self.heterogeneity, 0.0)


@dataclass(frozen=True)
class Resnet:
    """A CIFAR-style residual network (He et al. 2016, arXiv 1512.03385, section 4.2).

    ``depth = 6 m + 2``: a 3x3 convolution, three stages of ``m`` residual blocks (two 3x3
    convolutions each) with ``width``, ``2 width`` and ``4 width`` channels (the first block
    of stages 2 and 3 halves the resolution, its shortcut subsamples and pads channels with
    zeros: the paper's option A), global average pooling and a dense layer. ResNet-8 and
    ResNet-20 have 74,841 and 268,407 parameters on 32x32x3 inputs with 10 classes.

    No batch normalisation: its running statistics would be state outside the parameters
    that each asynchronous worker keeps for itself and the parameter server never sees.
    Instead the network follows Fixup (Zhang, Dauphin and Ma 2019, arXiv 1901.09321): each
    block's second convolution and the dense layer start at zero, the first convolution's
    He initialisation is scaled by ``L ** -0.5`` (L residual blocks), and scalar biases and
    a scalar multiplier per block stand in for normalisation's affine part.
    """

    depth: int = 20
    """Layers with weights: 8, 14, 20, 26, 32, ... (6 m + 2)."""
    width: int = 16
    """Channels of the first stage."""

    def __post_init__(self) -> None:
        check_int_field("Resnet", "depth", self.depth, 8)
        if (self.depth - 2) % 6:
            raise ValueError(
                f"Resnet: depth must be 6 m + 2 (8, 14, 20, 26, 32, ...), got {self.depth}"
            )
        check_int_field("Resnet", "width", self.width, 1)

    @property
    def blocks_per_stage(self) -> int:
        return (self.depth - 2) // 6


POSITIONS = ("learned", "rotary")


@dataclass(frozen=True)
class Transformer:
    """A decoder-only character-level transformer (GPT-style, pre-norm).

    Token embedding (plus a learned position embedding, or rotary positions in attention),
    ``layers`` blocks of causal multi-head self-attention and a GELU MLP, each behind a
    layer norm and added to the residual stream, a final layer norm and the output layer
    (the token embedding transposed when ``tie_embeddings``). The loss is the mean
    next-token cross-entropy over every position of every sequence. The equations are in
    ``_transformer.py``; the defaults have 0.81 M parameters for a vocabulary of 72.
    """

    layers: int = 4
    d_model: int = 128
    heads: int = 4
    context: int = 64
    """Tokens a sequence holds (a batch reads windows of ``context + 1`` characters)."""
    mlp_ratio: int = 4
    """The MLP's hidden width over ``d_model``."""
    positions: str = "learned"
    """``learned`` (an embedding added to the tokens') or ``rotary`` (RoFormer, rotate-half)."""
    tie_embeddings: bool = True
    dropout: float = 0.0
    """Dropout on the embedding and on each residual branch in training mode (0: off)."""

    def __post_init__(self) -> None:
        for name in ("layers", "d_model", "heads", "context", "mlp_ratio"):
            check_int_field("Transformer", name, getattr(self, name), 1)
        if self.d_model % self.heads:
            raise ValueError(
                f"Transformer: heads must divide d_model, got heads {self.heads} and d_model "
                f"{self.d_model} (d_model {self.d_model} has divisors "
                f"{_divisors(self.d_model)})"
            )
        if self.positions not in POSITIONS:
            raise ValueError(
                f"Transformer: positions must be one of {', '.join(POSITIONS)}, got "
                f"{self.positions!r}"
            )
        if self.positions == "rotary" and (self.d_model // self.heads) % 2:
            raise ValueError(
                "Transformer: rotary positions need an even head width d_model / heads, got "
                f"{self.d_model} / {self.heads} = {self.d_model // self.heads}"
            )
        if not isinstance(self.tie_embeddings, bool):
            raise ValueError(
                f"Transformer: tie_embeddings must be true or false, got {self.tie_embeddings!r}"
            )
        check_float_field("Transformer", "dropout", self.dropout, 0.0, 0.99)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, n + 1) if n % k == 0)


_TARGET = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def _frozen_json(owner: str, value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{owner}: kwargs must be JSON values (numbers, strings, lists, "
            f"tables), got {value!r} ({exc})"
        ) from None


@dataclass(frozen=True)
class Imported:
    """A model (and optionally its data) from a factory named by import path.

    ``target`` is ``"module:factory"`` (both may be dotted); the factory is called with
    ``kwargs`` and returns an object meeting the problem contract (docs/problems.md), or a
    pair ``(model, data)`` where ``data`` maps ``x_train, y_train, x_test, y_test`` to arrays.
    The module is looked up in ``path`` first (a folder; scenario files default it to their
    own folder), then on ``sys.path``. ``sha256`` is the module file's digest when the spec
    was made: importing a module whose file no longer matches is an error, so a run never
    uses other code than the one its identity records.
    """

    target: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None
    sha256: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not _TARGET.match(self.target):
            raise ValueError(
                f"Imported: target must look like 'module:factory' (dotted names allowed), "
                f"got {self.target!r}"
            )
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise ValueError(
                f"Imported: kwargs must be a mapping with string keys, got {self.kwargs!r}"
            )
        _frozen_json("Imported", dict(self.kwargs))
        object.__setattr__(self, "kwargs", MappingProxyType(dict(self.kwargs)))
        for name in ("path", "sha256"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(
                    f"Imported: {name} must be a non-empty string or None, got {value!r}"
                )

    def __hash__(self) -> int:
        return hash(
            (self.target, _frozen_json("Imported", dict(self.kwargs)), self.path, self.sha256)
        )

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def factory(self) -> str:
        return self.target.partition(":")[2]

    def describe(self) -> str:
        """``module:factory(k=v, ...)``, for messages."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.target}({args})"


ModelSpec = Cnn | Mlp | Logistic | Quadratic | Resnet | Transformer | Imported
