"""The simulator on the zone tree: every zone its own store, in-process transport."""

from __future__ import annotations

from collections import Counter

import pytest

from strato.sim.cluster import ClusterModel, build_hosts
from strato.sim.runner import run
from strato.sim.target import reason_from_explain
from strato.sim.tree import InProcessTreeTarget
from tests.sim.worlds import assert_clean, tree


@pytest.mark.parametrize("mode", ["delegate", "best"])
def test_tree_run_keeps_every_invariant(mode: str) -> None:
    sc = tree()
    hosts = build_hosts(sc, 1)
    assert {h.zone for h in hosts} == {"root/east", "root/west"}
    model = ClusterModel(hosts, sc.levels)
    target = InProcessTreeTarget(hosts, sc, mode=mode)
    try:
        result = run(sc, target, model, seed=1)
        zones = Counter(target.owner.values())
    finally:
        target.close()
    assert_clean(result.summary())
    assert set(zones) <= {"east", "west"}


def test_tree_rejections_read_like_flat_ones() -> None:
    pruned = {"zone": "root", "summary": "...", "children": [
        {"zone": "east", "outcome": "pruned",
         "reason": "pruned: no capacity (MEMORY_MB largest free 1024 < 4096)"},
        {"zone": "west", "outcome": "pruned", "reason": "pruned: not enough VCPU for 3 "
         "instance(s)"}]}
    assert reason_from_explain(pruned) == "MEMORY_MB: short"
    looked = {"zone": "root", "children": [
        {"zone": "east", "outcome": "no_valid_placement", "reason": "x", "explain": {
            "zone": "east", "groups": [{"remaining": 0, "removed": [
                {"stage": "constraint", "reason": "anti_affinity g-1@rack", "count": 3}]}]}}]}
    assert reason_from_explain(looked) == "anti_affinity@rack"
