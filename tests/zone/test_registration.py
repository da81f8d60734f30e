"""A child zone's registration with its parent (zone/registration.py): which
refusals are final."""

from __future__ import annotations

import asyncio
from typing import Any

from strato.config import Settings
from strato.zone.registration import register_with_parent
from strato.zone.transport import Reply

LOOP = {"errors": [{"status": 409, "title": "Conflict", "code": "strato.zone_loop",
                    "detail": "the parent is below this zone already"}]}
DUPLICATE = {"errors": [{"status": 409, "title": "Conflict", "code": "placement.duplicate_name",
                         "detail": "a live zone has this name"}]}


class Answers:
    """A parent that answers the registrations it gets with `replies`, in turn."""

    schemes = frozenset({"http"})

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.calls = 0

    async def call(self, url: str, method: str, path: str, **_: Any) -> Reply:
        self.calls += 1
        return self.replies.pop(0)


def _register(parent: Answers) -> bool:
    settings = Settings(db_url="sqlite://", zone_name="dfw", parent_url="http://parent:1",
                        advertise_url="http://dfw:2")
    return asyncio.run(asyncio.wait_for(
        register_with_parent(settings, parent, max_delay=0.01), timeout=10))  # type: ignore[arg-type]


def test_a_cycle_seen_by_the_parent_is_tried_again() -> None:
    """Its summaries may be a refresh behind a change of the tree (a zone
    moved): not a final refusal, as a name taken is."""
    parent = Answers(Reply(409, LOOP), Reply(409, LOOP), Reply(201, {}))
    assert _register(parent) is True and parent.calls == 3


def test_other_refusals_are_final() -> None:
    parent = Answers(Reply(409, DUPLICATE), Reply(201, {}))
    assert _register(parent) is False and parent.calls == 1
    parent = Answers(Reply(403, {"errors": [{"status": 403, "title": "Forbidden",
                                             "detail": "no"}]}))
    assert _register(parent) is False and parent.calls == 1


def test_what_the_operator_reads(caplog: Any) -> None:
    """The parent's detail and a hint, not a raw dict; a parent that is no
    Strato zone is said as such; the recovery after a failure is a warning,
    as the failure was (seen at the default log level)."""
    caplog.set_level("INFO", logger="strato.zone")
    assert _register(Answers(Reply(409, DUPLICATE))) is False
    said = caplog.text
    assert "a live zone has this name (placement.duplicate_name)" in said
    assert "strato children remove dfw" in said and "{'errors'" not in said
    caplog.clear()
    assert _register(Answers(Reply(401, {"errors": [{"status": 401, "title": "Unauthorized",
                                                     "detail": "bad token"}]}))) is False
    assert "--parent-token" in caplog.text
    caplog.clear()
    assert _register(Answers(Reply(501, "<html>Unsupported method</html>"),
                             Reply(201, {}))) is True
    records = [r for r in caplog.records if r.name == "strato.zone"]
    assert "is it a Strato zone?" in records[0].getMessage()
    assert "http://parent:1" in records[0].getMessage()
    assert records[-1].levelname == "WARNING"
    assert "registered with parent" in records[-1].getMessage()
