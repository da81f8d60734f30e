"""Parsing Placement's query-string mini-languages, shared by every list route.

`resources=VCPU:2,MEMORY_MB:512`, `required=A,!B,in:C,D`,
`member_of=in:agg1,agg2` / `member_of=!agg3`. Each parser returns plain
tuples and raises a 400 naming the parameter when the input is off.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable

from starlette.requests import Request

from strato.api.microversion import V1_22, V1_24, V1_32, V1_39, Version
from strato.model import errors


def check_params(request: Request, allowed: Iterable[str], *, prefixes: Iterable[str] = ()
                 ) -> None:
    """400 for a query parameter this route (at this version) does not take."""
    allowed_set = set(allowed)
    pre = tuple(prefixes)
    bad = sorted(k for k in request.query_params
                 if k not in allowed_set and not (pre and k.startswith(pre)))
    if bad:
        raise errors.BadRequest(
            "Invalid query string parameters: Additional properties are not allowed "
            f"({', '.join(repr(b) for b in bad)} {'was' if len(bad) == 1 else 'were'} "
            "unexpected)")


def single(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    return values[-1] if values else None


def is_uuid(value: str) -> bool:
    try:
        uuidlib.UUID(value)
    except (ValueError, AttributeError):
        return False
    return True


def is_uuid_like(value: object) -> bool:
    """oslo's is_uuid_like, Placement's JSON 'uuid' format: any spelling Python's
    UUID reads ("{...}", "urn:uuid:...", upper case, no dashes) that holds
    nothing else."""
    if not isinstance(value, str):
        return False
    try:
        canonical = str(uuidlib.UUID(value)).replace("-", "")
    except ValueError:
        return False
    bare = value.replace("urn:", "").replace("uuid:", "").strip("{}").replace("-", "")
    return canonical == bare.lower()


# The largest amount a query may ask: what a database integer holds.
MAX_AMOUNT = 2**63 - 1


def capped_int(digits: str, cap: int = MAX_AMOUNT) -> int:
    """The value of a string of ASCII digits, at most `cap` (a limit past any
    count is no limit): Python reads no more than 4,300 digits (a ValueError,
    which was a 500), and needs not read more than `cap` has."""
    return cap if len(digits) > len(str(cap)) else min(int(digits), cap)


def parse_resources(value: str, param: str = "resources") -> tuple[tuple[str, int], ...]:
    """(class, amount) pairs, checked and worded as Placement's util does (its messages
    name `resources` whatever the group suffix; a repeated class keeps its last amount)."""
    form = "Badly formed resources parameter. Expected resources query string parameter in " \
        "form: ?resources=VCPU:2,MEMORY_MB:1024. Got: "
    if not value.strip():
        raise errors.BadRequest(f"{form}empty string.")
    out: dict[str, int] = {}
    for item in value.split(","):
        parts = item.split(":")
        if len(parts) != 2 or not parts[0].strip():
            raise errors.BadRequest(f"{form}{item}.")
        # The class as written, spaces and all (Placement's util does not strip
        # it: " VCPU" is an unknown class); int() takes spaces round the amount.
        rc, amount = parts[0], parts[1]
        try:
            n = int(amount)
        except ValueError:
            raise errors.BadRequest(
                f"Requested resource {rc} expected positive integer amount. Got: {amount}."
            ) from None
        if n < 1:
            raise errors.BadRequest(f"Requested resource {rc} requires amount >= 1. Got: {n}.")
        if n > MAX_AMOUNT:
            raise errors.BadRequest(
                f"Invalid query string parameters: {param}: requested amount of {rc} is "
                f"larger than {MAX_AMOUNT}. Got: {n}.")
        out[rc] = n
    return tuple(out.items())


def parse_required(values: list[str], version: Version, param: str = "required", *,
                   any_of: bool = True) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """(required any-of groups, forbidden traits) from one or more `required` values,
    checked and worded as Placement's util does: names are stripped, any number of
    leading `!` forbids, and its messages name `required` whatever the parameter.
    `in:` is refused before 1.39 and where `any_of` is False (root_required)."""
    required: list[tuple[str, ...]] = []
    forbidden: list[str] = []
    for value in values:
        if value.startswith("in:"):
            if version < V1_39 or not any_of:
                raise errors.BadRequest(
                    "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,"
                    f"CUSTOM_MAGIC' only supported since microversion 1.39. Got: {value}")
            names = tuple(dict.fromkeys(n.strip() for n in value[3:].split(",")))
            if not all(names):
                raise errors.BadRequest(
                    "Invalid query string parameters: Expected 'required' parameter value "
                    f"of the form: in:HW_CPU_X86_VMX,CUSTOM_MAGIC. Got an empty trait in: "
                    f"{value}")
            if any(n.startswith("!") for n in names):
                raise errors.BadRequest(
                    "Invalid query string parameters: The format 'in:HW_CPU_X86_VMX,"
                    f"CUSTOM_MAGIC' does not support forbidden traits. Got: {value}")
            required.append(names)
            continue
        names = tuple(n.strip() for n in value.split(","))
        banned = [n.lstrip("!") for n in names if n.startswith("!")]
        if not all(names) or not all(banned):
            form = ("HW_CPU_X86_VMX,!CUSTOM_MAGIC" if version >= V1_22
                    else "HW_CPU_X86_VMX,CUSTOM_MAGIC")
            raise errors.BadRequest(
                "Invalid query string parameters: Expected 'required' parameter value of "
                f"the form: {form}. Got an empty trait in: {value}")
        if banned and version < V1_22:
            raise errors.BadRequest(
                "Invalid query string parameters: Expected 'required' parameter value of "
                f"the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {value}")
        required.extend((n,) for n in names if not n.startswith("!"))
        forbidden.extend(banned)
    return tuple(dict.fromkeys(required)), tuple(dict.fromkeys(forbidden))


def conflicting_traits(suffix: str, required: tuple[tuple[str, ...], ...],
                       forbidden: tuple[str, ...]) -> list[str]:
    """Placement's words for each any-of group that its forbidden traits rule out."""
    banned = set(forbidden)
    return [f"required{suffix}: ({', '.join(sorted(g))})" for g in required
            if all(n in banned for n in g)]


def parse_member_of(values: list[str], version: Version, param: str = "member_of"
                    ) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """(required any-of aggregate groups, forbidden aggregates), checked and worded as
    Placement's util does (its messages name `member_of` whatever the group suffix)."""
    if version < V1_24 and len(values) > 1:
        raise errors.BadRequest(f"Multiple {param} parameters are not supported in the "
                                "specified microversion")
    required: list[tuple[str, ...]] = []
    forbidden: list[str] = []
    for value in values:
        if "," in value and not value.startswith(("in:", "!in:")):
            raise errors.BadRequest(
                "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' "
                f"keyword using the valid microversion. Got: {value}")
        negative = value.startswith("!")
        body = value[1:] if negative else value
        uuids = body[3:].split(",") if body.startswith("in:") else [body]
        for u in uuids:
            if not is_uuid(u):
                raise errors.BadRequest(
                    "Invalid query string parameters: Expected 'member_of' parameter to "
                    f"contain valid UUID(s). Got: {u}")
        if negative:
            if version < V1_32:
                raise errors.BadRequest(
                    f"Forbidden {param} parameters are not supported in the specified "
                    "microversion")
            forbidden.extend(uuids)
        else:
            required.append(tuple(dict.fromkeys(uuids)))
    return tuple(required), tuple(dict.fromkeys(forbidden))
