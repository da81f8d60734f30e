"""A child zone's registration with its parent (zone/registration.py): which
refusals are asked again, and registering again when the parent goes quiet."""

from __future__ import annotations

import asyncio
from typing import Any

from strato.config import Settings
from strato.zone.registration import Outcome, ParentContact, keep_registered, register_with_parent
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
        self.bodies: list[dict[str, Any]] = []

    async def call(self, url: str, method: str, path: str, **kw: Any) -> Reply:
        self.calls += 1
        self.bodies.append(dict(kw["json"]))
        if not self.replies:
            await asyncio.sleep(3600)
        return self.replies.pop(0)


SETTINGS = Settings(db_url="sqlite://", zone_name="dfw", parent_url="http://parent:1",
                    advertise_url="http://dfw:2")


def _register(parent: Answers) -> Outcome:
    return asyncio.run(asyncio.wait_for(
        register_with_parent(SETTINGS, parent, max_delay=0.01), timeout=10))  # type: ignore[arg-type]


def test_a_cycle_seen_by_the_parent_is_tried_again() -> None:
    """Its summaries may be a refresh behind a change of the tree (a zone
    moved): not a final refusal, as a name taken is."""
    parent = Answers(Reply(409, LOOP), Reply(409, LOOP), Reply(201, {}))
    assert _register(parent) is Outcome.REGISTERED and parent.calls == 3


def test_other_refusals_end_a_round() -> None:
    parent = Answers(Reply(409, DUPLICATE), Reply(201, {}))
    assert _register(parent) is Outcome.REFUSED and parent.calls == 1
    parent = Answers(Reply(403, {"errors": [{"status": 403, "title": "Forbidden",
                                             "detail": "no"}]}))
    assert _register(parent) is Outcome.REFUSED and parent.calls == 1


def _keep(parent: Answers, contact: ParentContact, seconds: float,
          rejoin_after: float = 0.2) -> None:
    async def run() -> None:
        task = asyncio.ensure_future(keep_registered(
            SETTINGS, parent, contact, max_delay=0.01,  # type: ignore[arg-type]
            rejoin_after=rejoin_after, refused_retry=0.05))
        await asyncio.wait([task], timeout=seconds)
        task.cancel()
    asyncio.run(run())


def test_a_refusal_is_asked_again_until_the_parent_takes_the_zone() -> None:
    """A wrong token, a name held by a zone since removed: fixed at the
    parent, the zone joins without a restart."""
    no = Reply(401, {"errors": [{"status": 401, "title": "Unauthorized", "detail": "no"}]})
    parent = Answers(no, no, Reply(201, {}))
    contact = ParentContact()
    assert contact.state == "registering"
    _keep(parent, contact, 0.5, rejoin_after=60)
    assert parent.calls == 3 and not any("rejoin" in b for b in parent.bodies)
    assert contact.state == "registered"  # (/readyz shows it)
    parent = Answers(no)
    _keep(parent, contact, 0.2, rejoin_after=60)
    assert contact.state == "refused"


def test_a_zone_the_parent_stops_calling_registers_again() -> None:
    """The parent may have lost its record of it (restored from a backup):
    the zone registers again, saying so (`rejoin`); one the parent keeps
    calling does not."""
    parent = Answers(Reply(201, {}), Reply(201, {}), Reply(200, {}))
    _keep(parent, ParentContact(), 0.55)
    assert parent.calls == 3
    assert [b.get("rejoin", False) for b in parent.bodies] == [False, True, True]

    parent = Answers(Reply(201, {}), Reply(201, {}))
    contact = ParentContact()

    async def calls_every(seconds: float) -> None:
        while True:
            contact.hear()
            await asyncio.sleep(seconds)

    async def run() -> None:
        heard = asyncio.ensure_future(calls_every(0.05))
        task = asyncio.ensure_future(keep_registered(
            SETTINGS, parent, contact, max_delay=0.01,  # type: ignore[arg-type]
            rejoin_after=0.2))
        await asyncio.wait([task], timeout=0.8)
        task.cancel()
        heard.cancel()
    asyncio.run(run())
    assert parent.calls == 1


def test_a_zone_an_operator_removed_stays_out_until_restarted(caplog: Any) -> None:
    removed = Reply(409, {"errors": [{"status": 409, "title": "Conflict",
                                      "code": "strato.zone_removed",
                                      "detail": "zone 'dfw' was removed by an operator"}]})
    parent = Answers(Reply(201, {}), removed, Reply(201, {}))
    contact = ParentContact()
    _keep(parent, contact, 0.8)
    assert parent.calls == 2 and contact.state == "removed"
    assert "removed by an operator" in caplog.text


def test_what_the_operator_reads(caplog: Any) -> None:
    """The parent's detail and a hint, not a raw dict; a parent that is no
    Strato zone is said as such; the recovery after a failure is a warning,
    as the failure was (seen at the default log level)."""
    caplog.set_level("INFO", logger="strato.zone")
    assert _register(Answers(Reply(409, DUPLICATE))) is Outcome.REFUSED
    said = caplog.text
    assert "a live zone has this name (placement.duplicate_name)" in said
    assert "strato children remove dfw" in said and "{'errors'" not in said
    assert "asks again every 60s" in said
    caplog.clear()
    assert _register(Answers(Reply(401, {"errors": [{"status": 401, "title": "Unauthorized",
                                                     "detail": "bad token"}]}))) \
        is Outcome.REFUSED
    assert "--parent-token" in caplog.text
    caplog.clear()
    assert _register(Answers(Reply(501, "<html>Unsupported method</html>"),
                             Reply(201, {}))) is Outcome.REGISTERED
    records = [r for r in caplog.records if r.name == "strato.zone"]
    assert "is it a Strato zone?" in records[0].getMessage()
    assert "http://parent:1" in records[0].getMessage()
    assert records[-1].levelname == "WARNING"
    assert "registered with parent" in records[-1].getMessage()


def test_a_parent_that_knows_no_rejoin_takes_the_zone_as_at_a_start() -> None:
    """A parent of an earlier version refuses the unknown field: sent again
    without it."""
    old = Reply(400, {"errors": [{"status": 400, "title": "Bad Request",
                                  "detail": "rejoin: Extra inputs are not permitted"}]})
    parent = Answers(Reply(201, {}), old, Reply(200, {}))
    _keep(parent, ParentContact(), 0.35)
    assert [b.get("rejoin", False) for b in parent.bodies] == [False, True, False]


def test_a_removal_refuses_the_rejoin_of_the_zone_removed_only(tmp_path: Any) -> None:
    """The mark is for the zone that was removed (its identity): another
    zone that held the name, removed by mistake, does not lock the name's
    real zone out; a registration without `rejoin` clears it."""
    from tests.zone.test_split import run

    async def scenario(tree: Any) -> None:
        root = tree.client("global")

        def reg(identity: str, rejoin: bool) -> dict[str, Any]:
            return {"name": "x", "url": f"inproc://x-{identity[:4]}", "identity": identity,
                    "rejoin": rejoin}
        a, b = "a" * 32, "b" * 32
        assert (await root.post("/strato/v1/children", json=reg(b, False))).status_code == 201
        assert (await root.delete("/strato/v1/children/x")).status_code == 204
        r = await root.post("/strato/v1/children", json=reg(a, True))
        assert r.status_code == 201, r.text
        assert (await root.delete("/strato/v1/children/x")).status_code == 204
        r = await root.post("/strato/v1/children", json=reg(a, True))
        assert r.status_code == 409 and "strato.zone_removed" in r.text, r.text
        r = await root.post("/strato/v1/children", json=reg(a, False))
        assert r.status_code == 201, r.text
    run(tmp_path, scenario)


def test_a_parent_that_does_not_answer_is_asked_again_within_seconds(monkeypatch: Any
                                                                     ) -> None:
    """A parent restarting (slowly, on a loaded machine) is asked again within
    a few seconds of its return: the wait doubles up to 5 s, not 30."""
    from strato.zone import registration
    from strato.zone.transport import Unreachable
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    class Down(Answers):
        async def call(self, url: str, method: str, path: str, **kw: Any) -> Reply:
            self.calls += 1
            if self.calls <= 10:
                raise Unreachable(url, "connection refused")
            return Reply(201, {})
    monkeypatch.setattr(registration.asyncio, "sleep", no_wait)
    parent = Down()
    assert asyncio.run(register_with_parent(SETTINGS, parent)  # type: ignore[arg-type]
                       ) is Outcome.REGISTERED
    assert parent.calls == 11 and len(waits) == 10
    assert max(waits) <= 5.0 * 1.2 and waits[-1] >= 5.0 * 0.8
