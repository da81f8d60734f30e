"""From host facts to the reported inventory: reserved, ratios, hysteresis, shrinking."""

from __future__ import annotations

from typing import Any

from strato.agent.config import AgentConfig
from strato.agent.facts import HostFacts
from strato.agent.inventory import plan

CFG = AgentConfig(zone_url="http://z", uuid="u", name="n")


def facts(**used: float) -> HostFacts:
    return HostFacts(vcpu=8, memory_mb=16384, disk_gb=100, used=used)


def test_fresh_provider_gets_totals_and_static_reservations() -> None:
    cfg = AgentConfig(zone_url="http://z", reserved={"MEMORY_MB": 1024})
    p = plan(facts(), cfg, {}, {})
    assert p.changed
    assert p.inventories["MEMORY_MB"] == {"total": 16384, "reserved": 1024, "min_unit": 1,
                                          "max_unit": 16384, "step_size": 1,
                                          "allocation_ratio": 1.0}
    assert set(p.inventories) == {"VCPU", "MEMORY_MB", "DISK_GB"}


def test_external_usage_excludes_what_strato_placed() -> None:
    current: dict[str, dict[str, Any]] = {"VCPU": {
        "total": 8, "reserved": 0, "min_unit": 1, "max_unit": 8, "step_size": 1,
        "allocation_ratio": 4.0}}
    # 16 VCPU placed at ratio 4 is 4 real CPUs; the host sees 6.5 busy.
    p = plan(facts(VCPU=6.5, MEMORY_MB=5000), CFG, current, {"VCPU": 16, "MEMORY_MB": 2000})
    assert p.external == {"VCPU": 3, "MEMORY_MB": 3072, "DISK_GB": 0}
    assert p.inventories["VCPU"]["allocation_ratio"] == 4.0  # the zone's choice is kept
    off = AgentConfig(zone_url="http://z", measure=())
    assert plan(facts(VCPU=6.5), off, current, {}).inventories["VCPU"]["reserved"] == 0


def test_small_jitter_does_not_rewrite_the_inventory() -> None:
    first = plan(facts(MEMORY_MB=3000), CFG, {}, {})
    assert first.inventories["MEMORY_MB"]["reserved"] == 3072
    for jitter in (2900, 3100, 3300):  # within one 256 MiB granule of 3072
        assert not plan(facts(MEMORY_MB=jitter), CFG, first.inventories, {}).changed
    moved = plan(facts(MEMORY_MB=4000), CFG, first.inventories, {})
    assert moved.changed and moved.inventories["MEMORY_MB"]["reserved"] == 4096


def test_operator_classes_and_units_are_kept_and_ratio_enforced_when_configured() -> None:
    current = {"CUSTOM_FPGA": {"total": 2, "reserved": 0, "min_unit": 1, "max_unit": 2,
                               "step_size": 1, "allocation_ratio": 1.0},
               "MEMORY_MB": {"total": 16384, "reserved": 0, "min_unit": 512,
                             "max_unit": 16384, "step_size": 512, "allocation_ratio": 1.5}}
    cfg = AgentConfig(zone_url="http://z", allocation_ratio={"MEMORY_MB": 1.0}, measure=())
    p = plan(facts(), cfg, current, {})
    assert p.inventories["CUSTOM_FPGA"] == current["CUSTOM_FPGA"]
    mem = p.inventories["MEMORY_MB"]
    assert (mem["min_unit"], mem["step_size"], mem["allocation_ratio"]) == (512, 512, 1.0)


def test_shrinking_below_usage_is_reported_and_flagged() -> None:
    small = HostFacts(vcpu=8, memory_mb=4096, disk_gb=100, used={"MEMORY_MB": 8192})
    p = plan(small, CFG, {}, {"MEMORY_MB": 8192})
    assert p.inventories["MEMORY_MB"]["total"] == 4096
    assert p.over_capacity == {"MEMORY_MB": (4096, 8192)}
    # Reserved never exceeds total.
    busy = HostFacts(vcpu=2, memory_mb=1024, disk_gb=1, used={"MEMORY_MB": 5000})
    assert plan(busy, CFG, {}, {}).inventories["MEMORY_MB"]["reserved"] == 1024


def test_a_vanished_class_is_dropped_unless_allocated() -> None:
    nodisk = HostFacts(vcpu=8, memory_mb=16384, disk_gb=0)
    current = {"DISK_GB": {"total": 50, "reserved": 0, "min_unit": 1, "max_unit": 50,
                           "step_size": 1, "allocation_ratio": 1.0}}
    assert "DISK_GB" not in plan(nodisk, CFG, current, {}).inventories
    kept = plan(nodisk, CFG, current, {"DISK_GB": 10}).inventories["DISK_GB"]
    assert kept["total"] == kept["reserved"] == 50  # full, allocations untouched


def test_an_allocation_ratio_of_zero_set_in_the_zone_is_planned_for() -> None:
    """Placement (and the zone) take a ratio of 0 from 1.26: the class holds
    nothing. The agent divided what was placed by it."""
    current: dict[str, dict[str, Any]] = {"VCPU": {
        "total": 8, "reserved": 0, "min_unit": 1, "max_unit": 8, "step_size": 1,
        "allocation_ratio": 0.0}}
    p = plan(facts(VCPU=2.0), CFG, current, {"VCPU": 3})
    assert p.external["VCPU"] == 2
    assert p.inventories["VCPU"]["allocation_ratio"] == 0.0
