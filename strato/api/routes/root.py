"""GET /: the version document (no authentication needed)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from strato.api import microversion
from strato.api.responses import json_response

router = APIRouter()


@router.get("/", include_in_schema=False)
def get_root() -> Response:
    return json_response({
        "versions": [{
            "id": f"v{microversion.MIN_VERSION.major}.0",
            "max_version": str(microversion.MAX_VERSION),
            "min_version": str(microversion.MIN_VERSION),
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }]
    })
