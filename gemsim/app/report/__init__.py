"""What the verbs print: text rendering, strict JSON lines, progress bars, and the reports of
`gemsim trace` and `gemsim show` (the partition, the population, the speed deciles).

Modules here are private; `gemsim.app` is the face.
"""
