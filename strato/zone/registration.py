"""A child zone introduces itself to its parent, keeps trying until it is
heard, and introduces itself again when its parent stops calling it."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from enum import Enum

from pydantic import ValidationError

from strato.config import Settings
from strato.model import errors
from strato.zone.protocol import Faulty, Registration, read_error
from strato.zone.transport import Transport, Unreachable

log = logging.getLogger("strato.zone")


def _detail(body: object) -> str:
    """The parent's error detail (its code in brackets), or what it sent."""
    try:
        err = read_error(body)["errors"][0]
    except (Faulty, IndexError, KeyError, TypeError):
        return f"an answer that is not a Strato error: {str(body)[:200]}"
    code = err.get("code")
    detail = str(err.get("detail") or err.get("title") or "no detail")[:500]
    return f"{detail} ({code})" if code else detail


def _hint(status: int, name: str) -> str:
    if status == 401:
        return ("; send the parent's token with --parent-token (or STRATO_PARENT_TOKEN), "
                "or its join token")
    if status == 403:
        return "; the token sent (--parent-token) may not register children there"
    if status == 409:
        return (f"; if zone {name} registered there is gone for good, remove it at the "
                f"parent with `strato children remove {name}`, or start this zone "
                "under another --zone name")
    return ""


def _has_code(body: object, code: str) -> bool:
    try:
        return any(e.get("code") == code for e in read_error(body)["errors"])
    except Faulty:
        return False


# A zone that has not been called by a zone above it for this long registers
# again: its parent may have lost its record of it (a database restored from
# a backup, or started afresh). A parent refreshes a child's summary every
# few seconds (--summary-interval, default 5), so a registered zone is
# called far more often than this.
REJOIN_AFTER_S = 60.0
# A parent's refusal (a wrong token, a name taken, a prefix outside the
# parent's) is asked again this often: its operator may fix it.
REFUSED_RETRY_S = 60.0
# A parent that does not answer is asked again after 0.2 s, doubling up to this.
UNREACHABLE_MAX_S = 5.0


class Outcome(Enum):
    REGISTERED = "registered"
    REFUSED = "refused"  # asked again later
    REMOVED = "removed"  # an operator removed this zone: not asked again
    INVALID = "invalid"  # this zone's registration is not one: not asked at all


class ParentContact:
    """When a zone above this one last called it (api/middleware.py hears every
    zone-to-zone call but a child's own registration)."""

    def __init__(self) -> None:
        self.heard = time.monotonic()
        # What the parent last said (/readyz shows it): "registering" until
        # it answers, then an Outcome's value.
        self.state = "registering"

    def hear(self) -> None:
        self.heard = time.monotonic()

    def quiet_for(self) -> float:
        return time.monotonic() - self.heard


async def register_with_parent(settings: Settings, transport: Transport, *,
                               identity: str | None = None, max_delay: float = 30.0,
                               rejoin: bool = False,
                               refused_retry: float = REFUSED_RETRY_S) -> Outcome:
    """POST this zone to {parent}/strato/v1/children until it answers.

    REFUSED for a refusal (4xx): a parent may refuse a child it does not
    trust, or whose name another zone has; `keep_registered` asks again
    later. A 409 `strato.zone_loop` (the parent sees itself below this zone)
    is asked again here, every `max_delay` seconds: the summaries it read may
    be a refresh behind a change of the tree. REMOVED when `rejoin` (this
    zone registers again on its own) and an operator removed it there.
    """
    assert settings.parent_url is not None
    try:
        body = Registration(
            name=settings.zone_name, url=settings.advertise_url or "",
            location_prefix=settings.location_prefix, tags=list(settings.zone_tags),
            credential=(settings.zone_credential or settings.link_token or settings.auth_token
                        or "admin"),
            # Proves to the parent that this is the zone that registered the
            # name before (a restart, a new address): no other zone can take it.
            identity=identity,
        ).model_dump(mode="json", exclude_none=True)
    except ValidationError as exc:
        # Every parent would refuse it: say why here, once, rather than retry.
        log.error("this zone cannot register with %s: %s", settings.parent_url, exc)
        return Outcome.INVALID
    if rejoin:
        body["rejoin"] = True
    delay = 0.2
    # A parent that does not answer (restarting) is asked again within
    # seconds of its return, not a doubled wait later.
    cap = min(max_delay, UNREACHABLE_MAX_S)
    failed = False
    while True:
        try:
            reply = await transport.call(settings.parent_url, "POST", "/strato/v1/children",
                                         token=settings.parent_token, json=body, timeout=5.0)
        except Unreachable as exc:
            failed = True
            log.warning("parent %s unreachable (%s); retrying in %.1fs", settings.parent_url,
                        exc.why, delay)
        else:
            if reply.status in (200, 201):
                # After a failure said at warning level, the recovery is too.
                log.log(logging.WARNING if failed or rejoin else logging.INFO,
                        "registered with parent %s as %s%s", settings.parent_url,
                        settings.zone_name, " again" if rejoin else "")
                return Outcome.REGISTERED
            failed = True
            if reply.status == 409 and _has_code(reply.body, errors.ZONE_LOOP):
                log.error("parent %s refused this zone: it is below this zone already (a "
                          "cycle); retrying in %.0fs, in case that was a summary from before "
                          "a change: %s", settings.parent_url, max_delay, _detail(reply.body))
                delay = cap = max_delay
            elif (reply.status == 400 and "rejoin" in body
                  and "rejoin" in _detail(reply.body)):
                # A parent of an earlier version, which knows no `rejoin`:
                # registered as at a start (it keeps no removed names either).
                del body["rejoin"]
                continue
            elif reply.status == 409 and _has_code(reply.body, errors.ZONE_REMOVED):
                log.warning("parent %s: %s; this zone serves alone", settings.parent_url,
                            _detail(reply.body))
                return Outcome.REMOVED
            elif 400 <= reply.status < 500:
                log.error("parent %s refused this zone (HTTP %s): %s%s; this zone serves "
                          "alone, and asks again every %.0fs", settings.parent_url,
                          reply.status, _detail(reply.body),
                          _hint(reply.status, settings.zone_name), refused_retry)
                return Outcome.REFUSED
            else:
                log.warning("parent %s answered HTTP %s to the registration (%s; is it a "
                            "Strato zone?); retrying in %.1fs", settings.parent_url,
                            reply.status, _detail(reply.body), delay)
        await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
        delay = min(cap, delay * 2)


async def keep_registered(settings: Settings, transport: Transport, contact: ParentContact,
                          *, identity: str | None = None, max_delay: float = 30.0,
                          rejoin_after: float = REJOIN_AFTER_S,
                          refused_retry: float = REFUSED_RETRY_S) -> None:
    """Register with the parent, and again whenever no zone above has called
    this one for `rejoin_after` seconds (the parent may have lost its record
    of it); a refusal is asked again every `refused_retry` seconds. Ends when
    an operator removed this zone at the parent (it joins again when it is
    restarted, or when an admin there adds it back)."""
    rejoin = False
    while True:
        outcome = await register_with_parent(settings, transport, identity=identity,
                                             max_delay=max_delay, rejoin=rejoin,
                                             refused_retry=refused_retry)
        contact.state = outcome.value
        if outcome in (Outcome.REMOVED, Outcome.INVALID):
            return
        if outcome is Outcome.REFUSED:
            await asyncio.sleep(refused_retry)
            continue
        contact.hear()
        while contact.quiet_for() < rejoin_after:
            await asyncio.sleep(max(0.01, min(10.0, rejoin_after - contact.quiet_for())))
        log.warning("no call from parent %s for %.0fs (it calls every few seconds): "
                    "registering again, in case it lost its record of this zone",
                    settings.parent_url, contact.quiet_for())
        rejoin = True
