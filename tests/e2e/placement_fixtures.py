"""The data of Placement's gabbi fixtures, built through Strato's HTTP API.

Placement's gabbi files name a fixture (``fixtures: [GranularFixture]``) that
fills its database through its Python objects before the first request and
exports uuids for ``$ENVIRON[...]``. Here each fixture is rebuilt from its
description (providers, inventories, traits, aggregates, allocations) with
plain HTTP calls against a running server, so the same gabbi file runs
unchanged. A provider made without an explicit uuid gets one uuid per name
for the whole run (as Placement's uuid sentinels do), and an inventory's
``max_unit`` defaults to its total, as Placement's helper makes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

ADMIN = {"x-auth-token": "admin", "openstack-api-version": "placement latest",
         "accept": "application/json"}


def base_env() -> dict[str, str]:
    """The variables every fixture sets (Placement's APIFixture)."""
    env = {name: str(uuid.uuid4()) for name in (
        "RP_UUID", "RP_NAME", "RP_UUID1", "RP_NAME1", "RP_UUID2", "RP_NAME2", "PROJECT_ID",
        "ADMIN_PROJECT_ID", "SERVICE_PROJECT_ID", "USER_ID", "PROJECT_ID_ALT", "USER_ID_ALT",
        "INSTANCE_UUID", "MIGRATION_UUID", "CONSUMER_UUID", "PARENT_PROVIDER_UUID",
        "ALT_PARENT_PROVIDER_UUID")}
    env.update(CUSTOM_RES_CLASS="CUSTOM_IRON_NFV", CUSTOM_RES_CLASS1="CUSTOM_IRON_NFV1",
               CUSTOM_RES_CLASS2="CUSTOM_IRON_NFV2")
    return env


@dataclass
class Builder:
    """Small verbs over the API, each one request or two, failing loudly."""

    client: httpx.Client
    env: dict[str, str] = field(default_factory=base_env)
    names: dict[str, str] = field(default_factory=dict)

    def _call(self, method: str, path: str, body: Any = None, version: str = "latest") -> Any:
        headers = {**ADMIN, "openstack-api-version": f"placement {version}"}
        answer = self.client.request(method, path, json=body, headers=headers)
        if answer.status_code >= 400:
            raise RuntimeError(f"{method} {path} -> {answer.status_code}: {answer.text}")
        return answer.json() if answer.content else None

    def _generation(self, rp: str) -> int:
        return int(self._call("GET", f"/resource_providers/{rp}")["generation"])

    def sentinel(self, name: str) -> str:
        return self.names.setdefault(name, str(uuid.uuid4()))

    def provider(self, name: str, *aggs: str, parent: str | None = None,
                 rp_uuid: str | None = None) -> str:
        rp = rp_uuid or self.sentinel(name)
        body: dict[str, Any] = {"name": name, "uuid": rp}
        if parent:
            body["parent_provider_uuid"] = parent
        self._call("POST", "/resource_providers", body)
        if aggs:
            self.aggregates(rp, *aggs)
        return rp

    def aggregates(self, rp: str, *aggs: str) -> None:
        self._call("PUT", f"/resource_providers/{rp}/aggregates",
                   {"aggregates": list(aggs), "resource_provider_generation": self._generation(rp)})

    def resource_class(self, name: str) -> None:
        if name.startswith("CUSTOM_"):
            self._call("PUT", f"/resource_classes/{name}")

    def inventory(self, rp: str, rc: str, total: int, **fields: float) -> None:
        self.resource_class(rc)
        body: dict[str, Any] = {"resource_class": rc, "total": total, "max_unit": total,
                                "resource_provider_generation": self._generation(rp)}
        body.update(fields)
        self._call("POST", f"/resource_providers/{rp}/inventories", body)

    def traits(self, rp: str, *names: str) -> None:
        for name in names:
            if name.startswith("CUSTOM_"):
                self._call("PUT", f"/traits/{name}")
        self._call("PUT", f"/resource_providers/{rp}/traits",
                   {"traits": list(names), "resource_provider_generation": self._generation(rp)})

    def allocate(self, rp: str, used: dict[str, int], *, project: str, user: str,
                 consumer: str | None = None) -> str:
        consumer = consumer or str(uuid.uuid4())
        self._call("PUT", f"/allocations/{consumer}", {
            "allocations": {rp: {"resources": used}}, "project_id": project,
            "user_id": user, "consumer_generation": None}, version="1.28")
        return consumer


def allocation(b: Builder) -> None:
    """One provider (VCPU 10, DISK_GB 2048) with three consumers of two users."""
    env = b.env
    env["ALT_USER_ID"] = str(uuid.uuid4())
    rp = b.provider(env["RP_NAME"], rp_uuid=env["RP_UUID"])
    b.inventory(rp, "DISK_GB", 2048, step_size=10, min_unit=10, max_unit=1000)
    b.inventory(rp, "VCPU", 10, max_unit=10)
    who = {"project": env["PROJECT_ID"], "user": env["USER_ID"]}
    env["CONSUMER_0"] = b.allocate(rp, {"DISK_GB": 1000}, **who)
    env["CONSUMER_ID"] = b.allocate(rp, {"VCPU": 6}, **who)
    env["ALT_CONSUMER_ID"] = b.allocate(rp, {"DISK_GB": 20, "VCPU": 1},
                                        project=env["PROJECT_ID"], user=env["ALT_USER_ID"])
    env["ALT_RP_UUID"] = str(uuid.uuid4())
    env["ALT_RP_NAME"] = str(uuid.uuid4())


def shared_storage(b: Builder) -> None:
    """Two computes (NUMA children with PFs) and two sharing disks in one aggregate."""
    env = b.env
    agg = env["AGG_UUID"] = str(uuid.uuid4())
    cn1, cn2, ss, ss2 = (b.provider(name, agg) for name in ("cn1", "cn2", "ss", "ss2"))
    env.update(CN1_UUID=cn1, CN2_UUID=cn2, SS_UUID=ss, SS2_UUID=ss2)
    for i, cn in ((1, cn1), (2, cn2)):
        for j in (1, 2):
            numa = b.provider(f"numa{i}_{j}", parent=cn)
            pf = b.provider(f"pf{i}_{j}", parent=numa)
            env[f"NUMA{i}_{j}_UUID"] = numa
            env[f"PF{i}_{j}_UUID"] = pf
    for cn in (cn1, cn2):
        b.inventory(cn, "VCPU", 24, allocation_ratio=16.0)
        b.inventory(cn, "MEMORY_MB", 128 * 1024, allocation_ratio=1.5)
    b.traits(cn1, "HW_CPU_X86_SSE", "HW_CPU_X86_SSE2")
    b.inventory(cn2, "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
    for shared in (ss, ss2):
        b.inventory(shared, "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
        b.traits(shared, "MISC_SHARES_VIA_AGGREGATE")
    for i in (1, 2):
        for j in (1, 2):
            b.inventory(env[f"PF{i}_{j}_UUID"], "SRIOV_NET_VF", 8, allocation_ratio=1.0)


def numa_aggregate(b: Builder) -> None:
    """Two empty computes with VCPU on NUMA children; two sharing disks on aggregates."""
    env = b.env
    agg_a, agg_b, agg_c = (str(uuid.uuid4()) for _ in range(3))
    env.update(AGGA_UUID=agg_a, AGGB_UUID=agg_b, AGGC_UUID=agg_c)
    cn1 = env["CN1_UUID"] = b.provider("cn1", agg_a)
    cn2 = env["CN2_UUID"] = b.provider("cn2", agg_a, agg_b)
    ss1 = env["SS1_UUID"] = b.provider("ss1", agg_a)
    ss2 = env["SS2_UUID"] = b.provider("ss2", agg_c)
    numas = [b.provider("numa1_1", agg_c, parent=cn1), b.provider("numa1_2", parent=cn1),
             b.provider("numa2_1", parent=cn2), b.provider("numa2_2", parent=cn2)]
    for name, numa in zip(("NUMA1_1", "NUMA1_2", "NUMA2_1", "NUMA2_2"), numas, strict=True):
        env[f"{name}_UUID"] = numa
        b.inventory(numa, "VCPU", 24, allocation_ratio=16.0)
    for ss in (ss1, ss2):
        b.inventory(ss, "DISK_GB", 2000, reserved=100, allocation_ratio=1.0)
        b.traits(ss, "MISC_SHARES_VIA_AGGREGATE")


def numa_network(b: Builder, cn1: str | None = None, cn2: str | None = None) -> None:
    """cn1: no inventory, NUMA nodes with devices, two network agents; cn2: a plain
    compute with three NICs of PFs; a sharing disk in cn1's and cn2's aggregate."""
    env = b.env
    agg = env["AGGA_UUID"] = str(uuid.uuid4())
    ss1 = env["SS1_UUID"] = b.provider("ss1", agg)
    b.traits(ss1, "MISC_SHARES_VIA_AGGREGATE")
    b.inventory(ss1, "DISK_GB", 2000)

    cn1 = cn1 or b.provider("cn1", agg)
    b.aggregates(cn1, agg)
    b.traits(cn1, "COMPUTE_VOLUME_MULTI_ATTACH")
    env["CN1_UUID"] = cn1
    numas = []
    for i in (0, 1):
        numa = b.provider(f"numa{i}", parent=cn1)
        b.traits(numa, "HW_NUMA_ROOT", *(["CUSTOM_FOO"] if i == 1 else []))
        b.inventory(numa, "VCPU", 4)
        numas.append(numa)
        env[f"NUMA{i}_UUID"] = numa
    b.inventory(numas[0], "MEMORY_MB", 2048, min_unit=512, step_size=256)
    b.inventory(numas[1], "MEMORY_MB", 2048, min_unit=256, max_unit=1024)
    who = {"project": "numafx-project", "user": "numafx-user"}
    b.allocate(numas[0], {"VCPU": 2}, **who)
    fpga = env["FPGA0_UUID"] = b.provider("fpga0", parent=numas[0])
    b.inventory(fpga, "FPGA", 1)
    pgpu = env["PGPU0_UUID"] = b.provider("pgpu0", parent=numas[0])
    b.inventory(pgpu, "VGPU", 8)
    for i in (0, 1):
        fpga = env[f"FPGA1_{i}_UUID"] = b.provider(f"fpga1_{i}", parent=numas[1])
        b.inventory(fpga, "FPGA", 1)
    agent = env["SRIOV_AGENT_UUID"] = b.provider("sriov_agent", parent=cn1)
    b.traits(agent, "CUSTOM_VNIC_TYPE_DIRECT")
    for i in (1, 2):
        dev = env[f"ESN{i}_UUID"] = b.provider(f"esn{i}", parent=agent)
        b.traits(dev, f"CUSTOM_PHYSNET{i}")
        b.inventory(dev, "NET_BW_EGR_KILOBIT_PER_SEC", 10000 * i)
    agent = env["OVS_AGENT_UUID"] = b.provider("ovs_agent", parent=cn1)
    b.traits(agent, "CUSTOM_VNIC_TYPE_NORMAL")
    dev = env["BR_INT_UUID"] = b.provider("br_int", parent=agent)
    b.traits(dev, "CUSTOM_PHYSNET0")
    b.inventory(dev, "NET_BW_EGR_KILOBIT_PER_SEC", 1000)

    cn2 = cn2 or b.provider("cn2")
    b.aggregates(cn2, agg)
    b.inventory(cn2, "VCPU", 8)
    b.allocate(cn2, {"VCPU": 3}, **who)
    b.inventory(cn2, "MEMORY_MB", 2048, min_unit=1024, step_size=128)
    b.inventory(cn2, "DISK_GB", 1000)
    b.traits(cn2, "CUSTOM_FOO")
    env["CN2_UUID"] = cn2
    nics = []
    for i in (1, 2, 3):
        nic = env[f"NIC{i}_UUID"] = b.provider(f"nic{i}", parent=cn2)
        b.traits(nic, "CUSTOM_HW_NIC_ROOT")
        nics.append(nic)
    pfs = [("1_1", 0, 1, 4), ("1_2", 0, 2, 4), ("2_1", 1, 1, 2), ("2_2", 1, 2, 2),
           ("2_3", 1, 1, 2), ("2_4", 1, 2, 2), ("3_1", 2, 1, 8)]
    for suffix, nic_index, physnet, vfs in pfs:
        pf = env[f"PF{suffix}_UUID"] = b.provider(f"pf{suffix}", parent=nics[nic_index])
        b.traits(pf, f"CUSTOM_PHYSNET{physnet}")
        b.inventory(pf, "CUSTOM_VF", vfs)


def deep_numa_network(b: Builder) -> None:
    """numa_network with cn1 and cn2 under two parents sharing one grandparent."""
    gp1 = b.provider("gp1")
    p1 = b.provider("p1", parent=gp1)
    p2 = b.provider("p2", parent=gp1)
    numa_network(b, cn1=b.provider("cn1", parent=p1), cn2=b.provider("cn2", parent=p2))


def non_shared_storage(b: Builder) -> None:
    """Three computes with VCPU, MEMORY_MB and local DISK_GB; three aggregates unset."""
    env = b.env
    for name in ("AGGA_UUID", "AGGB_UUID", "AGGC_UUID"):
        env[name] = str(uuid.uuid4())
    for i in (1, 2, 3):
        cn = env[f"CN{i}_UUID"] = b.provider(f"cn{i}")
        b.inventory(cn, "VCPU", 24)
        b.inventory(cn, "MEMORY_MB", 128 * 1024)
        b.inventory(cn, "DISK_GB", 2000)


def granular(b: Builder) -> None:
    """Three computes and three sharing providers over aggregates A, B and C."""
    env = b.env
    agg_a, agg_b, agg_c = (b.sentinel(name) for name in ("aggA", "aggB", "aggC"))
    env.update(AGGA=agg_a, AGGB=agg_b, AGGC=agg_c)
    b.resource_class("CUSTOM_NET_MBPS")
    left = env["CN_LEFT"] = b.provider("cn_left", agg_a)
    for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500), ("VGPU", 8),
                      ("SRIOV_NET_VF", 8), ("CUSTOM_NET_MBPS", 4000)):
        b.inventory(left, rc, total)
    b.traits(left, "HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "HW_GPU_API_DXVA",
             "HW_NIC_DCB_PFC", "CUSTOM_FOO")
    middle = env["CN_MIDDLE"] = b.provider("cn_middle", agg_a, agg_b)
    for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("SRIOV_NET_VF", 8),
                      ("CUSTOM_NET_MBPS", 4000)):
        b.inventory(middle, rc, total)
    b.traits(middle, "HW_CPU_X86_AVX", "HW_CPU_X86_AVX2", "HW_CPU_X86_SSE",
             "HW_NIC_ACCEL_TLS")
    right = env["CN_RIGHT"] = b.provider("cn_right", agg_b, agg_c)
    for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500)):
        b.inventory(right, rc, total)
    b.inventory(right, "VGPU", 8, max_unit=2)
    b.traits(right, "HW_CPU_X86_MMX", "HW_GPU_API_DXVA", "CUSTOM_DISK_SSD")
    disk1 = env["SHR_DISK_1"] = b.provider("shr_disk_1", agg_a)
    b.inventory(disk1, "DISK_GB", 1000)
    b.traits(disk1, "MISC_SHARES_VIA_AGGREGATE", "CUSTOM_DISK_SSD")
    disk2 = env["SHR_DISK_2"] = b.provider("shr_disk_2", agg_a, agg_b)
    b.inventory(disk2, "DISK_GB", 1000)
    b.traits(disk2, "MISC_SHARES_VIA_AGGREGATE")
    net = env["SHR_NET"] = b.provider("shr_net", agg_c)
    b.inventory(net, "SRIOV_NET_VF", 16)
    b.inventory(net, "CUSTOM_NET_MBPS", 40000)
    b.traits(net, "MISC_SHARES_VIA_AGGREGATE")


# compute name → (the physnet of each bridge and PF, the bandwidth of each)
_SEGMENTS = {
    "compute0": (("OTHER",), ("OTHER",), 5000, 10000),
    "compute1": (("MSN_S1",), ("MSN_S1",), 5000, 10000),
    "compute2": (("MSN_S2",), ("MSN_S2",), 5000, 10000),
    "compute3": (("MSN_S1", "MSN_S2"), ("MSN_S1", "MSN_S2"), 1000, 1000),
}
_DIRECT = ("CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_VNIC_TYPE_DIRECT_PHYSICAL",
           "CUSTOM_VNIC_TYPE_MACVTAP")


def neutron_qos_multi_segment(b: Builder) -> None:
    """Four computes, each with an OVS agent (packet rate) over bridges and an SR-IOV
    agent over PFs (bandwidth), on different physnets; compute3 on two."""
    env = b.env
    sriov_agents = {}
    for cn_name, (bridges, pfs, bridge_bw, pf_bw) in _SEGMENTS.items():
        cn = env[cn_name] = b.provider(cn_name)
        for rc, total in (("VCPU", 8), ("MEMORY_MB", 4096), ("DISK_GB", 500)):
            b.inventory(cn, rc, total)
        ovs = env[f"{cn_name}:ovs_agent"] = b.provider(f"{cn_name}:Open vSwitch agent",
                                                       parent=cn)
        b.inventory(ovs, "NET_PACKET_RATE_KILOPACKET_PER_SEC", 1000)
        b.traits(ovs, "CUSTOM_VNIC_TYPE_NORMAL")
        for i, physnet in enumerate(bridges):
            suffix = "" if i == 0 else str(i + 1)
            br = env[f"{cn_name}:br_ex{suffix}"] = b.provider(
                f"{cn_name}:Open vSwitch agent:br-ex{suffix}", parent=ovs)
            b.inventory(br, "NET_BW_EGR_KILOBIT_PER_SEC", bridge_bw)
            b.inventory(br, "NET_BW_IGR_KILOBIT_PER_SEC", bridge_bw)
            b.traits(br, "CUSTOM_VNIC_TYPE_NORMAL", f"CUSTOM_PHYSNET_{physnet}")
        sriov = sriov_agents[cn_name] = b.provider(f"{cn_name}:NIC Switch agent", parent=cn)
        b.traits(sriov, *_DIRECT)
        for i, physnet in enumerate(pfs):
            pf = env[f"{cn_name}:pf{i}"] = b.provider(
                f"{cn_name}:NIC Switch agent:enp129s0f{i}", parent=sriov)
            b.inventory(pf, "NET_BW_EGR_KILOBIT_PER_SEC", pf_bw)
            b.inventory(pf, "NET_BW_IGR_KILOBIT_PER_SEC", pf_bw)
            b.traits(pf, *_DIRECT, f"CUSTOM_PHYSNET_{physnet}")
        env[f"{cn_name}:sriov_agent"] = sriov
    # Placement's fixture exports compute2's agent under compute3's name; kept as is.
    env["compute3:sriov_agent"] = sriov_agents["compute2"]


def _api_only(b: Builder) -> None:
    """The bare API: only the variables."""


# Placement's fixture class → how its data is built. The policy fixtures only
# change who may do what, which needs no data.
FIXTURES: dict[str, Callable[[Builder], None]] = {
    "APIFixture": _api_only,
    "AllocationFixture": allocation,
    "CORSFixture": _api_only,
    "DeepNUMANetworkFixture": deep_numa_network,
    "GranularFixture": granular,
    "LegacyRBACPolicyFixture": _api_only,
    "NUMAAggregateFixture": numa_aggregate,
    "NUMANetworkFixture": numa_network,
    "NeutronQoSMultiSegmentFixture": neutron_qos_multi_segment,
    "NonSharedStorageFixture": non_shared_storage,
    "OpenPolicyFixture": _api_only,
    "SecureRBACPolicyFixture": _api_only,
    "SharedStorageFixture": shared_storage,
}


# Placement's fixture class → the server flags its configuration amounts to.
SERVER_FLAGS: dict[str, list[str]] = {
    "CORSFixture": ["--cors-allowed-origin", "http://valid.example.com",
                    "--cors-allow-header", "openstack-api-version"],
    "OpenPolicyFixture": ["--policy", "open"],
    "SecureRBACPolicyFixture": ["--policy", "secure"],
}


def build(fixture: str, base_url: str) -> dict[str, str]:
    """Build `fixture`'s data on the server at `base_url`; the variables it exports."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        builder = Builder(client)
        FIXTURES[fixture](builder)
        return builder.env
