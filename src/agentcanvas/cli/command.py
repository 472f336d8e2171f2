"""One command of ``agentcanvas``: its parser and its handler, side by side.

Every command is a :class:`Command` in the one table (``cli.commands.COMMANDS``), from which
:func:`build_parser` makes the argparse tree: its one-line summary, its arguments, its
examples and, for the commands whose exit codes the table describes, the exit-code table.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from agentcanvas import __version__, exit_codes
from agentcanvas.errors import UserInputError

__all__ = ["Command", "Handler", "HelpFormatter", "Parser", "build_parser"]

Handler = Callable[[argparse.Namespace], int]
"""A command's handler: the parsed arguments in, the process's exit code out."""


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command without arguments of its own."""


@dataclass(frozen=True)
class Command:
    """``agentcanvas NAME``: what it does, its arguments, its handler and its help."""

    name: str
    summary: str
    """One line for the list of commands (``agentcanvas --help``)."""
    run: Handler
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    examples: tuple[str, ...] = ()
    """Command lines shown under ``examples:`` in the command's help."""
    exit_codes: str | None = None
    """The command's name in the exit-code table (e.g. ``submit --follow``), when its exit
    codes are the table's; None: 0 on success, 1 on bad input, like every command."""
    description: str = ""
    """Text at the top of the command's help (default: the summary)."""

    def epilog(self) -> str:
        parts = []
        if self.examples:
            lines = "\n".join(f"  agentcanvas {example}" for example in self.examples)
            parts.append(f"examples:\n{lines}")
        if self.exit_codes is not None:
            parts.append(exit_codes.epilog(self.exit_codes))
        return "\n\n".join(parts)


class Parser(argparse.ArgumentParser):
    """Usage errors exit 1 with a message, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        raise UserInputError(f"{self.prog}: {message} (see --help)")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (examples, tables); options' help wrapped."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


TOP_DESCRIPTION = """\
AgentCanvas Batch Eval: run an agent graph over many episodes on N workers, with the same
scores at any N. Bad input exits 1 with a message, never a traceback.

Run `agentcanvas COMMAND --help` for a command's options and examples."""


def _filled(text: str, width: int = 88) -> str:
    """``text``'s paragraphs wrapped (the formatter keeps descriptions as written)."""
    return "\n\n".join(textwrap.fill(part, width) for part in text.split("\n\n"))


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    """The ``agentcanvas`` parser: one sub-parser per command of ``commands``."""
    parser = Parser(
        prog="agentcanvas",
        description=TOP_DESCRIPTION,
        epilog=exit_codes.epilog(None),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"agentcanvas {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        p = sub.add_parser(
            command.name,
            help=command.summary,
            description=_filled(command.description or command.summary),
            epilog=command.epilog() or None,
            formatter_class=HelpFormatter,
        )
        command.arguments(p)
        p.set_defaults(handler=command.run)
    return parser
