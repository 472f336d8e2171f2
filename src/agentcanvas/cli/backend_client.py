"""The backend as the CLI calls it: one request, its errors turned into messages that name
the URL or the backend's answer (exit 1), never a traceback.

A request that may be sent again (``retry_waits_s``) is, when it gets no answer (no
connection, a timeout, a connection dropped mid-request), the same bytes with the same
headers: ``submit`` sends an ``Idempotency-Key``, so a backend that did queue the first
attempt answers the retry with that run, not a second one (a backend that does not know the
header queues whatever reaches it, as before).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agentcanvas.errors import UserInputError
from agentcanvas.eval.run_lookup import is_run_id, pick_run

__all__ = ["REQUEST_TIMEOUT_S", "RETRY_WAITS_S", "Backend"]

REQUEST_TIMEOUT_S = 30.0
RETRY_WAITS_S = (0.5, 1.0, 2.0)
"""Waits before the 2nd, 3rd and 4th attempt of a request that may be sent again."""
RUNS = "/api/eval/v2/runs"
PAGE = 500  # the listing's largest page
MAX_QUERY = 200  # the listing's longest ``q``; a longer text names no run


class Backend:
    """An ``agentcanvas serve`` at ``url`` (``AGENTCANVAS_TOKEN`` sent when set)."""

    def __init__(self, url: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        token = os.environ.get("AGENTCANVAS_TOKEN")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        retry_waits_s: Sequence[float] = (),
    ) -> Any:
        """The JSON answer of one request; UserInputError when no backend answers (after
        one more attempt per ``retry_waits_s``) or it refuses (its status and detail)."""
        sent = {**self.headers, **(headers or {})}
        attempts = 1 + len(retry_waits_s)
        for attempt, wait_s in enumerate((0.0, *retry_waits_s), start=1):
            time.sleep(wait_s)
            try:
                with httpx.Client(base_url=self.url, timeout=self.timeout_s) as client:
                    response = client.request(method, path, json=json, params=params, headers=sent)
            except httpx.TransportError as exc:
                if attempt == attempts:
                    raise UserInputError(
                        f"--url {self.url}: no backend answers ({type(exc).__name__}"
                        + (f", {attempts} attempts" if attempts > 1 else "")
                        + "); start one with `agentcanvas serve`"
                    ) from exc
                print(
                    f"{method} {path}: no answer ({type(exc).__name__}); sending it again "
                    f"(attempt {attempt + 1} of {attempts})",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            return answer(response)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def find_run(self, ref: str) -> tuple[str, str | None]:
        """The id and name of the run ``ref`` names (an id or a name, see
        :mod:`agentcanvas.eval.run_lookup`), from the backend's listing. An id the listing
        does not show is passed on as it is (the route that takes it answers 404)."""
        rows = self._listed(ref) if len(ref) <= MAX_QUERY else []
        for row in rows:
            if row.get("run_id") == ref:
                return ref, row.get("name")
        if is_run_id(ref):
            return ref, None
        run_id = pick_run(ref, rows, f"the backend at {self.url}", "RUN")
        return run_id, ref

    def _listed(self, text: str) -> list[dict[str, Any]]:
        """Every listed run whose name, tags, note, id or graph holds the words of ``text``."""
        rows: list[dict[str, Any]] = []
        while True:
            params = {"q": text, "limit": PAGE, "offset": len(rows)}
            page = self.call("GET", RUNS, params=params)
            rows += page["runs"]
            if not page["runs"] or len(rows) >= page["total"]:
                return rows


def answer(response: httpx.Response) -> Any:
    """The response's JSON; UserInputError with the backend's detail for a 4xx/5xx."""
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        detail = body.get("detail", response.text) if isinstance(body, dict) else response.text
        raise UserInputError(f"backend answered {response.status_code}: {detail}")
    try:
        return response.json()
    except ValueError as exc:
        raise UserInputError(
            f"backend answered {response.status_code} with no JSON: {response.text[:200]!r}"
        ) from exc
