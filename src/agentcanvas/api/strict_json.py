"""The API's JSON responses: strict JSON, like everything else we print or serve."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from agentcanvas import jsontext


class StrictJSONResponse(JSONResponse):
    """A JSON body without NaN/Infinity (written as null), never a 500 for one."""

    def render(self, content: Any) -> bytes:
        return jsontext.dumps(content, ensure_ascii=False, compact=True).encode("utf-8")
