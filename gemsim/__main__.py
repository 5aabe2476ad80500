"""`python -m gemsim`: the same command as `gemsim`."""

from gemsim.cli import main

main()
