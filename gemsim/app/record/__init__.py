"""A run's record, built in one pass from what the run produced: its identity, its manifest (final
metrics, provenance), its frames (metrics, per-worker tables, a population's tasks).

Modules here are private; `gemsim.app` is the face.
"""
