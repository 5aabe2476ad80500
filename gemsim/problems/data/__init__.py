"""Data sets: their specs (no JAX), where their files live and how they are downloaded,
their formats (IDX, CIFAR-10's batches, ``.npz``, text), the generated ones, and loading
each into arrays with its fixed split.

No re-exports: the names are exported by ``gemsim.problems``."""
