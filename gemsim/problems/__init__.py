"""Problems: models (loss + init), data sets and per-worker mini-batch streams.

Build one with :func:`make_problem` from a model spec and a dataset spec::

    problem = make_problem(Cnn(), Mnist5k(), batch_size=64, seed=0)
    batch = problem.batch(worker, step)
    grads = jax.grad(problem.loss)(params, batch, batch.key)
"""

from ._batch import Batch as Batch
from ._cnn import IM2COL as IM2COL
from ._cnn import ConvOps as ConvOps
from ._cnn import cnn_apply as cnn_apply
from ._cnn import cnn_init as cnn_init
from ._datasets import MNIST_MEAN as MNIST_MEAN
from ._datasets import MNIST_STD as MNIST_STD
from ._datasets import SPLIT_SEED as SPLIT_SEED
from ._datasets import Dataset as Dataset
from ._datasets import load_dataset as load_dataset
from ._download import MNIST_FILES as MNIST_FILES
from ._download import MNIST_MIRRORS as MNIST_MIRRORS
from ._download import download_mnist as download_mnist
from ._idx import read_idx as read_idx
from ._idx import write_idx as write_idx
from ._keys import KeyTag as KeyTag
from ._layers import Model as Model
from ._layers import cross_entropy as cross_entropy
from ._problem import Problem as Problem
from ._problem import make_problem as make_problem
from ._quadratic import quadratic_curvature as quadratic_curvature
from ._specs import Cnn as Cnn
from ._specs import DatasetSpec as DatasetSpec
from ._specs import Digits as Digits
from ._specs import Logistic as Logistic
from ._specs import Mlp as Mlp
from ._specs import Mnist as Mnist
from ._specs import Mnist5k as Mnist5k
from ._specs import ModelSpec as ModelSpec
from ._specs import Quadratic as Quadratic
from ._specs import Synthetic as Synthetic
