"""`python -m crank.cli`: the `crank` command (the tests start servers this way)."""

from crank.cli import main

main()
