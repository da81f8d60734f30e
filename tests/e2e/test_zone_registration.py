"""A child zone's registration kept alive, with real server processes: a
parent started afresh (its record of its children lost) gets them back on
their own; a child an operator removed stays out while it runs, and comes
back when it is restarted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.test_zone_tree import children, hosts, stop_all, wait_for, zone
from tests.helpers import api

pytestmark = pytest.mark.slow
REJOIN = ["--rejoin-after", "2"]


def test_a_parent_that_lost_its_record_of_a_child_gets_it_back(tmp_path: Path) -> None:
    root = zone(tmp_path, "root").start()
    procs = {"root": root}
    try:
        procs["dfw"] = zone(tmp_path, "dfw", root, ["--location-prefix", "dfw", *REJOIN]).start()
        hosts(procs["dfw"], "dfw", ["dfw/room1/rack1/h0"])
        with api.client(root.url) as c:
            wait_for(lambda: "dfw" in children(c))
        root.stop()
        # The root on a new database (a restore from before the child joined,
        # or a fresh start): it knows no child.
        (tmp_path / "root.db").unlink()
        procs["root"] = root = zone(tmp_path, "root", port=root.port).start()
        began = time.monotonic()
        with api.client(root.url) as c:
            # Not `children(c) == {}` first: the child, asking again every few
            # seconds while the root was down, may have joined already.
            wait_for(lambda: (children(c).get("dfw", {}).get("summary") or {})
                     .get("providers") == 1, timeout=20)
            assert time.monotonic() - began < 12
            r = c.post("/strato/v1/schedule", json={
                "consumers": ["6f1c3b1e-0000-4000-8000-000000000001"], "project_id": "p",
                "user_id": "u", "groups": [{"resources": {"VCPU": 1}}]})
            assert r.status_code == 200, r.text
        assert "registered with parent" in (tmp_path / "dfw.log").read_text()
    finally:
        stop_all(procs)


def test_a_removed_child_stays_out_until_it_is_restarted(tmp_path: Path) -> None:
    root = zone(tmp_path, "root").start()
    procs = {"root": root}
    try:
        procs["dfw"] = dfw = zone(tmp_path, "dfw", root,
                                  ["--location-prefix", "dfw", *REJOIN]).start()
        with api.client(root.url) as c:
            wait_for(lambda: "dfw" in children(c))
            assert c.delete("/strato/v1/children/dfw").status_code == 204
            # Well past --rejoin-after: the child tried once, and was told.
            wait_for(lambda: "removed from zone 'root' by an operator"
                     in (tmp_path / "dfw.log").read_text(), timeout=20)
            time.sleep(3)
            assert "dfw" not in children(c)
            dfw.stop()
            procs["dfw"] = zone(tmp_path, "dfw", root, ["--location-prefix", "dfw", *REJOIN],
                                port=dfw.port).start()
            wait_for(lambda: "dfw" in children(c))
            # An admin's add clears the name as well: removed, then added by hand.
            assert c.delete("/strato/v1/children/dfw").status_code == 204
            r = c.post("/strato/v1/children", json={"name": "dfw", "url": procs["dfw"].url,
                                                    "location_prefix": "dfw"})
            assert r.status_code == 201, r.text
            time.sleep(5)  # --rejoin-after twice: the child is called, it stays
            assert "dfw" in children(c)
    finally:
        stop_all(procs)
