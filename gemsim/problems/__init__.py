"""Problems: models (loss + init), data sets and per-worker mini-batch streams.

Build one with :func:`make_problem` from a model spec and a dataset spec::

    problem = make_problem(Cnn(), Mnist5k(), batch_size=64, seed=0)
    batch = problem.batch(worker, step)
    grads = jax.grad(problem.loss)(params, batch, batch.key)

Names are exported lazily: the specs and sizes (``Cnn``, ``data_shape``, ...) import no JAX,
so the timing side can ask a problem's size without paying for the rest.

The modules follow the stages of a problem: here the ``Problem`` value and its construction,
its sizes, its random streams and its three kinds (classifiers and user models, text, the
quadratic); ``models/`` (the specs and the networks), ``data/`` (the data-set specs, their
files, downloads and loaders), ``partitions/`` (which examples each worker holds) and
``streams/`` (which examples a worker's step reads).
"""

from gemsim._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        # the problem, its sizes and its random streams
        "._problem": ["Problem"],
        "._make": ["imported_sizes", "make_problem", "resolve_model"],
        "._sizes": ["DataShape", "data_shape", "param_count"],
        "._keys": ["KeyTag"],
        "._supervised": ["to_device"],
        "._quadratic": ["quadratic_curvature", "stationary_point", "worker_optima"],
        "._text": ["sample_text"],
        # models
        ".models._specs": [
            "Cnn",
            "Imported",
            "Logistic",
            "Mlp",
            "ModelSpec",
            "Quadratic",
            "Resnet",
            "Transformer",
        ],
        ".models._adapters": ["from_equinox", "from_flax_linen", "from_flax_nnx"],
        ".models._cnn": ["IM2COL", "ConvOps", "cnn_apply", "cnn_init"],
        ".models._model_imports": ["ModelError"],
        ".models._layers": ["Model", "cross_entropy"],
        ".models._transformer": ["lm_loss", "transformer_model"],
        ".models._user": ["UserModel", "as_user_model", "load_model"],
        # data sets
        ".data._specs": [
            "Arrays",
            "Cifar10",
            "DatasetSpec",
            "Digits",
            "FashionMnist",
            "Mnist",
            "Mnist5k",
            "Shakespeare",
            "Synthetic",
            "SyntheticFed",
            "Text",
        ],
        ".data._cifar": ["CIFAR10_MEAN", "CIFAR10_STD", "write_cifar_batch"],
        ".data._datasets": [
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
        ".data._download": [
            "DATASET_SOURCES",
            "MNIST_FILES",
            "MNIST_MIRRORS",
            "DataSource",
            "download_dataset",
            "download_mnist",
        ],
        ".data._idx": ["read_idx", "read_idx_shape", "write_idx"],
        ".data._npz": ["DataError", "check_arrays"],
        ".data._text_corpus": ["Corpus", "TextData", "format_text_partition", "read_corpus"],
        ".data._text_sources": ["HELD_OUT_PLAYS", "TextError", "text_sha256"],
        ".data._synthetic_fed": ["make_synthetic_fed", "synthetic_fed_sizes"],
        # partitions
        ".partitions._partitions": [
            "LABEL_SPECS",
            "BySpeed",
            "Claim",
            "ClassMode",
            "Classes",
            "DataSplit",
            "Dirichlet",
            "FromFile",
            "Groups",
            "IdSizes",
            "Iid",
            "InnerDirichlet",
            "LabelShards",
            "PartitionError",
            "PartitionSummary",
            "Pathological",
            "Quantity",
            "RoundRobin",
            "Shards",
            "SpeedData",
            "check_shards",
            "copula_spearman",
            "describe",
            "format_summary",
            "order_strength",
            "partition",
            "ranks_by_speed",
            "spearman",
            "speed_data",
            "split_shards",
        ],
        # streams
        ".streams._batch": ["Batch"],
        # shared with the rest of gemsim
        "gemsim._user_code": ["file_sha256", "locate_module", "module_digest"],
    },
)
