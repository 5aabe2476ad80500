"""Per-worker mini-batch streams: which training examples worker w's step s reads (keyed
permutations evaluated in O(batch)), and the ``Batch`` value a step yields.

No re-exports: the names are exported by ``gemsim.problems``."""
