"""`GET /ui` in process: who may see it, and that what children say is shown
escaped and bounded (a child's answers are input). The browser test is
tests/e2e/test_ui_browser.py."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path
from typing import Any

import orjson

from strato.store import in_doubt
from strato.zone.inprocess import ZoneSpec, build
from tests.zone.test_tree import host

EVIL = '<script>alert("x")</script>'


class Hostile:
    """A child whose every text is markup and whose numbers are nonsense."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        out: Any
        if scope["path"] == "/strato/v1/summary":
            out = {"zone": EVIL, "providers": "many", "location_prefix": EVIL, "tags": [],
                   "classes": {EVIL: {"capacity": 1e308, "used": "x", "largest_free": -1}},
                   "traits": [], "tags_present": [], "children": []}
        elif scope["path"] == "/strato/v1/children":
            out = {"children": [
                {"name": EVIL, "health": {"healthy": False, "last_error": EVIL},
                 "in_doubt": "lots", "summary": {"classes": {"VCPU": {"capacity": -5,
                                                                      "used": 10**30}}}},
                "not an object", {"name": "x" * 10_000, "health": [1], "summary": [2]}]}
        else:
            out = {"errors": [{"status": 404}]}
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": orjson.dumps(out)})


def test_the_page_needs_an_admin_and_escapes_what_children_say(tmp_path: Path) -> None:
    async def main() -> None:
        tree = build(tmp_path, [ZoneSpec("global"), ZoneSpec("cell", parent="global")])
        try:
            await tree.link()
            await host(tree.client("cell"), "cell-h0", "site1/rack0/h0")
            tree.transport.register("inproc://hostile", Hostile())
            c = tree.client("global")
            r = await c.post("/strato/v1/children", json={"name": "hostile",
                                                          "url": "inproc://hostile"})
            assert r.status_code == 201, r.text
            await tree.zone_tree("global").refresh(fresh=True)
            r = await c.post("/strato/v1/schedule", json={
                "consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "request_id": EVIL, "groups": [{"resources": {"VCPU": 1}}]})
            with tree.dbs["global"].write() as conn:
                in_doubt.add(conn, "cell", EVIL, [str(uuid.uuid4())], EVIL)

            anon = {"x-auth-token": ""}
            r = await c.get("/ui", headers={**anon})
            assert r.status_code == 401
            assert r.headers["www-authenticate"].startswith('Basic realm="strato"')
            for bad in ("Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode(),
                        "Basic " + base64.b64encode(b"u:wrong").decode(), "Bearer x"):
                r = await c.get("/ui", headers={"authorization": bad, "x-auth-token": ""})
                assert r.status_code in (401, 403), (bad, r.status_code)
            # Not an admin: 403, as the API.
            r = await c.get("/ui", headers={"x-auth-token": "u:p", "x-roles": "reader"})
            assert r.status_code == 403

            good = "Basic " + base64.b64encode(b"operator:admin").decode()
            r = await c.get("/ui?refresh=5", headers={"authorization": good})
            assert r.status_code == 200, r.text
            page = r.text
            assert "<script" not in page.lower()
            assert "&lt;script&gt;" in page
            assert 'data-zone="cell"' in page and 'data-zone="hostile"' in page
            assert '<meta http-equiv="refresh" content="5">' in page
            assert "x" * 10_000 not in page           # a child's name is cut
            assert r.headers["content-security-policy"].startswith("default-src 'none'")
            assert "<td>cell</td><td>&lt;script&gt;" in page  # the request in doubt
            r = await c.get("/ui?refresh=0")
            assert 'http-equiv="refresh"' not in r.text
            r = await c.get("/ui?refresh=nope")
            assert r.status_code == 400

            # A dead child is shown as such; the page still answers.
            tree.kill("cell")
            tree.zone_tree("global").health_of("cell").failed("killed by the test")
            r = await c.get("/ui")
            assert r.status_code == 200 and "killed by the test" in r.text
        finally:
            await tree.aclose()

    asyncio.run(main())
