"""The engine agrees with the reference on Placement's own test worlds.

The worlds are the data of Placement's gabbi fixtures (built through the API by
tests/e2e/placement_fixtures.py): nested NUMA and NIC trees, sharing
providers over aggregates, agents with resourceless parents. The requests are
of the kinds its gabbi files ask (granular groups, isolate, any-traits,
forbidden traits, same_subtree, root_required), parsed as the route parses
them; each answer must equal the reference's, candidates and scores.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

import pytest
from fastapi.testclient import TestClient

from strato.api.microversion import MAX_VERSION
from strato.api.routes.allocation_candidates import parse_request
from strato.engine import ProviderIndex, Scorer, WeigherConfig, build
from strato.engine.loader import load_records
from strato.engine.reference import reference_candidates
from strato.store.db import Database
from tests.e2e import placement_fixtures as fx

EPS = 1e-9

WORLDS: dict[str, tuple[Callable[[fx.Builder], None], list[str]]] = {
    "granular": (fx.granular, [
        "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100",
        "resources1=VCPU:1&resources2=SRIOV_NET_VF:1&group_policy=isolate",
        "resources1=VGPU:1&resources2=DISK_GB:100&required2=CUSTOM_DISK_SSD&group_policy=none",
        "resources=VCPU:1&resources1=SRIOV_NET_VF:1,CUSTOM_NET_MBPS:100&group_policy=none",
        "resources=VCPU:1&required=in:HW_CPU_X86_AVX,HW_CPU_X86_MMX&required=!CUSTOM_FOO",
        "resources1=VCPU:1&required1=in:HW_CPU_X86_SSE,HW_CPU_X86_MMX&resources2=VGPU:1"
        "&required2=HW_GPU_API_DXVA&group_policy=none",
        "resources1=VGPU:3&resources2=VGPU:3&group_policy=none",
        "resources=DISK_GB:100&member_of=in:{AGGA},{AGGB}&member_of=!{AGGC}",
    ]),
    "numa_network": (fx.numa_network, [
        "resources=VCPU:1,DISK_GB:10",
        "resources_c=VCPU:1&resources_m=MEMORY_MB:1024&required_c=HW_NUMA_ROOT"
        "&same_subtree=_c,_m&group_policy=none",
        "resources_cpu=VCPU:1&resources_accel=FPGA:1&required_numa=HW_NUMA_ROOT"
        "&same_subtree=_cpu,_accel,_numa&group_policy=none",
        "resources1=CUSTOM_VF:1&required1=CUSTOM_PHYSNET1&resources2=CUSTOM_VF:1"
        "&required2=CUSTOM_PHYSNET2&required3=CUSTOM_HW_NIC_ROOT&same_subtree=1,2,3"
        "&group_policy=isolate",
        "resources=VCPU:1&root_required=COMPUTE_VOLUME_MULTI_ATTACH",
        "resources=VCPU:1&root_required=!CUSTOM_FOO&resources1=NET_BW_EGR_KILOBIT_PER_SEC:100"
        "&group_policy=none",
        "resources1=MEMORY_MB:512&resources2=MEMORY_MB:512&group_policy=none",
    ]),
    "shared_storage": (fx.shared_storage, [
        "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:100",
        "resources=VCPU:1,SRIOV_NET_VF:4",
        "resources=VCPU:1&resources1=SRIOV_NET_VF:1&resources2=SRIOV_NET_VF:1"
        "&group_policy=isolate",
        "resources=VCPU:1,DISK_GB:100&required=HW_CPU_X86_SSE",
    ]),
    "neutron_qos_multi_segment": (fx.neutron_qos_multi_segment, [
        "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10"
        "&resources-pps=NET_PACKET_RATE_KILOPACKET_PER_SEC:100&required-pps=CUSTOM_VNIC_TYPE_NORMAL"
        "&resources-bw=NET_BW_EGR_KILOBIT_PER_SEC:1000,NET_BW_IGR_KILOBIT_PER_SEC:1000"
        "&required-bw=CUSTOM_VNIC_TYPE_NORMAL"
        "&required-bw=in:CUSTOM_PHYSNET_MSN_S1,CUSTOM_PHYSNET_MSN_S2"
        "&same_subtree=-pps,-bw&group_policy=none",
    ]),
}


@pytest.mark.parametrize("world", sorted(WORLDS))
def test_engine_matches_reference_on_placement_worlds(world: str, client: TestClient,
                                                      sqlite_database: Database) -> None:
    make, queries = WORLDS[world]
    builder = fx.Builder(client)
    make(builder)
    with sqlite_database.read() as conn:
        records = load_records(conn)
    index = ProviderIndex.build(records)
    for weigher in ("spread", "pack"):
        scorer = Scorer(WeigherConfig(name=weigher))
        for q in queries:
            request = parse_request(parse_qsl(q.format(**builder.env)), MAX_VERSION)
            expected = reference_candidates(records, request, weigher=weigher)
            got = build(index, request, scorer)
            u = index.uuids
            mine = {(tuple(sorted((u[p], rc, a) for p, rc, a in c.items)),
                     tuple((s, tuple(sorted(u[p] for p in ps))) for s, ps in c.mappings)):
                    c.score for c in got}
            theirs = {(c.items, c.mappings): c.score for c in expected}
            assert mine.keys() == theirs.keys(), (world, q)
            assert len(got) == len(expected), (world, q)
            assert all(abs(mine[k] - theirs[k]) < EPS for k in mine), (world, q)
            assert expected or "VGPU:3" in q, (world, q)  # the requests do find something
