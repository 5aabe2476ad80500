"""The verbs of the command line, one module each: `trace`, `run` (one run, and a whole sweep),
`replay`, `calibrate`, `validate`, `plot`, `show`, `ls`, `schema`, `download`.

Modules here are private; `gemsim.app` is the face.
"""
