"""Tiny scenarios for the simulator's tests, built in code (fast, explicit)."""

from __future__ import annotations

from typing import Any

from strato.sim.scenario import Scenario, parse


def tiny(requests: int = 60, rate: float = 0.5, **workload: Any) -> Scenario:
    """6 hosts in 3 racks (2 rooms), one of them tagged hipaa by rule of the seed."""
    data: dict[str, Any] = {
        "scenario": {"name": "tiny", "description": "test world"},
        "cluster": {"zone": {"name": "t", "site": "s0", "providers": [
            {"name": "h", "count": 6, "hosts_per_rack": 2, "racks_per_room": 2,
             "tag_fractions": {"hipaa": 0.5},
             "inventory": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 16384},
                           "DISK_GB": 100}}]}},
        "workload": {
            "requests": requests, "samples": 20, "weigher": "pack",
            "arrival": {"process": "poisson", "rate": rate},
            "lifetime": {"distribution": "exponential", "mean": 40.0, "minimum": 1.0},
            "shapes": [
                {"name": "small", "weight": 5, "resources": {"VCPU": 1, "MEMORY_MB": 2048}},
                {"name": "big", "weight": 2, "resources": {"VCPU": 4, "MEMORY_MB": 8192,
                                                          "DISK_GB": 20}},
                {"name": "pair", "weight": 1, "count": 2, "group_pool": 2,
                 "resources": {"VCPU": 1, "MEMORY_MB": 1024},
                 "rules": [{"type": "anti_affinity", "level": "rack"}]},
                {"name": "hipaa", "weight": 1, "resources": {"VCPU": 1, "MEMORY_MB": 1024},
                 "rules": [{"type": "tags", "required": ["hipaa"]}]},
                {"name": "soft", "weight": 1, "group_pool": 1,
                 "resources": {"VCPU": 1, "MEMORY_MB": 1024},
                 "rules": [{"type": "anti_affinity", "level": "host", "hard": False}]},
            ],
            **workload,
        },
    }
    return parse(data)


def tree(requests: int = 40, rate: float = 0.5) -> Scenario:
    """tiny()'s workload on a root zone with two cells of 3 hosts, at two sites."""
    base = tiny(requests=requests, rate=rate)
    cell = {"count": 3, "hosts_per_rack": 1, "racks_per_room": 2, "name": "h",
            "tag_fractions": {"hipaa": 0.5},
            "inventory": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 16384},
                          "DISK_GB": 100}}
    data: dict[str, Any] = {
        "cluster": {"zone": {"name": "root", "site": "root", "children": [
            {"name": "east", "site": "east", "providers": [cell]},
            {"name": "west", "site": "west", "providers": [cell]}]}},
        "workload": {"requests": 1, "shapes": [{"name": "x", "resources": {"VCPU": 1}}]},
    }
    from dataclasses import replace

    return replace(parse(data), workload=base.workload, name="tree")


def assert_clean(summary: dict[str, Any]) -> None:
    """A run placed something and broke nothing that must hold."""
    assert summary["accepted"] > 0
    assert summary["hard_violations"] == 0
    assert summary["invariant_violations"] == 0, summary["invariant_examples"]
