"""Models: their specs (no JAX), the built-in networks (CNN, MLP, logistic regression,
ResNet, transformer) with the parameter layouts ``gemsim trace`` counts without building
them, and the user's models (by import path, or written with Flax or Equinox).

No re-exports: the names are exported by ``gemsim.problems``."""
