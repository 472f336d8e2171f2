"""``agentcanvas``'s entry point: parse with the command table, run the handler, and turn
every error into its exit code (a message on stderr, never a traceback)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from agentcanvas import envsettings, exit_codes
from agentcanvas.cli.command import build_parser
from agentcanvas.cli.commands import COMMANDS
from agentcanvas.errors import AgentCanvasError, UserInputError

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentcanvas`` console script."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        envsettings.check_all()  # a bad AGENTCANVAS_* setting: exit 1 naming it, up front
        words = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(COMMANDS).parse_args(words)
        args.argv = words  # the command line, to say how to run it again
        code: int = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except AgentCanvasError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_codes.RUN_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return exit_codes.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly. Later writes, including the flush
        # at exit, go to /dev/null instead of printing a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return exit_codes.BROKEN_PIPE
