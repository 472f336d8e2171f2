"""The ``agentcanvas`` command line (the console script ``agentcanvas.cli:main``).

One table of commands (``cli.commands.COMMANDS``), each a :class:`~agentcanvas.cli.command.
Command` holding its parser and its handler; options shared by several commands are declared
once (``cli.options``), and the run options of ``eval`` and ``submit`` are derived from
``EvalConfig`` (``cli.run_options``).
"""

from agentcanvas.cli.app import main

__all__ = ["main"]
