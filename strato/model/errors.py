"""Errors that cross layers: raised by the store and engine, rendered by the api.

Each carries an HTTP status, a stable machine code (Placement's codes where
Placement has one) and a human detail that names the problem.
"""

from __future__ import annotations

# Placement's stable codes (never change a value once published). Placement
# sends each only where it names the condition: resource_provider.not_found
# from the reshaper alone, duplicate_name for providers alone, the query codes
# for the checks across request groups alone. Elsewhere (a 404 for a provider,
# a duplicate resource class, a malformed query value) its code is
# undefined_code, and so is Strato's: clients compare these codes.
DEFAULT = "placement.undefined_code"
INVENTORY_INUSE = "placement.inventory.inuse"
CONCURRENT_UPDATE = "placement.concurrent_update"
DUPLICATE_NAME = "placement.duplicate_name"
PROVIDER_IN_USE = "placement.resource_provider.inuse"
PROVIDER_CANNOT_DELETE_PARENT = "placement.resource_provider.cannot_delete_parent"
RESOURCE_PROVIDER_NOT_FOUND = "placement.resource_provider.not_found"
# Strato (published, no longer sent): a cross-zone placement decided but not
# confirmed everywhere. Since the request ledger, such a placement is undone
# and the answer is a 503 ZONE_UNAVAILABLE (retry).
OUTCOME_PENDING = "strato.outcome_pending"
# Strato: part of the zone tree could not be asked and nothing else fits. Not
# an answer: nothing was claimed or kept, retry (after Retry-After).
ZONE_UNAVAILABLE = "strato.zone_unavailable"
# Strato: a request with this request_id is still being worked on; retry.
REQUEST_IN_PROGRESS = "strato.request_in_progress"
# Strato: the request id was cancelled (a parent zone lost its answer).
REQUEST_CANCELLED = "strato.request_cancelled"
# Strato: a zone-to-zone call came back to a zone it passed through (or
# crossed more zones than a tree may have): the zone tree has a cycle.
ZONE_LOOP = "strato.zone_loop"
# Strato: a running child zone registering again on its own was removed by an
# operator of its parent since it last registered (it joins when restarted).
ZONE_REMOVED = "strato.zone_removed"
ILLEGAL_DUPLICATE_QUERYPARAM = "placement.query.duplicate_key"
QUERYPARAM_BAD_VALUE = "placement.query.bad_value"
QUERYPARAM_MISSING_VALUE = "placement.query.missing_value"


class StratoError(Exception):
    """Base of every error that becomes an HTTP answer."""

    status = 500
    title = "Internal Server Error"

    def __init__(self, detail: str, code: str = DEFAULT) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code


class BadRequest(StratoError):
    status = 400
    title = "Bad Request"


class Forbidden(StratoError):
    status = 403
    title = "Forbidden"


class NotFound(StratoError):
    status = 404
    title = "Not Found"


class MethodNotAllowed(StratoError):
    status = 405
    title = "Method Not Allowed"


class NotAcceptable(StratoError):
    status = 406
    title = "Not Acceptable"


class UnacceptableVersion(NotAcceptable):
    """A microversion outside the range served; the error names the range
    (Placement's 406 carries min_version and max_version)."""

    def __init__(self, detail: str, min_version: str, max_version: str) -> None:
        super().__init__(detail)
        self.fields = {"min_version": min_version, "max_version": max_version}


class Conflict(StratoError):
    status = 409
    title = "Conflict"


class PayloadTooLarge(StratoError):
    status = 413
    title = "Request Entity Too Large"


class ServiceUnavailable(StratoError):
    """Part of the zone tree did not answer, or the request's time ran out:
    nothing was claimed or kept; the client retries after `retry_after`."""

    status = 503
    title = "Service Unavailable"

    def __init__(self, detail: str, code: str = ZONE_UNAVAILABLE, *,
                 retry_after: float = 1.0, explain: dict[str, object] | None = None) -> None:
        super().__init__(detail, code)
        self.retry_after = retry_after
        self.explain = explain


class LoopDetected(StratoError):
    """A call between zones reached a zone it had passed through: refused at
    once rather than passed round the cycle again."""

    status = 508
    title = "Loop Detected"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, ZONE_LOOP)


class LoopBelow(ServiceUnavailable):
    """Part of the zone tree could not be asked because the tree has a cycle
    there (a child answered 508, or is marked as leading round one), and
    nothing else answers: handled as any ServiceUnavailable (nothing claimed
    or kept, never a final answer) but said as what it is, 508
    ``strato.zone_loop``: it lasts until an operator removes the child
    registration that closes the cycle."""

    status = 508
    title = "Loop Detected"

    def __init__(self, detail: str, *, retry_after: float = 1.0,
                 explain: dict[str, object] | None = None) -> None:
        super().__init__(detail, ZONE_LOOP, retry_after=retry_after, explain=explain)


class UnsupportedMediaType(StratoError):
    status = 415
    title = "Unsupported Media Type"


class ConcurrentUpdate(Conflict):
    """A write named a generation that is no longer current."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, CONCURRENT_UPDATE)
