"""Placement microversions: the one place that knows the version history.

Clients send ``OpenStack-API-Version: placement 1.x`` (or ``latest``); no
header means the minimum version, as in Placement. Handlers ask
``version(request) >= V_1_xx`` only for the versions listed here.
"""

from __future__ import annotations

from typing import NamedTuple

from starlette.requests import Request

from strato.model import errors

SERVICE_TYPE = "placement"
HEADER = "openstack-api-version"


class Version(NamedTuple):
    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


def _v(s: str) -> Version:
    major, minor = s.split(".")
    return Version(int(major), int(minor))


# The canonical history, one line per version.
VERSIONS: tuple[tuple[str, str], ...] = (
    ("1.0", "initial resource provider, inventory, allocation and usage API"),
    ("1.1", "GET/PUT /resource_providers/{uuid}/aggregates"),
    ("1.2", "/resource_classes and custom resource classes"),
    ("1.3", "member_of on GET /resource_providers"),
    ("1.4", "resources on GET /resource_providers"),
    ("1.5", "DELETE /resource_providers/{uuid}/inventories"),
    ("1.6", "/traits and /resource_providers/{uuid}/traits"),
    ("1.7", "PUT /resource_classes/{name} creates without a body"),
    ("1.8", "project_id and user_id required on PUT /allocations"),
    ("1.9", "GET /usages"),
    ("1.10", "GET /allocation_candidates"),
    ("1.11", "'allocations' link in resource provider representation"),
    ("1.12", "dict form of allocations in PUT and in allocation_requests"),
    ("1.13", "POST /allocations for several consumers"),
    ("1.14", "nested providers: parent/root provider uuid, in_tree"),
    ("1.15", "last-modified and cache-control headers"),
    ("1.16", "limit on GET /allocation_candidates"),
    ("1.17", "required traits on GET /allocation_candidates"),
    ("1.18", "required traits on GET /resource_providers"),
    ("1.19", "generation in provider aggregates GET/PUT"),
    ("1.20", "POST /resource_providers answers 200 with the provider"),
    ("1.21", "member_of on GET /allocation_candidates"),
    ("1.22", "forbidden traits (!TRAIT) in required"),
    ("1.23", "error codes in error bodies"),
    ("1.24", "several member_of parameters (AND) on GET /resource_providers"),
    ("1.25", "granular request groups on GET /allocation_candidates"),
    ("1.26", "inventory reserved may equal total"),
    ("1.27", "provider_summaries list every class of a provider"),
    ("1.28", "consumer generations on allocations"),
    ("1.29", "nested providers in GET /allocation_candidates"),
    ("1.30", "POST /reshaper"),
    ("1.31", "in_tree on GET /allocation_candidates"),
    ("1.32", "forbidden aggregates (member_of=!...)"),
    ("1.33", "any string suffix for granular groups"),
    ("1.34", "mappings in allocation_requests"),
    ("1.35", "root_required on GET /allocation_candidates"),
    ("1.36", "same_subtree on GET /allocation_candidates"),
    ("1.37", "PUT /resource_providers/{uuid} may re-parent and un-parent"),
    ("1.38", "consumer_type on allocations and usages"),
    ("1.39", "in: any-of syntax for required and root_required traits"),
)

MIN_VERSION = _v(VERSIONS[0][0])
MAX_VERSION = _v(VERSIONS[-1][0])

V1_1, V1_2, V1_3, V1_4, V1_5, V1_6, V1_7, V1_8, V1_9, V1_10 = (
    _v(f"1.{i}") for i in range(1, 11))
V1_11, V1_12, V1_13, V1_14, V1_15, V1_16, V1_17, V1_18, V1_19, V1_20 = (
    _v(f"1.{i}") for i in range(11, 21))
V1_21, V1_22, V1_23, V1_24, V1_25, V1_26, V1_27, V1_28, V1_29, V1_30 = (
    _v(f"1.{i}") for i in range(21, 31))
V1_31, V1_32, V1_33, V1_34, V1_35, V1_36, V1_37, V1_38, V1_39 = (
    _v(f"1.{i}") for i in range(31, 40))

SCOPE_KEY = "strato.microversion"


def parse(headers: dict[str, str]) -> Version:
    """The version a request asks for; 400 for a malformed one, 406 out of range."""
    raw = headers.get(HEADER)
    value: str | None = None
    if raw is not None:
        # Each comma-separated part is `<service> <version>`, the last one for
        # placement wins (as microversion-parse reads it, which Placement
        # uses, without legacy headers: X-OpenStack-Placement-API-Version
        # is not read). Ours is `placement 1.N` or `placement latest`; more words
        # after `placement` are a malformed version (400, as Placement
        # answers); a bare `placement` names no version and is skipped.
        for part in raw.split(","):
            bits = part.strip().split(None, 1)
            if len(bits) == 2 and bits[0].lower() == SERVICE_TYPE:
                value = bits[1].strip()
    if value is None:
        return MIN_VERSION
    # As microversion-parse reads it: 'latest' (lower case only), else two
    # parts Python's int() takes ('1.+5' is 1.5), else a 400; a version that
    # is not one of ours (1.-1 too) is a 406.
    if value == "latest":
        return MAX_VERSION
    try:
        major_s, minor_s = value.split(".", 1)
        want = Version(int(major_s), int(minor_s))
    except ValueError:
        raise errors.BadRequest(
            f"invalid version string: {value} (expected 'placement 1.N' or 'latest')"
        ) from None
    if not MIN_VERSION <= want <= MAX_VERSION:
        raise errors.UnacceptableVersion(
            f"Unacceptable version header: {value} (this server supports "
            f"{MIN_VERSION} to {MAX_VERSION})", str(MIN_VERSION), str(MAX_VERSION))
    return want


def version(request: Request) -> Version:
    v = request.scope.get(SCOPE_KEY)
    return v if isinstance(v, Version) else MIN_VERSION


def require(request: Request, minimum: Version) -> Version:
    """404 for a route that does not exist at the requested version, as in Placement."""
    v = version(request)
    if v < minimum:
        raise errors.NotFound(
            f"The resource could not be found: this route needs microversion {minimum} or "
            f"later; the request asked for {v}")
    return v
