"""Options several commands take, declared once: ``--json``, ``--url`` and the run's meta.

``--url`` defaults to the ``AGENTCANVAS_URL`` environment variable, else
:data:`DEFAULT_URL`, for every command that talks to a backend.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Final

from agentcanvas.errors import ConfigError
from agentcanvas.eval.run_meta import RunMeta, meta_from_flags

__all__ = [
    "DEFAULT_URL",
    "URL_ENV",
    "add_json",
    "add_meta",
    "add_url",
    "backend_url",
    "meta_of",
    "url_of",
]

URL_ENV: Final = "AGENTCANVAS_URL"
DEFAULT_URL: Final = "http://127.0.0.1:8765"
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` as strict JSON on stdout (for scripts) instead of text."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout")


def backend_url(text: str | None = None, source: str = "--url") -> str:
    """``text`` (else ``$AGENTCANVAS_URL``, else the default) checked as an http(s) URL;
    ConfigError naming where it came from."""
    if text is None:
        env = (os.environ.get(URL_ENV) or "").strip()
        text, source = (env, URL_ENV) if env else (DEFAULT_URL, "default")
    if not _URL.match(text):
        raise ConfigError(
            f"{source}: {text!r} is not a backend URL; give e.g. {DEFAULT_URL} "
            "(http:// or https://, a host and an optional port)"
        )
    return text.rstrip("/")


def add_url(parser: argparse.ArgumentParser) -> None:
    """``--url``: the backend to talk to (default: ``$AGENTCANVAS_URL``, else the default)."""
    parser.add_argument(
        "--url",
        type=backend_url,
        default=None,
        help=f"backend URL (default: ${URL_ENV}, else {DEFAULT_URL})",
    )


def add_meta(parser: argparse.ArgumentParser) -> None:
    """``--name``, ``--tag`` (repeatable) and ``--note``: what tells this run apart."""
    group = parser.add_argument_group("what tells this run apart (meta.json; editable later)")
    group.add_argument("--name", help="a short name for the run, shown in the runs list")
    group.add_argument(
        "--tag", action="append", dest="tags", metavar="TAG", help="a tag (repeatable)"
    )
    group.add_argument("--note", help="free text about the run (why, what changed)")


def meta_of(args: argparse.Namespace) -> RunMeta:
    """The run's meta from ``--name/--tag/--note``; ConfigError naming the flag."""
    return meta_from_flags(args.name, args.tags, args.note)


def url_of(args: argparse.Namespace) -> str:
    """The backend URL a command talks to: ``--url``, else ``$AGENTCANVAS_URL``, else the
    default (read when the command runs, so a test or a shell can set it late)."""
    url: str | None = args.url
    return url if url is not None else backend_url()
