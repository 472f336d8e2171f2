"""The backend as the CLI calls it: one request, its errors turned into messages that name
the URL or the backend's answer (exit 1), never a traceback."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx

from agentcanvas.errors import UserInputError
from agentcanvas.eval.run_lookup import is_run_id, pick_run

__all__ = ["REQUEST_TIMEOUT_S", "Backend"]

REQUEST_TIMEOUT_S = 30.0
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
    ) -> Any:
        """The JSON answer of one request; UserInputError when no backend answers or it
        refuses (its status and detail)."""
        try:
            with httpx.Client(
                base_url=self.url, timeout=self.timeout_s, headers=self.headers
            ) as client:
                response = client.request(method, path, json=json, params=params)
        except httpx.TransportError as exc:
            raise UserInputError(
                f"--url {self.url}: no backend answers ({type(exc).__name__}); "
                "start one with `agentcanvas serve`"
            ) from exc
        return answer(response)

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
