"""Reading request bodies: JSON only, validated by a pydantic model, 400 naming the field."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from strato.model import errors

M = TypeVar("M", bound=BaseModel)


async def read_json(request: Request) -> Any:
    """The request's JSON document; 415 without a JSON content type, 400 if malformed."""
    ctype = request.headers.get("content-type", "")
    media = ctype.split(";")[0].strip().lower()
    if media != "application/json":
        shown = media or "None"
        raise errors.UnsupportedMediaType(
            f"The media type {shown} is not supported, use application/json")
    raw = await request.body()
    if not raw:
        raise errors.BadRequest("Malformed JSON: the request body is empty")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.BadRequest(f"Malformed JSON: {exc}") from None


def validate(model: type[M], data: Any) -> M:
    """`data` as `model`; a 400 whose detail names every offending field."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError as exc:
        raise errors.BadRequest("JSON does not validate: " + describe(exc)) from None


async def read_model(request: Request, model: type[M]) -> M:
    return validate(model, await read_json(request))


def describe(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "body"
        if e["type"] == "extra_forbidden":
            parts.append(f"{loc}: unknown field (Additional properties are not allowed)")
        elif e["type"] == "missing":
            parts.append(f"{loc}: is a required property")
        else:
            parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)
