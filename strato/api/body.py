"""Reading request bodies: JSON only, validated by a pydantic model, 400 naming the field."""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from annotated_types import MaxLen
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from strato.api.middleware import read_body, replay_body
from strato.api.responses import REQUEST_ID_KEY, error_response
from strato.model import errors

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def unsupported_media(media: str) -> str:
    return f"The media type {media or 'None'} is not supported, use application/json"


async def json_bytes(request: Request) -> bytes:
    """The request's body; 415 without a JSON content type, 400 if empty."""
    ctype = request.headers.get("content-type", "")
    media = ctype.split(";")[0].strip().lower()
    if media != "application/json":
        raise errors.UnsupportedMediaType(unsupported_media(media))
    raw = await request.body()
    if not raw:
        raise errors.BadRequest("Malformed JSON: the request body is empty")
    return raw


def loads(raw: bytes) -> Any:
    """The JSON document `raw`; 400 if malformed, or if a string in it holds a
    NUL character (`nul_fault`)."""
    try:
        doc = _exact(raw) if _LONG in raw.translate(_DIGITS) else orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise errors.BadRequest(f"Malformed JSON: {exc}") from None
    if _NUL in raw:
        fault = nul_fault(doc)
        if fault is not None:
            raise errors.BadRequest(fault)
    return doc


def integral_numbers(doc: Any) -> int:
    """Makes every integral float (1.0, 1e3) in the objects and arrays of
    `doc` an int, in place; how many there were. Placement validates with
    jsonschema's latest draft, for which such a number is an integer (a total
    of 8.0 is a total of 8; 1.5 is no integer)."""
    if not isinstance(doc, (dict, list)):
        return 0
    changed = 0
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, float):
                if value.is_integer():
                    node[key] = int(value)
                    changed += 1
            elif isinstance(value, (dict, list)):
                stack.append(value)
    return changed


# Digits enough for an integer past 2**64 - 1 or below -2**63, which orjson
# reads as a float (or refuses as infinite): 18446744073709551617 was "not of
# type 'integer'" and 10**400 was malformed, where Placement (Python's json)
# reads integers and names the maximum they are above. Looked for as 19
# zeros once every digit is one (a regular expression took 0.13 s on 16 MiB,
# this 0.02 s); a body that has them in a string is read the slower way.
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG = b"0" * 19


def _exact(raw: bytes) -> Any:
    """`raw` read by Python's json, which keeps every integer exact; refused
    as orjson refuses them: NaN and Infinity, a lone surrogate."""
    try:
        doc = json.loads(raw, parse_constant=_refuse, parse_float=_finite)
        if _SURROGATE.search(raw):
            # A lone surrogate is no text (orjson: not UTF-8); a pair is one
            # character by now, and encodes.
            json.dumps(doc, ensure_ascii=False).encode()
    except _NonFinite as exc:
        raise errors.BadRequest(exc.detail) from None
    except (ValueError, RecursionError) as exc:
        # ValueError: malformed, or an integer of more digits than Python
        # reads, or a lone surrogate (UnicodeEncodeError).
        raise errors.BadRequest(f"Malformed JSON: {exc}") from None
    return doc


_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


# How JSON writes a NUL character (a raw one is malformed JSON): a body
# without it has none, and is not walked.
_NUL = b"\\u0000"


def nul_fault(doc: Any) -> str | None:
    """A 400's detail naming the first string (a value or a key) of the JSON
    document `doc` that holds a NUL character, or None. PostgreSQL's text
    cannot hold one (the write was a 400 naming no field) and SQLite's stored
    it: no field takes one, on either."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return _nul_detail(node, path)
        elif isinstance(node, dict):
            for key in node:
                if "\x00" in key:
                    return _nul_detail(key, path, key=True)
            stack.extend(((*path, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*path, str(i)), v) for i, v in reversed(list(enumerate(node))))
    return None


def _nul_detail(text: str, path: tuple[str, ...], *, key: bool = False) -> str:
    where = ".".join(path) or "body"
    return (f"JSON does not validate: {shown(text)} holds a NUL character, which no text "
            f"may ({'a key ' if key else ''}at {where})")


async def read_json(request: Request) -> Any:
    """The request's JSON document; 415 without a JSON content type, 400 if malformed."""
    return loads(await json_bytes(request))


async def read_json_later(request: Request) -> Callable[[], Any]:
    """As `read_json`, but a malformed (or empty) document's 400 is raised
    only when the returned function is called: Placement looks a provider up
    (its 404) before it reads the body. A media type it refuses is the 415 at
    once, as Placement's decorator answers before the handler."""
    try:
        doc = loads(await json_bytes(request))
    except errors.BadRequest as exc:
        fault = exc

        def refuse() -> Any:
            raise fault
        return refuse
    return lambda: doc


# A body this big or bigger is parsed and checked in a worker thread: a 9 MiB
# POST /allocations took 0.4 s to parse and as long to validate, and the
# event loop, which answers every other request, waited for both. (The parse
# holds the GIL wherever it runs; validation, a call per consumer, lets the
# loop in between.)
OFF_LOOP_FROM = 64 * 1024


async def read_checked(request: Request, check: Callable[[Any], T]) -> T:
    """`check` of the request's JSON document (`read_json`), off the event
    loop for a big body."""
    raw = await json_bytes(request)
    if len(raw) < OFF_LOOP_FROM:
        return check(loads(raw))
    return await run_in_threadpool(lambda: check(loads(raw)))


class _NonFinite(Exception):
    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _refuse(token: str) -> float:
    raise _NonFinite(f"Malformed JSON: {token} is not a JSON value (numbers are finite)")


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent, unless it is past the
    largest float (1e400: Python's parser makes it infinity, orjson refuses it)."""
    value = float(text)
    if math.isinf(value):
        raise _NonFinite(f"Malformed JSON: {shown(text)} is past the largest number "
                         "(numbers are finite)")
    return value


# Where a number may be past the largest float: a three-digit exponent, or
# 300 digits in a row (looked for once every digit is a 0, as `_LONG`).
_HUGE = (b"e000", b"E000", b"e+000", b"E+000", b"0" * 300)


def non_finite(raw: bytes) -> str | None:
    """A 400's detail for the first bare NaN, Infinity or -Infinity of the
    JSON document `raw` (not JSON, RFC 8259, though Python's parser and
    pydantic's take them) or number past the largest float (1e400, which
    they read as infinity), or None. Only a body that may hold one is parsed
    (again) to tell a token from a string that holds its letters."""
    digits = raw.translate(_DIGITS)
    if (b"NaN" not in raw and b"Infinity" not in raw
            and not any(huge in digits for huge in _HUGE)):
        return None
    try:
        json.loads(raw, parse_constant=_refuse, parse_float=_finite)
    except _NonFinite as exc:
        return exc.detail
    except (ValueError, RecursionError):
        return None  # malformed otherwise: the route says how
    return None


def _media(scope: Scope) -> str:
    raw = next((v for k, v in scope["headers"] if k.lower() == b"content-type"), b"")
    return raw.decode("latin-1").split(";")[0].strip().lower()


def _is_json(media: str) -> bool:
    """What FastAPI's routes read as JSON: no content type, or application/json or +json."""
    return not media or media == "application/json" or (
        media.startswith("application/") and media.endswith("+json"))


class StratoJson:
    """A /strato/v1 body with a bare NaN or Infinity, or a number past the
    largest float (1e400, read as infinity), is a 400 before any route reads
    it (FastAPI's routes parse with Python's json module, which takes them;
    range checks would catch most, worded as a range), and so is one
    with a NUL character in a string (`nul_fault`, as `loads` refuses it on
    the Placement routes). A body sent as another media type (`curl -d` sends
    a form's) is a 415 saying to send JSON, as on the Placement routes, not a
    400 about a missing object."""

    PREFIX = "/strato/v1/"

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH")
                or not scope["path"].startswith(self.PREFIX)):
            await self.app(scope, receive, send)
            return
        body, cut = await read_body(receive)
        media = _media(scope)
        fault = None if cut is not None else non_finite(body) or too_deep(body)
        nul = None if cut is not None or _NUL not in body else _nul_in(body)
        if body and cut is None and not _is_json(media):
            status, title, detail = 415, "Unsupported Media Type", unsupported_media(media)
        elif fault is not None:
            status, title, detail = 400, "Bad Request", fault
        elif nul is not None:
            status, title, detail = 400, "Bad Request", nul
        else:
            await self.app(scope, replay_body(body, receive, cut), send)
            return
        rid = scope.get(REQUEST_ID_KEY)
        accept = next((v.decode("latin-1") for k, v in scope["headers"]
                       if k.lower() == b"accept"), None)
        response = error_response(status, title, detail, errors.DEFAULT,
                                  rid if isinstance(rid, str) else None, accept=accept)
        await response(scope, receive, send)


# No /strato/v1 body nests half as deep (a schedule request: 5 levels).
MAX_DEPTH = 64


def too_deep(raw: bytes) -> str | None:
    """Why `raw` is refused if its arrays and objects nest deeper than
    MAX_DEPTH: FastAPI's parser runs out of stack near 1,000 levels and
    answers "There was an error parsing the body", saying nothing of why."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return None  # (cheap: most bodies stop here)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return f"Malformed JSON: {exc}" if "depth" in str(exc) else None  # else: the route
    level, todo = 0, [(doc, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            level = max(level, depth)
            if level > MAX_DEPTH:
                return (f"Malformed JSON: nested deeper than {MAX_DEPTH} levels (no request "
                        "is)")
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                 else item))
    return None


def _nul_in(raw: bytes) -> str | None:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None  # malformed: the route says how
    return nul_fault(doc)


def model_of(model: type[M], data: Any) -> M:
    """`data` (a JSON document) as `model`, strictly, or ValidationError; an
    integral float is an integer (`integral_numbers`), looked for only when
    the document does not validate as it is."""
    try:
        return model.model_validate(data, strict=True)
    except ValidationError:
        if not integral_numbers(data):
            raise
    return model.model_validate(data, strict=True)


def validate(model: type[M], data: Any) -> M:
    """`data` as `model`; a 400 whose detail names every offending field."""
    try:
        return model_of(model, data)
    except ValidationError as exc:
        raise errors.BadRequest("JSON does not validate: " + describe(exc)) from None


async def read_model(request: Request, model: type[M]) -> M:
    return await read_checked(request, lambda data: validate(model, data))


# The JSON Schema validator of the pydantic error types `_schema_message` does
# not word itself (Placement validates with jsonschema: its messages are what
# clients and tests look for).
_VALIDATORS = {"less_than": "exclusiveMaximum", "literal_error": "enum", "enum": "enum"}
_JSON_TYPES = {"int": "integer", "float": "number", "string": "string", "str": "string",
               "bool": "boolean", "list": "array", "dict": "object", "model": "object",
               "tuple": "array", "set": "array"}


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 200
_SHOWN.maxdict = _SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxset = 10
_SHOWN.maxlevel = 4
_SHOWN.maxlong = 5000  # an integer is shown whole (Python reads at most 4,300 digits)


def shown(value: Any) -> str:
    """`repr(value)` as an error names it, as jsonschema does, but at most a
    few hundred characters of a long string or a big object: a 10 MB name
    made a 10 MB 400 (a few such values, a multiple of the body)."""
    return _SHOWN.repr(value)


def _schema_message(e: Any) -> tuple[str, str]:
    """(message, validator) for one pydantic error, worded as jsonschema words it."""
    kind, ctx, value = e["type"], e.get("ctx") or {}, e.get("input")
    loc = e["loc"]
    if kind == "missing":
        return f"'{loc[-1] if loc else 'body'}' is a required property", "required"
    if kind == "extra_forbidden":
        return (f"Additional properties are not allowed ('{loc[-1]}' was unexpected)",
                "additionalProperties")
    if kind == "greater_than_equal":
        return f"{shown(value)} is less than the minimum of {ctx.get('ge')}", "minimum"
    if kind == "greater_than":
        return f"{shown(value)} is less than or equal to the minimum of {ctx.get('gt')}", \
            "exclusiveMinimum"
    if kind == "less_than_equal":
        return f"{shown(value)} is greater than the maximum of {ctx.get('le')}", "maximum"
    if kind == "string_too_short":
        return f"{shown(value)} is too short", "minLength"
    if kind == "string_too_long":
        return f"{shown(value)} is too long", "maxLength"
    if kind == "too_short":
        if isinstance(value, dict):
            return f"{shown(value)} does not have enough properties", "minProperties"
        return f"{shown(value)} is too short", "minItems"
    if kind == "too_long":
        if isinstance(value, dict):
            return f"{shown(value)} has too many properties", "maxProperties"
        return f"{shown(value)} is too long", "maxItems"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern"))
        if loc and loc[-1] == "[key]":  # a key of an object: patternProperties
            return (f"{shown(value)} does not match any of the regexes: {pattern!r}",
                    "additionalProperties")
        if "{8}-?" in pattern:  # the uuid pattern: a format in Placement's schemas
            return f"{shown(value)} is not a 'uuid'", "format"
        return f"{shown(value)} does not match {pattern!r}", "pattern"
    if kind in ("uuid_parsing", "uuid_type"):
        return f"{shown(value)} is not a 'uuid'", "format"
    base = kind.split("_")[0]
    if kind.endswith(("_type", "_parsing")) and base in _JSON_TYPES:
        return f"{shown(value)} is not of type '{_JSON_TYPES[base]}'", "type"
    if kind == "value_error":  # our own validators word it; drop pydantic's prefix
        message = str(e["msg"]).removeprefix("Value error, ")
        return message, "format" if message.endswith("is not a 'uuid'") else "value"
    return str(e["msg"]), _VALIDATORS.get(kind, kind)


# The most errors a 400 describes; the rest are counted. A 16 MiB body can hold
# a million faults: describing them all took seconds with the event loop held
# and answered with tens of megabytes.
MAX_DESCRIBED = 10


def first_errors(exc: ValidationError, n: int = MAX_DESCRIBED, *,
                 lean: bool = False) -> list[dict[str, Any]]:
    """The first `n` of `exc`'s errors (as `exc.errors()` gives them), without
    building the others: `errors()` makes Python objects of every one, holding
    the GIL; `json()` writes them all in pydantic's core, and only the first
    `n` are read back. `lean`: only `loc`, `msg` and `type` are wanted (not
    the input or the context)."""
    if exc.error_count() <= n:
        return [dict(e) for e in exc.errors(include_url=False)]
    try:
        text = exc.json(include_url=False, include_input=not lean,
                        include_context=not lean)
    except ValueError:
        # An input JSON cannot hold as UTF-8 (a lone surrogate, which the
        # standard library's parser lets through): the slow way, rare.
        return [dict(e) for e in exc.errors(include_url=False)[:n]]
    decoder, at = json.JSONDecoder(), 1
    out: list[dict[str, Any]] = []
    while len(out) < n:
        e, at = decoder.raw_decode(text, at)
        e["loc"] = tuple(e["loc"])
        out.append(e)
        at += 1  # the comma
    return out


def more_errors(total: int, shown: int) -> str:
    """`; and N more errors` for the errors not described, or ''."""
    rest = total - shown
    return f"; and {rest} more error{'s' if rest > 1 else ''}" if rest > 0 else ""


def describe(exc: ValidationError, where: str = "") -> str:
    """The first errors, worded as jsonschema (Placement) words them, then where
    each is: `0 is less than the minimum of 1 (at total; Failed validating
    'minimum' in schema['properties']['total'])`, and how many more there are.
    `where` prefixes the location (a consumer)."""
    parts = []
    errs = first_errors(exc)
    for e in errs:
        loc = ".".join(str(p) for p in e["loc"])
        loc = ".".join(p for p in (where, loc) if p) or "body"
        message, validator = _schema_message(e)
        # jsonschema names the schema's path: the object's for required and
        # additional properties, the property's for the rest.
        path = [p for p in e["loc"] if isinstance(p, str)]
        if validator in ("required", "additionalProperties"):
            path = path[:-1]
        schema = "schema" + "".join(f"['properties']['{p}']" for p in path)
        parts.append(f"{message} (at {loc}; Failed validating '{validator}' in {schema})")
    return "; ".join(parts) + more_errors(exc.error_count(), len(errs))


# Below this size a body is left to FastAPI (`bounded_faults`): ten thousand
# faults of a few bytes each, described in a few milliseconds.
FAULTS_CHECKED_FROM = 64 * 1024


def over_length(model: type[BaseModel], data: Any) -> str | None:
    """FastAPI's words for the first list or object field of `model` (at the
    top of the body `data`) longer than its max_length, or None. Pydantic
    validates every item before it counts them: 100,000 placements where
    1,000 may be held the event loop 1.5 s, to say so."""
    if not isinstance(data, dict):
        return None
    for name, field in model.model_fields.items():
        value = data.get(field.alias or name)
        if not isinstance(value, (list, dict)):
            continue
        most = next((m.max_length for m in field.metadata if isinstance(m, MaxLen)), None)
        if most is not None and len(value) > most:
            kind = "List" if isinstance(value, list) else "Dictionary"
            return (f"body.{field.alias or name}: {kind} should have at most {most} items "
                    f"after validation, not {len(value)}")
    return None


def bounded_faults(model: type[BaseModel]) -> Callable[[Request], Awaitable[None]]:
    """A dependency for a route that takes a `model` body through FastAPI: a
    body of more faults than a 400 describes is refused here, worded as the
    app words FastAPI's errors (`body.field: message`), before FastAPI makes a
    Python object of every fault (dependencies run before the body is
    validated). A body of fewer faults is FastAPI's to refuse, as before.

    Only a body of FAULTS_CHECKED_FROM bytes or more is looked at: a smaller
    one cannot hold enough faults to matter, and every valid body would
    otherwise be parsed and validated twice."""
    async def check(request: Request) -> None:
        if len(await request.body()) < FAULTS_CHECKED_FROM:
            return
        try:
            data = await request.json()
        except (ValueError, RecursionError):
            return  # not JSON: FastAPI says so
        too_long = over_length(model, data)
        if too_long is not None:
            raise errors.BadRequest(too_long)
        try:
            model.model_validate(data)
        except ValidationError as exc:
            if exc.error_count() <= MAX_DESCRIBED:
                return
            errs = first_errors(exc, lean=True)
            raise errors.BadRequest("; ".join(
                f"{'.'.join(str(p) for p in ('body', *e['loc']))}: {e['msg']}" for e in errs)
                + more_errors(exc.error_count(), len(errs))) from None
    return check
