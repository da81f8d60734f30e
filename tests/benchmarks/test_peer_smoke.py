"""Real OpenStack Placement as a benchmark peer: load, verify, query, claim (small).

Runs only where the peer venv exists (`python -m benchmarks.peer.placement`
creates it); it is never installed by the test suite.
"""

from __future__ import annotations

import psycopg
import pytest

from benchmarks.peer.placement import (
    PlacementPeer,
    bulk_load,
    candidates_latency,
    nova_claims,
    peer_venv_ready,
    verify,
)
from benchmarks.spec import TRAIT, make_specs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not peer_venv_ready(), reason="no .venv-placement (peer not installed)"),
]


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_placement_peer_loads_answers_and_claims(db: str) -> None:
    specs = make_specs(150, seed=7, sharing=2)
    with PlacementPeer(workers=1, threads=2, db=db) as peer:
        stats = bulk_load(peer.target, specs)
        assert stats.providers == len(specs)
        verify(peer.url, specs)
        lat = candidates_latency(peer.url, f"resources=VCPU:1&required={TRAIT}&limit=5", 3)
        assert len(lat) == 3
        claims = nova_claims(peer.url, "VCPU:1,MEMORY_MB:1024,DISK_GB:10", 4)
        assert (claims.placements, claims.failures) == (4, 0)
        assert peer.rss_bytes() > 0
        proc = peer._proc
    assert proc is not None and proc.poll() is not None
    if db == "postgresql":
        # Its database is gone with it.
        with psycopg.connect(peer.pg_url) as conn:
            assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                (peer.pg_db,)).fetchone() is None
