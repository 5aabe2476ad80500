"""Model modules the tests write outside the repository, and the data they train on."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import numpy as np

_names = itertools.count()

LINEAR = '''
import jax
import jax.numpy as jnp
import numpy as np


def make(dim=3, with_data=False, seed=0):
    """Linear regression: loss 0.5 * mean((x w + b - y)^2)."""

    def init(key):
        w = 0.1 * jax.random.normal(key, (dim,), jnp.float32)
        return {"w": w, "b": jnp.zeros((), jnp.float32)}

    def loss(params, x, y, key):
        return 0.5 * jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    class Model:
        pass

    model = Model()
    model.init, model.loss = init, loss
    if not with_data:
        return model
    x, y = regression_data(dim, seed)
    return model, {"x_train": x[:80], "y_train": y[:80], "x_test": x[80:], "y_test": y[80:]}


def regression_data(dim, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((100, dim)).astype(np.float32)
    y = (x @ np.arange(1, dim + 1) + 0.5 + 0.1 * rng.standard_normal(100)).astype(np.float32)
    return x, y


def softmax(n_inputs=4, n_classes=3):
    """Softmax regression with predict (accuracy) and eval_loss."""

    def init(key):
        return {"w": jnp.zeros((n_inputs, n_classes), jnp.float32)}

    def logits(params, x):
        return x.reshape(x.shape[0], -1) @ params["w"]

    def eval_loss(params, x, y):
        log_p = jax.nn.log_softmax(logits(params, x))
        return -jnp.mean(jnp.take_along_axis(log_p, y[:, None], axis=1))

    class Model:
        pass

    model = Model()
    model.init = init
    model.loss = lambda params, x, y, key: eval_loss(params, x, y)
    model.predict = logits
    model.eval_loss = eval_loss
    return model


def raises(**kwargs):
    raise RuntimeError("the factory broke")


def int_params():
    model = make()
    model.init = lambda key: {"w": jnp.zeros((3,), jnp.int32)}
    return model


def vector_loss():
    model = make()
    model.loss = lambda params, x, y, key: x @ params["w"]
    return model


def no_loss():
    class Model:
        def init(self, key):
            return {"w": jnp.zeros(3)}
    return Model()


NOT_CALLABLE = 3
'''


def write_module(folder: Path, source: str = LINEAR) -> str:
    """Writes ``source`` as a uniquely named module in ``folder``; returns its name (modules
    stay imported for the session, so every test gets its own)."""
    name = f"user_model_{next(_names)}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return name


def regression_arrays(dim: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((100, dim)).astype(np.float32)
    y = (x @ np.arange(1, dim + 1) + 0.5 + 0.1 * rng.standard_normal(100)).astype(np.float32)
    return {"x_train": x[:80], "y_train": y[:80], "x_test": x[80:], "y_test": y[80:]}


def classification_arrays(n_inputs: int = 4, n_classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((120, n_inputs)).astype(np.float32)
    y = np.argmax(x[:, :n_classes], axis=1).astype(np.int64)
    return {"x_train": x[:90], "y_train": y[:90], "x_test": x[90:], "y_test": y[90:]}
