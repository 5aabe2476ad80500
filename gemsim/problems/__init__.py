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
        "._adapters": ["from_equinox", "from_flax_linen", "from_flax_nnx"],
        "._batch": ["Batch"],
        "._cnn": ["IM2COL", "ConvOps", "cnn_apply", "cnn_init"],
        "._cifar": ["CIFAR10_MEAN", "CIFAR10_STD", "write_cifar_batch"],
        "._datasets": [
            "FASHION_MEAN",
            "FASHION_STD",
            "MNIST_MEAN",
            "MNIST_STD",
            "SPLIT_SEED",
            "Dataset",
            "dataset_key",
            "load_dataset",
            "training_labels",
        ],
        "._download": [
            "DATASET_SOURCES",
            "MNIST_FILES",
            "MNIST_MIRRORS",
            "DataSource",
            "download_dataset",
            "download_mnist",
        ],
        "._idx": ["read_idx", "read_idx_shape", "write_idx"],
        "._model_imports": ["ModelError"],
        "gemsim._user_code": ["file_sha256", "locate_module", "module_digest"],
        "._keys": ["KeyTag"],
        "._layers": ["Model", "cross_entropy"],
        "._npz": ["DataError", "check_arrays"],
        "._partitions": [
            "Claim",
            "Classes",
            "DataSplit",
            "Dirichlet",
            "FromFile",
            "Groups",
            "Iid",
            "PartitionError",
            "PartitionSummary",
            "Quantity",
            "Shards",
            "check_shards",
            "describe",
            "format_summary",
            "partition",
            "split_shards",
        ],
        "._problem": ["Problem", "imported_sizes", "make_problem", "resolve_model"],
        "._quadratic": ["quadratic_curvature", "stationary_point", "worker_optima"],
        "._sizes": ["DataShape", "data_shape", "param_count"],
        "._specs": [
            "Arrays",
            "Cifar10",
            "Cnn",
            "DatasetSpec",
            "Digits",
            "FashionMnist",
            "Imported",
            "Logistic",
            "Mlp",
            "Mnist",
            "Mnist5k",
            "ModelSpec",
            "Quadratic",
            "Resnet",
            "Shakespeare",
            "Synthetic",
            "SyntheticFed",
            "Text",
            "Transformer",
        ],
        "._supervised": ["to_device"],
        "._text": ["sample_text"],
        "._text_corpus": [
            "HELD_OUT_PLAYS",
            "Corpus",
            "TextData",
            "TextError",
            "format_text_partition",
            "read_corpus",
        ],
        "._transformer": ["lm_loss", "transformer_model"],
        "._synthetic_fed": ["make_synthetic_fed", "synthetic_fed_sizes"],
        "._user": ["UserModel", "as_user_model", "load_model"],
    },
)
