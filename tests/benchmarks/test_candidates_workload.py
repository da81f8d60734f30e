"""The workload mode of benchmarks/candidates.py against a real server (small).

Every one of its shapes must find candidates on the benchmark's data (a shape
that answers nothing would time an empty answer, not a placement), and the
loop must claim, release about a third, and keep the cold requests apart.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from benchmarks.candidates import (
    HEADERS,
    Server,
    load_specs,
    workload,
    workload_run,
    workload_shapes,
)
from benchmarks.spec import make_specs
from strato.store.db import Database


def test_every_shape_finds_room_and_the_loop_claims_and_releases(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/zone.db"
    load_specs(Database(url), make_specs(300, seed=1))
    shapes = workload_shapes(1)
    assert len(shapes) >= 20 and len({name for name, _ in shapes}) == len(shapes)
    with Server(url, tmp_path / "server.log") as server:
        with httpx.Client(base_url=server.url, headers=HEADERS) as c:
            for name, query in shapes:
                r = c.get(f"/allocation_candidates?{query}")
                assert r.status_code == 200, (name, r.text)
                assert r.json()["allocation_requests"], f"{name} finds nothing"

        run = workload_run(server.url, shapes, 120, 4, "t").summary()
        assert run["placed"] >= 100 and run["empty"] == {}
        # One time in three after a placement: about a third is freed.
        assert 0.15 * run["placed"] <= run["released"] <= 0.5 * run["placed"]
        # One GET per round (a conflict tries another candidate of the same
        # answer); the first of each shape is cold, the rest warm.
        assert run["gets"] == 120
        assert set(run["per_shape_cold_ms"]) <= {name for name, _ in shapes}
        assert run["get_warm"]["n"] + len(run["per_shape_cold_ms"]) == 120

        out = workload(server.url, 1, 40, [2])
        assert out["shapes"] == len(shapes)
        assert out["single_2"]["placed"] > 0 and out["mixed_2"]["placed"] > 0
        assert out["ratio_2"] is not None and out["ratio_2"] > 0
        # What was released is gone; what is kept is there.
        with httpx.Client(base_url=server.url, headers=HEADERS) as c:
            usages = c.get("/usages?project_id=bench",
                           headers={"openstack-api-version": "placement 1.9"}).json()["usages"]
        assert usages.get("VCPU", 0) > 0
