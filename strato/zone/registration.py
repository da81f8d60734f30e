"""A child zone introduces itself to its parent, and keeps trying until it is heard."""

from __future__ import annotations

import asyncio
import logging
import random

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


def _is_loop(body: object) -> bool:
    try:
        return any(e.get("code") == errors.ZONE_LOOP for e in read_error(body)["errors"])
    except Faulty:
        return False


async def register_with_parent(settings: Settings, transport: Transport, *,
                               identity: str | None = None, max_delay: float = 30.0) -> bool:
    """POST this zone to {parent}/strato/v1/children until accepted.

    Returns False (and stops) if the parent refuses for good (4xx): a parent
    may refuse a child it does not trust, or whose name another live zone has.
    A 409 `strato.zone_loop` (the parent sees itself below this zone) is not
    for good: the summaries it read may be a refresh behind a change of the
    tree, so it is tried again, every `max_delay` seconds.
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
        return False
    delay = 0.2
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
                log.log(logging.WARNING if failed else logging.INFO,
                        "registered with parent %s as %s", settings.parent_url,
                        settings.zone_name)
                return True
            failed = True
            if reply.status == 409 and _is_loop(reply.body):
                log.error("parent %s refused this zone: it is below this zone already (a "
                          "cycle); retrying in %.0fs, in case that was a summary from before "
                          "a change: %s", settings.parent_url, max_delay, _detail(reply.body))
                delay = max_delay
            elif 400 <= reply.status < 500:
                log.error("parent %s refused this zone (HTTP %s): %s%s; this zone serves "
                          "alone until it is restarted", settings.parent_url, reply.status,
                          _detail(reply.body), _hint(reply.status, settings.zone_name))
                return False
            else:
                log.warning("parent %s answered HTTP %s to the registration (%s; is it a "
                            "Strato zone?); retrying in %.1fs", settings.parent_url,
                            reply.status, _detail(reply.body), delay)
        await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
        delay = min(max_delay, delay * 2)
