"""`python -m gemsim`: the same command as `gemsim`."""

from gemsim.cli import app

app(prog_name="gemsim")
