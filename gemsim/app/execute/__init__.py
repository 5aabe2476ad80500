"""One run executed: the stages it needs built from its scenario (problem, rule, compiled
executor), a simulated or real run, several runs executed together, and the compiled programs
kept between invocations.

Modules here are private; `gemsim.app` is the face.
"""
