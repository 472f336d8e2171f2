"""``agentcanvas export RUN``: a run's episodes as a CSV or parquet file (one row each).

The run is read from the workspace's run folders (``AGENTCANVAS_HOME``, else the current
directory), also while it runs; no backend is needed. See :mod:`agentcanvas.export`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentcanvas.cli_common import command
from agentcanvas.export import FORMATS, export_run


@command("export")
def cmd_export(args: argparse.Namespace) -> int:
    if args.output == "-":
        output = None
    elif args.output:
        output = Path(args.output)
    else:
        output = Path(f"{args.run_id}_episodes.{args.format}")
    written, count = export_run(args.run_id, args.format, output)
    if written is not None:
        print(f"wrote {count} episode row(s) of run {args.run_id} to {written}", file=sys.stderr)
    return 0


def extend_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="write a run's episodes (one row each) as CSV or parquet")
    p.add_argument("run_id", metavar="RUN", help="run id (a folder of outputs/eval_runs)")
    p.add_argument("--format", choices=FORMATS, default="csv", help="csv (default) or parquet")
    p.add_argument(
        "--output",
        "-o",
        metavar="PATH",
        help="file to write (default RUN_episodes.FORMAT in the current directory; "
        "'-' writes CSV to stdout)",
    )
