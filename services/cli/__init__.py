"""The `agent-memory` console script (`main`): the command line in `parser`, one
module per command group, `python -m services.cli` to run it."""

from services.cli.main import main

__all__ = ["main"]
