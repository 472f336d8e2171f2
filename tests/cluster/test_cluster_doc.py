"""docs/cluster.md names only routes the backend has (each with its method)."""

from __future__ import annotations

import re
from pathlib import Path

from agentcanvas.api.app import create_app
from support.ray_recipe import DOC

METHOD_ROUTE = re.compile(r"\b(GET|POST|PATCH|PUT|DELETE) (/[^\s`)\"]*)")
API_ROUTE = re.compile(r"/api/[A-Za-z0-9_/{}.-]*[A-Za-z0-9_}]")


def test_every_route_the_page_names_exists(tmp_path: Path) -> None:
    paths = create_app(tmp_path, "http://127.0.0.1:1").openapi()["paths"]
    text = DOC.read_text("utf-8")
    named = set(API_ROUTE.findall(text))
    assert {"/api/eval/v2/start", "/api/eval/v2/queue", "/api/eval/v2/cancel/{run_id}"} <= named
    assert sorted(named - set(paths)) == []
    with_method = METHOD_ROUTE.findall(text)
    assert with_method
    for method, route in with_method:
        assert route in paths and method.lower() in paths[route], f"{method} {route}"
