"""Where a sweep's work runs: its units, which runs execute together, job processes on this
machine and Ray tasks, the trace store and the traces simulated ahead, and the run folders
written in the background.

Modules here are private; `gemsim.app` is the face.
"""
