"""Problems: models (loss + init), data sets and per-worker mini-batch streams.

Build one with :func:`make_problem` from a model spec and a dataset spec::

    problem = make_problem(Cnn(), Mnist5k(), batch_size=64, seed=0)
    batch = problem.batch(worker, step)
    grads = jax.grad(problem.loss)(params, batch, batch.key)

Names are exported lazily: the specs and sizes (``Cnn``, ``data_shape``, ...) import no JAX,
so the timing side can ask a problem's size without paying for the rest.
"""

from gemsim._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "._batch": ["Batch"],
        "._cnn": ["IM2COL", "ConvOps", "cnn_apply", "cnn_init"],
        "._datasets": ["MNIST_MEAN", "MNIST_STD", "SPLIT_SEED", "Dataset", "load_dataset"],
        "._download": ["MNIST_FILES", "MNIST_MIRRORS", "download_mnist"],
        "._idx": ["read_idx", "read_idx_shape", "write_idx"],
        "._keys": ["KeyTag"],
        "._layers": ["Model", "cross_entropy"],
        "._problem": ["Problem", "make_problem"],
        "._quadratic": ["quadratic_curvature"],
        "._sizes": ["DataShape", "data_shape", "param_count"],
        "._specs": [
            "Cnn",
            "DatasetSpec",
            "Digits",
            "Logistic",
            "Mlp",
            "Mnist",
            "Mnist5k",
            "ModelSpec",
            "Quadratic",
            "Synthetic",
        ],
    },
)
