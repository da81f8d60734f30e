"""GET /: the version document (no authentication needed)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from strato.api import microversion
from strato.api.responses import cache_headers, json_response

router = APIRouter()


@router.get("/", include_in_schema=False)
async def get_root(request: Request) -> Response:
    headers = (cache_headers(None)
               if microversion.version(request) >= microversion.Version(1, 15) else None)
    return json_response({
        "versions": [{
            "id": f"v{microversion.MIN_VERSION.major}.0",
            "max_version": str(microversion.MAX_VERSION),
            "min_version": str(microversion.MIN_VERSION),
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }]
    }, headers=headers)
