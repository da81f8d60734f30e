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


def parse_resources(value: str, param: str = "resources") -> tuple[tuple[str, int], ...]:
    if not value:
        raise errors.BadRequest(
            f"Badly formed {param} parameter. Expected {param} query string parameter in "
            f"form: ?{param}=VCPU:2,MEMORY_MB:1024. Got: empty string.",
            errors.QUERYPARAM_BAD_VALUE)
    out: dict[str, int] = {}
    for item in value.split(","):
        rc, sep, amount = item.partition(":")
        rc = rc.strip()
        if not sep or not rc:
            raise errors.BadRequest(
                f"Badly formed {param} parameter. Expected {param} query string parameter "
                f"in form: ?{param}=VCPU:2,MEMORY_MB:1024. Got: {value}.",
                errors.QUERYPARAM_BAD_VALUE)
        try:
            n = int(amount)
        except ValueError:
            n = -1
        if n < 1:
            raise errors.BadRequest(
                f"Requested resource {rc} expected positive integer amount. Got: {amount}.",
                errors.QUERYPARAM_BAD_VALUE)
        if rc in out:
            raise errors.BadRequest(
                f"Badly formed {param} parameter: resource class {rc} appears more than "
                "once.", errors.QUERYPARAM_BAD_VALUE)
        out[rc] = n
    return tuple(out.items())


def parse_required(values: list[str], version: Version, param: str = "required"
                   ) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """(required any-of groups, forbidden traits) from one or more `required` values."""
    # Placement's example of the form, with a forbidden trait once they exist.
    form = "HW_CPU_X86_VMX,!CUSTOM_MAGIC" if version >= V1_22 else "HW_CPU_X86_VMX,CUSTOM_MAGIC"
    required: list[tuple[str, ...]] = []
    forbidden: list[str] = []
    for value in values:
        if not value:
            raise errors.BadRequest(
                f"Invalid query string parameters: Expected '{param}' parameter value of the"
                f" form: {form}. Got an empty value.", errors.QUERYPARAM_BAD_VALUE)
        if value.startswith("in:"):
            if version < V1_39:
                raise errors.BadRequest(
                    f"The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since "
                    f"microversion 1.39. Got: {value}", errors.QUERYPARAM_BAD_VALUE)
            names = value[3:].split(",")
            if any(not n or n.startswith("!") for n in names):
                raise errors.BadRequest(
                    f"Invalid query string parameters: '{param}' in: list must contain "
                    f"trait names without '!'. Got: {value}", errors.QUERYPARAM_BAD_VALUE)
            required.append(tuple(names))
            continue
        for name in value.split(","):
            if not name:
                raise errors.BadRequest(
                    f"Invalid query string parameters: Expected '{param}' parameter value of"
                    f" the form: {form}. Got: {value}", errors.QUERYPARAM_BAD_VALUE)
            if name.startswith("!"):
                if version < V1_22:
                    raise errors.BadRequest(
                        f"Invalid query string parameters: Expected '{param}' parameter "
                        f"value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: {value}",
                        errors.QUERYPARAM_BAD_VALUE)
                forbidden.append(name[1:])
            else:
                required.append((name,))
    conflict = {n for g in required if len(g) == 1 for n in g} & set(forbidden)
    if conflict:
        raise errors.BadRequest(
            f"Conflicting required and forbidden traits found in the following traits: "
            f"{', '.join(sorted(conflict))}", errors.QUERYPARAM_BAD_VALUE)
    return tuple(required), tuple(dict.fromkeys(forbidden))


def parse_member_of(values: list[str], version: Version, param: str = "member_of"
                    ) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """(required any-of aggregate groups, forbidden aggregates)."""
    if version < V1_24 and len(values) > 1:
        raise errors.BadRequest(f"Multiple {param} parameters are not supported in the "
                                "specified microversion", errors.QUERYPARAM_BAD_VALUE)
    required: list[tuple[str, ...]] = []
    forbidden: list[str] = []
    for value in values:
        negative = value.startswith("!")
        if negative:
            if version < V1_32:
                raise errors.BadRequest(
                    f"Forbidden {param} parameters are not supported in the specified "
                    f"microversion. Invalid query string parameters: Expected '{param}' "
                    f"parameter to contain valid UUID(s). Got: {value}",
                    errors.QUERYPARAM_BAD_VALUE)
            value = value[1:]
            if value.startswith("!"):
                raise errors.BadRequest(
                    f"Invalid query string parameters: Expected '{param}' parameter to "
                    f"contain valid UUID(s). Got: !{value}", errors.QUERYPARAM_BAD_VALUE)
        body = value[3:] if value.startswith("in:") else value
        uuids = body.split(",")
        if not value.startswith("in:") and len(uuids) > 1:
            # Placement only accepts several uuids with the in: prefix.
            raise errors.BadRequest(
                f"Invalid query string parameters: Expected '{param}' parameter to contain "
                f"valid UUID(s). Got: {value}", errors.QUERYPARAM_BAD_VALUE)
        if not all(is_uuid(u) for u in uuids):
            raise errors.BadRequest(
                f"Invalid query string parameters: Expected '{param}' parameter to contain "
                f"valid UUID(s). Got: {value}", errors.QUERYPARAM_BAD_VALUE)
        if negative:
            forbidden.extend(uuids)
        else:
            required.append(tuple(uuids))
    return tuple(required), tuple(dict.fromkeys(forbidden))
