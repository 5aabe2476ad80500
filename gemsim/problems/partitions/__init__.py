"""Partitions of a training set among workers: the specs, the drawing of each kind (IID,
Dirichlet, classes, quantity, a user's file, natural groups, sampled shards), the tie between
speed and data, and the summaries.

No re-exports: the names are exported by ``gemsim.problems``."""
