"""FedProx's federated synthetic data, Synthetic(alpha, beta): devices that differ in their
model and in their inputs, with natural per-device partitions.

Li, Sahu, Zaheer, Sanjabi, Talwalkar & Smith 2020, "Federated Optimization in Heterogeneous
Networks" (MLSys), https://arxiv.org/abs/1812.06127, §5.1 and appendix C.1. For each device k:

    u_k ~ N(0, alpha),  B_k ~ N(0, beta)
    W_k in R^{C x d}, b_k in R^C:  entries ~ N(u_k, 1)      (the device's own model)
    v_k in R^d:                    entries ~ N(B_k, 1)      (the device's own input mean)
    x ~ N(v_k, Sigma),  Sigma diagonal, Sigma_jj = j^-1.2
    y = argmax(softmax(W_k x + b_k))

alpha controls how much the devices' models differ, beta how much their inputs differ; the
paper's settings are (0, 0), (0.5, 0.5) and (1, 1), with d = 60, C = 10 and 30 devices.
Readings taken where the paper leaves it open, as the authors' generator does: N(0, alpha)
has standard deviation alpha, and the number of samples of a device is a power law,
``floor(lognormal(4, 2)) + 50``. Each device's samples are split 80 / 20 into training and
test examples (the paper's split); ``groups`` gives each training example's device, for the
`groups` partition (one device per worker or client).

The sizes are drawn from their own stream, so that a scenario's sizes (its epochs, the
partition's checks) are known without generating the data.
"""

from __future__ import annotations

import numpy as np

from .._keys import KeyTag, host_rng
from ._specs import SyntheticFed

__all__ = ["make_synthetic_fed", "synthetic_fed_sizes"]

COVARIANCE_POWER = -1.2
"""Sigma_jj = j ** COVARIANCE_POWER, j = 1..d (the paper's input covariance)."""


def _seed(spec: SyntheticFed, seed: int) -> int:
    return seed if spec.data_seed is None else spec.data_seed


def synthetic_fed_sizes(spec: SyntheticFed, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each device's ``(training, test)`` sample counts (int64 ``[devices]`` each), drawn from
    their own stream: the data need not be generated to know them."""
    rng = host_rng(_seed(spec, seed), KeyTag.FED_SIZES)
    draws = rng.lognormal(spec.samples_log_mean, spec.samples_log_sigma, spec.devices)
    total = np.floor(np.minimum(draws, 2.0**40)).astype(np.int64) + spec.min_samples
    # Every device keeps at least one training and one test sample (min_samples >= 2).
    test = np.clip(np.round(total * spec.test_fraction).astype(np.int64), 1, total - 1)
    return total - test, test


def make_synthetic_fed(spec: SyntheticFed, seed: int):
    """The data set: ``(x_train, y_train, groups_train, x_test, y_test, groups_test)``, inputs
    float32 ``[N, dim]``, labels int32, groups (each example's device) int32; training
    examples grouped by device in device order, as are the test examples."""
    n_train, n_test = synthetic_fed_sizes(spec, seed)
    rng = host_rng(_seed(spec, seed), KeyTag.FED_DATA)
    k, d, c = spec.devices, spec.dim, spec.classes
    u = rng.normal(0.0, spec.alpha, k)
    b_dev = rng.normal(0.0, spec.beta, k)
    v = rng.normal(b_dev[:, None], 1.0, (k, d))
    scale = np.sqrt(np.arange(1, d + 1, dtype=np.float64) ** COVARIANCE_POWER)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for dev in range(k):  # devices are few next to their samples; each is vectorised
        w = rng.normal(u[dev], 1.0, (d, c))
        b = rng.normal(u[dev], 1.0, c)
        x = v[dev] + scale * rng.standard_normal((int(n_train[dev] + n_test[dev]), d))
        parts.append((x.astype(np.float32), np.argmax(x @ w + b, axis=1).astype(np.int32)))
    devices = np.arange(k, dtype=np.int32)
    train = [(x[:m], y[:m]) for (x, y), m in zip(parts, n_train, strict=True)]
    test = [(x[m:], y[m:]) for (x, y), m in zip(parts, n_train, strict=True)]
    return (
        np.concatenate([x for x, _ in train]),
        np.concatenate([y for _, y in train]),
        np.repeat(devices, n_train),
        np.concatenate([x for x, _ in test]),
        np.concatenate([y for _, y in test]),
        np.repeat(devices, n_test),
    )
