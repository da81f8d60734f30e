"""The catalogue: one ordered list of requests sent, in the same order, to
Strato and to OpenStack Placement 16.0.0.

The cases share state (a case may depend on what an earlier one created), so
the order matters and every uuid is fixed here: both servers see the same
paths and bodies, and their generations stay aligned. Cases are built by small
functions, one per area, most of them as tables crossed with the microversion
boundaries in `BOUNDARIES`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

LATEST = "latest"
# The versions where the representation or the rules change.
BOUNDARIES = ("1.0", "1.14", "1.20", "1.26", "1.28", "1.33", "1.36", "1.37", "1.38", "1.39",
              LATEST)
NO_HEADER = None
_NS = uuid.UUID("6f1b6a3e-3b8e-4f59-9d0c-7f6c0b9f0c11")


def u(name: str) -> str:
    """A fixed uuid for `name`, the same on every run."""
    return str(uuid.uuid5(_NS, name))


CN1, CN2, CN3, NUMA0, NUMA1, SS, TMP, ODD = (u(n) for n in (
    "cn1", "cn2", "cn3", "numa0", "numa1", "ss", "tmp", "odd"))
AGG1, AGG2 = u("agg1"), u("agg2")
C7RP = u("c7rp")
C1, C2, C3, C4, C5, C6, C7 = (u(f"consumer{i}") for i in range(1, 8))
PROJ, USER = u("project").replace("-", ""), u("user").replace("-", "")


@dataclass(frozen=True)
class Gen:
    """In a body: the provider's generation as the receiving server has it now.

    For the cases whose point is not the generation: each server gets its own,
    so one generation that drifted (a divergence reported where it happened)
    does not turn every later write into a 409 on one side."""
    provider: str


@dataclass(frozen=True)
class ConsumerGen:
    """In a body: the consumer's generation on the receiving server (None if
    it has no allocations)."""
    consumer: str


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    version: str | None = LATEST
    body: Any = None
    raw: bytes | None = None          # sent as is (with `headers`) instead of `body`
    headers: dict[str, str] = field(default_factory=dict)


def _v(version: str | None) -> str:
    return "none" if version is None else version


def _at(versions: tuple[str | None, ...], name: str, method: str, path: str,
        body: Any = None) -> Iterator[Case]:
    for v in versions:
        yield Case(f"{name}@{_v(v)}", method, path, v, body)


def root_and_versions() -> Iterator[Case]:
    yield from _at((NO_HEADER, "1.0", LATEST), "root", "GET", "/")
    for label, value in (("bad-minor", "placement 1.a"), ("major-2", "placement 2.0"),
                         ("too-high", "placement 1.99"), ("too-low", "placement 0.9"),
                         ("other-service", "compute 2.1"), ("no-version", "placement"),
                         ("spaces", "placement  1.10"), ("leading-zero", "placement 1.010"),
                         ("latest-upper", "placement LATEST"), ("neg", "placement -1.2")):
        yield Case(f"mv-header-{label}", "GET", "/resource_providers", NO_HEADER,
                   headers={"OpenStack-API-Version": value})
    yield Case("no-such-path", "GET", "/nope")
    yield Case("method-not-allowed", "PATCH", "/resource_providers", body={})
    yield Case("accept-html", "GET", "/resource_providers", headers={"Accept": "text/html"})


def providers() -> Iterator[Case]:
    rp = "/resource_providers"
    yield Case("rp-create-1.0", "POST", rp, "1.0", {"name": "cn1", "uuid": CN1})
    yield Case("rp-create-1.20", "POST", rp, "1.20", {"name": "cn2", "uuid": CN2})
    yield Case("rp-create-latest", "POST", rp, LATEST, {"name": "cn3", "uuid": CN3})
    yield Case("rp-create-noname", "POST", rp, LATEST, {"uuid": TMP})
    yield Case("rp-create-empty-name", "POST", rp, LATEST, {"name": ""})
    yield Case("rp-create-long-name", "POST", rp, LATEST, {"name": "x" * 201})
    yield Case("rp-create-name-200", "POST", rp, "1.0", {"name": "y" * 200, "uuid": TMP})
    yield Case("rp-delete-name-200", "DELETE", f"{rp}/{TMP}", LATEST)
    yield Case("rp-create-name-int", "POST", rp, LATEST, {"name": 5})
    yield Case("rp-create-dup-name", "POST", rp, LATEST, {"name": "cn1"})
    yield Case("rp-create-dup-uuid", "POST", rp, LATEST, {"name": "other", "uuid": CN1})
    yield Case("rp-create-unknown-field", "POST", rp, LATEST, {"name": "z", "foo": 1})
    yield Case("rp-create-bad-uuid", "POST", rp, LATEST, {"name": "z", "uuid": "abc"})
    yield Case("rp-create-null-uuid", "POST", rp, LATEST, {"name": "z1", "uuid": None})
    yield Case("rp-create-braced-uuid", "POST", rp, LATEST,
               {"name": "braced", "uuid": "{" + u("braced") + "}"})
    yield Case("rp-create-urn-uuid", "POST", rp, LATEST,
               {"name": "urn", "uuid": "urn:uuid:" + u("urn")})
    yield Case("rp-create-upper-uuid", "POST", rp, LATEST,
               {"name": "upper", "uuid": u("upper").upper()})
    yield Case("rp-create-nodash-uuid", "POST", rp, LATEST,
               {"name": "nodash", "uuid": u("nodash").replace("-", "")})
    yield Case("rp-get-braced", "GET", f"{rp}/{{{CN1}}}", LATEST)
    yield Case("rp-get-upper", "GET", f"{rp}/{CN1.upper()}", LATEST)
    yield Case("rp-get-nodash", "GET", f"{rp}/{CN1.replace('-', '')}", LATEST)
    yield Case("rp-get-bad", "GET", f"{rp}/not-a-uuid", LATEST)
    yield Case("rp-get-missing", "GET", f"{rp}/{u('missing')}", LATEST)
    yield Case("rp-get-upper-created", "GET", f"{rp}/{u('upper')}", LATEST)
    yield Case("rp-get-nodash-created", "GET", f"{rp}/{u('nodash')}", LATEST)
    yield Case("rp-create-parent-1.13", "POST", rp, "1.13",
               {"name": "numa0", "uuid": NUMA0, "parent_provider_uuid": CN1})
    yield Case("rp-create-parent-missing", "POST", rp, LATEST,
               {"name": "numa0", "uuid": NUMA0, "parent_provider_uuid": u("missing")})
    yield Case("rp-create-parent-self", "POST", rp, LATEST,
               {"name": "self", "uuid": ODD, "parent_provider_uuid": ODD})
    yield Case("rp-create-parent-bad", "POST", rp, LATEST,
               {"name": "numa0", "uuid": NUMA0, "parent_provider_uuid": "nope"})
    yield Case("rp-create-child-1.14", "POST", rp, "1.14",
               {"name": "numa0", "uuid": NUMA0, "parent_provider_uuid": CN1})
    yield Case("rp-create-child-latest", "POST", rp, LATEST,
               {"name": "numa1", "uuid": NUMA1, "parent_provider_uuid": CN1})
    yield Case("rp-create-ss", "POST", rp, LATEST, {"name": "ss", "uuid": SS})
    yield Case("rp-create-tmp", "POST", rp, LATEST, {"name": "tmp", "uuid": TMP})
    for v in BOUNDARIES:
        yield Case(f"rp-get@{v}", "GET", f"{rp}/{NUMA0}", v)
    for v in ("1.0", "1.14", "1.20", LATEST):
        yield Case(f"rp-list@{v}", "GET", f"{rp}?name=cn1", v)
    yield Case("rp-update-name", "PUT", f"{rp}/{TMP}", LATEST, {"name": "tmp2"})
    yield Case("rp-update-dup-name", "PUT", f"{rp}/{TMP}", LATEST, {"name": "cn1"})
    yield Case("rp-update-empty-name", "PUT", f"{rp}/{TMP}", LATEST, {"name": ""})
    yield Case("rp-update-noname", "PUT", f"{rp}/{TMP}", LATEST, {})
    yield Case("rp-update-uuid-field", "PUT", f"{rp}/{TMP}", LATEST, {"name": "t", "uuid": TMP})
    yield Case("rp-update-missing", "PUT", f"{rp}/{u('missing')}", LATEST, {"name": "zz"})
    yield Case("rp-reparent-1.36", "PUT", f"{rp}/{TMP}", "1.36",
               {"name": "tmp2", "parent_provider_uuid": CN2})
    yield Case("rp-set-parent-1.14", "PUT", f"{rp}/{TMP}", "1.14",
               {"name": "tmp2", "parent_provider_uuid": CN2})
    yield Case("rp-reparent-1.14", "PUT", f"{rp}/{TMP}", "1.14",
               {"name": "tmp2", "parent_provider_uuid": CN3})
    yield Case("rp-reparent-1.37", "PUT", f"{rp}/{TMP}", "1.37",
               {"name": "tmp2", "parent_provider_uuid": CN3})
    yield Case("rp-parent-cycle", "PUT", f"{rp}/{CN3}", LATEST,
               {"name": "cn3", "parent_provider_uuid": TMP})
    yield Case("rp-parent-self", "PUT", f"{rp}/{CN3}", LATEST,
               {"name": "cn3", "parent_provider_uuid": CN3})
    yield Case("rp-unparent-1.36", "PUT", f"{rp}/{TMP}", "1.36",
               {"name": "tmp2", "parent_provider_uuid": None})
    yield Case("rp-unparent-1.37", "PUT", f"{rp}/{TMP}", "1.37",
               {"name": "tmp2", "parent_provider_uuid": None})
    yield Case("rp-delete-tmp", "DELETE", f"{rp}/{TMP}", LATEST)
    yield Case("rp-delete-again", "DELETE", f"{rp}/{TMP}", LATEST)
    yield Case("rp-delete-with-children", "DELETE", f"{rp}/{CN1}", LATEST)
    yield Case("rp-delete-bad-uuid", "DELETE", f"{rp}/nope", LATEST)
    yield Case("rp-delete-braced", "DELETE", f"{rp}/{{{u('braced')}}}", LATEST)


def provider_queries() -> Iterator[Case]:
    rp = "/resource_providers"
    rows: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("name", "name=cn2", ("1.0",)),
        ("uuid", f"uuid={CN2}", ("1.0",)),
        ("uuid-bad", "uuid=abc", ("1.0",)),
        ("uuid-upper", f"uuid={CN2.upper()}", ("1.0",)),
        ("unknown-param", "foo=bar", ("1.0", LATEST)),
        ("member_of", f"member_of=in:{AGG1},{AGG2}", ("1.2", "1.3", LATEST)),
        ("member_of-bad", "member_of=in:abc", ("1.3",)),
        ("member_of-not", f"member_of=!{AGG1}", ("1.31", "1.32")),
        ("member_of-not-in", f"member_of=!in:{AGG1},{AGG2}", ("1.32",)),
        ("member_of-repeat", f"member_of={AGG1}&member_of={AGG2}", ("1.23", "1.24")),
        ("member_of-empty", "member_of=", ("1.3",)),
        ("resources", "resources=VCPU:1", ("1.3", "1.4", LATEST)),
        ("resources-bad-class", "resources=NOPE:1", ("1.4",)),
        ("resources-custom-missing", "resources=CUSTOM_NOPE:1", ("1.4",)),
        ("resources-zero", "resources=VCPU:0", ("1.4",)),
        ("resources-neg", "resources=VCPU:-1", ("1.4",)),
        ("resources-noamount", "resources=VCPU", ("1.4",)),
        ("resources-dup", "resources=VCPU:1,VCPU:2", ("1.4",)),
        ("resources-empty", "resources=", ("1.4",)),
        ("in_tree", f"in_tree={CN1}", ("1.13", "1.14", LATEST)),
        ("in_tree-bad", "in_tree=abc", ("1.14",)),
        ("in_tree-missing", f"in_tree={u('missing')}", ("1.14",)),
        ("required", "required=HW_CPU_X86_AVX2", ("1.17", "1.18", LATEST)),
        ("required-unknown", "required=CUSTOM_NOPE", ("1.18",)),
        ("required-forbidden", "required=!HW_CPU_X86_AVX2", ("1.21", "1.22")),
        ("required-in", "required=in:HW_CPU_X86_AVX2,HW_CPU_X86_SSE", ("1.38", "1.39")),
        ("required-empty", "required=", ("1.18",)),
        ("required-bad-name", "required=lower_case", ("1.18",)),
        ("required-conflict", "required=HW_CPU_X86_AVX2,!HW_CPU_X86_AVX2", ("1.22",)),
        ("resources+member_of", f"resources=VCPU:1&member_of={AGG1}", ("1.4",)),
    )
    for label, query, versions in rows:
        for v in versions:
            yield Case(f"rp-query-{label}@{v}", "GET", f"{rp}?{query}", v)


def inventories() -> Iterator[Case]:
    inv = f"/resource_providers/{CN1}/inventories"

    def put(gen: int, **classes: dict[str, Any]) -> dict[str, Any]:
        return {"resource_provider_generation": gen, "inventories": classes}

    yield Case("inv-get-empty", "GET", inv, LATEST)
    bad = (
        ("min>max", {"total": 8, "min_unit": 4, "max_unit": 2}),
        ("step-zero", {"total": 8, "step_size": 0}),
        ("reserved>total", {"total": 8, "reserved": 9}),
        ("total-zero", {"total": 0}),
        ("total-neg", {"total": -1}),
        ("total-huge", {"total": 2 ** 31}),
        ("total-float", {"total": 8.5}),
        ("total-string", {"total": "8"}),
        ("ratio-zero", {"total": 8, "allocation_ratio": 0}),
        ("ratio-neg", {"total": 8, "allocation_ratio": -1.0}),
        ("ratio-tiny", {"total": 8, "allocation_ratio": 0.0001}),
        ("ratio-huge", {"total": 8, "allocation_ratio": 3.5e38}),
        ("ratio-string", {"total": 8, "allocation_ratio": "1.0"}),
        ("min-zero", {"total": 8, "min_unit": 0}),
        ("max-zero", {"total": 8, "max_unit": 0}),
        ("unknown-field", {"total": 8, "foo": 1}),
        ("no-total", {"reserved": 1}),
        ("step>total", {"total": 8, "step_size": 9}),
        ("max>total", {"total": 8, "max_unit": 9}),
    )
    # Each on a provider of its own: one the peer accepts must not shift the
    # generations the later cases send.
    for label, record in bad:
        target = u(f"inv-{label}")
        yield Case(f"inv-put-{label}-rp", "POST", "/resource_providers", LATEST,
                   {"name": f"inv-{label}", "uuid": target})
        yield Case(f"inv-put-{label}", "PUT", f"/resource_providers/{target}/inventories",
                   LATEST, put(0, VCPU=record))
        yield Case(f"inv-put-{label}-get", "GET", f"/resource_providers/{target}/inventories",
                   LATEST)
        yield Case(f"inv-put-{label}-del", "DELETE", f"/resource_providers/{target}", LATEST)
    yield Case("inv-put-reserved=total@1.25", "PUT", inv, "1.25",
               put(0, VCPU={"total": 8, "reserved": 8}))
    yield Case("inv-put-reserved=total@1.26", "PUT", inv, "1.26",
               put(0, VCPU={"total": 8, "reserved": 8}))
    yield Case("inv-put-unknown-class", "PUT", inv, LATEST, put(1, CUSTOM_NOPE={"total": 1}))
    yield Case("inv-put-bad-class", "PUT", inv, LATEST, put(1, nope={"total": 1}))
    yield Case("inv-put-no-gen", "PUT", inv, LATEST, {"inventories": {"VCPU": {"total": 8}}})
    yield Case("inv-put-stale-gen", "PUT", inv, LATEST, put(0, VCPU={"total": 8}))
    yield Case("inv-put-gen-string", "PUT", inv, LATEST, put("1", VCPU={"total": 8}))  # type: ignore[arg-type]
    yield Case("inv-put", "PUT", inv, LATEST,
               put(1, VCPU={"total": 8, "allocation_ratio": 2.0, "max_unit": 8},
                   MEMORY_MB={"total": 4096, "step_size": 256, "min_unit": 256,
                              "reserved": 512},
                   DISK_GB={"total": 100}))
    yield Case("inv-post-existing", "POST", inv, LATEST,
               {"resource_provider_generation": 2, "resource_class": "VCPU", "total": 4})
    yield Case("inv-post-new", "POST", inv, LATEST,
               {"resource_provider_generation": 2, "resource_class": "SRIOV_NET_VF",
                "total": 4})
    yield Case("inv-post-stale", "POST", inv, LATEST,
               {"resource_provider_generation": 2, "resource_class": "PCI_DEVICE", "total": 4})
    yield Case("inv-post-reserved>total", "POST", inv, LATEST,
               {"resource_provider_generation": 3, "resource_class": "PCI_DEVICE",
                "total": 4, "reserved": 5})
    yield Case("inv-post-noclass", "POST", inv, LATEST,
               {"resource_provider_generation": 3, "total": 4})
    yield from _at(("1.0", "1.26", LATEST), "inv-get", "GET", inv)
    yield from _at(("1.0", LATEST), "inv-get-one", "GET", f"{inv}/VCPU")
    yield Case("inv-get-one-absent", "GET", f"{inv}/PCI_DEVICE", LATEST)
    yield Case("inv-get-one-unknown", "GET", f"{inv}/CUSTOM_NOPE", LATEST)
    yield Case("inv-get-missing-rp", "GET", f"/resource_providers/{u('missing')}/inventories")
    yield Case("inv-put-one", "PUT", f"{inv}/SRIOV_NET_VF", LATEST,
               {"resource_provider_generation": Gen(CN1), "total": 6})
    yield Case("inv-put-one-stale", "PUT", f"{inv}/SRIOV_NET_VF", LATEST,
               {"resource_provider_generation": 3, "total": 7})
    yield Case("inv-put-one-absent", "PUT", f"{inv}/PCI_DEVICE", LATEST,
               {"resource_provider_generation": 4, "total": 7})
    yield Case("inv-put-one-class-in-body", "PUT", f"{inv}/SRIOV_NET_VF", LATEST,
               {"resource_provider_generation": 4, "total": 6, "resource_class": "VCPU"})
    yield Case("inv-put-one-reserved>total", "PUT", f"{inv}/SRIOV_NET_VF", LATEST,
               {"resource_provider_generation": 4, "total": 6, "reserved": 7})
    yield Case("inv-delete-one", "DELETE", f"{inv}/SRIOV_NET_VF", LATEST)
    yield Case("inv-delete-one-absent", "DELETE", f"{inv}/SRIOV_NET_VF", LATEST)
    yield Case("inv-delete-all@1.4", "DELETE", inv, "1.4")
    for name, target, gen in (("cn2", CN2, 0), ("numa0", NUMA0, 0), ("numa1", NUMA1, 0),
                              ("ss", SS, 0)):
        records: dict[str, Any] = {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048}}
        if name == "ss":
            records = {"DISK_GB": {"total": 1000}}
        yield Case(f"inv-put-{name}", "PUT", f"/resource_providers/{target}/inventories",
                   LATEST, {"resource_provider_generation": gen, "inventories": records})


def resource_classes() -> Iterator[Case]:
    rc = "/resource_classes"
    yield from _at(("1.1", "1.2", LATEST), "rc-list", "GET", rc)
    yield Case("rc-get-std", "GET", f"{rc}/VCPU", LATEST)
    yield Case("rc-get-missing", "GET", f"{rc}/CUSTOM_NOPE", LATEST)
    yield Case("rc-get-bad", "GET", f"{rc}/nope", LATEST)
    yield Case("rc-post", "POST", rc, LATEST, {"name": "CUSTOM_GOLD"})
    yield Case("rc-post-dup", "POST", rc, LATEST, {"name": "CUSTOM_GOLD"})
    yield Case("rc-post-std", "POST", rc, LATEST, {"name": "VCPU"})
    yield Case("rc-post-lower", "POST", rc, LATEST, {"name": "CUSTOM_gold"})
    yield Case("rc-post-noprefix", "POST", rc, LATEST, {"name": "GOLD"})
    yield Case("rc-post-long", "POST", rc, LATEST, {"name": "CUSTOM_" + "A" * 250})
    yield Case("rc-post-extra", "POST", rc, LATEST, {"name": "CUSTOM_X", "foo": 1})
    yield Case("rc-post-empty", "POST", rc, LATEST, {})
    yield Case("rc-put@1.2", "PUT", f"{rc}/CUSTOM_GOLD", "1.2", {"name": "CUSTOM_SILVER"})
    yield Case("rc-put@1.7-new", "PUT", f"{rc}/CUSTOM_SILVER", "1.7")
    yield Case("rc-put@1.7-exists", "PUT", f"{rc}/CUSTOM_SILVER", "1.7")
    yield Case("rc-put@1.7-std", "PUT", f"{rc}/VCPU", "1.7")
    yield Case("rc-put@1.7-bad", "PUT", f"{rc}/CUSTOM_bad", "1.7")
    yield Case("rc-put@1.7-noprefix", "PUT", f"{rc}/BRONZE", "1.7")
    yield Case("rc-delete-std", "DELETE", f"{rc}/VCPU", LATEST)
    yield Case("rc-delete-missing", "DELETE", f"{rc}/CUSTOM_NOPE", LATEST)
    yield Case("rc-delete", "DELETE", f"{rc}/CUSTOM_SILVER", LATEST)
    yield Case("rc-put-bronze", "PUT", f"{rc}/CUSTOM_BRONZE", LATEST)
    yield Case("rc-inv-bronze", "POST", f"/resource_providers/{CN3}/inventories", LATEST,
               {"resource_provider_generation": Gen(CN3), "resource_class": "CUSTOM_BRONZE",
                "total": 5})
    yield Case("rc-delete-in-use", "DELETE", f"{rc}/CUSTOM_BRONZE", LATEST)


def traits() -> Iterator[Case]:
    t = "/traits"
    yield from _at(("1.5", "1.6"), "traits-list", "GET", f"{t}?name=startswith:HW_CPU_X86_AVX")
    for label, query in (("in", "name=in:HW_CPU_X86_AVX2,CUSTOM_NOPE"),
                         ("bad-prefix", "name=foo:HW"), ("associated", "associated=true"),
                         ("associated-bad", "associated=maybe"), ("unknown", "foo=1"),
                         ("startswith-custom", "name=startswith:CUSTOM")):
        yield Case(f"traits-query-{label}", "GET", f"{t}?{query}", LATEST)
    yield Case("trait-put", "PUT", f"{t}/CUSTOM_FOO", LATEST)
    yield Case("trait-put-again", "PUT", f"{t}/CUSTOM_FOO", LATEST)
    yield Case("trait-put-std", "PUT", f"{t}/HW_CPU_X86_AVX2", LATEST)
    yield Case("trait-put-noprefix", "PUT", f"{t}/FOO", LATEST)
    yield Case("trait-put-lower", "PUT", f"{t}/CUSTOM_foo", LATEST)
    yield Case("trait-put-long", "PUT", f"{t}/CUSTOM_{'A' * 300}", LATEST)
    yield Case("trait-put-dash", "PUT", f"{t}/CUSTOM_A-B", LATEST)
    yield Case("trait-get", "GET", f"{t}/CUSTOM_FOO", LATEST)
    yield Case("trait-get-std", "GET", f"{t}/HW_CPU_X86_AVX2", LATEST)
    yield Case("trait-get-missing", "GET", f"{t}/CUSTOM_NOPE", LATEST)
    yield Case("trait-delete-std", "DELETE", f"{t}/HW_CPU_X86_AVX2", LATEST)
    yield Case("trait-delete-missing", "DELETE", f"{t}/CUSTOM_NOPE", LATEST)
    rt = f"/resource_providers/{CN1}/traits"
    yield from _at(("1.5", "1.6"), "rp-traits-get", "GET", rt)
    for label, body in (
            ("unknown", {"resource_provider_generation": 4, "traits": ["CUSTOM_NOPE"]}),
            ("no-gen", {"traits": ["CUSTOM_FOO"]}),
            ("stale", {"resource_provider_generation": 0, "traits": ["CUSTOM_FOO"]}),
            ("dup", {"resource_provider_generation": 4, "traits": ["CUSTOM_FOO", "CUSTOM_FOO"]}),
            ("not-list", {"resource_provider_generation": 4, "traits": "CUSTOM_FOO"}),
            ("extra", {"resource_provider_generation": 4, "traits": [], "foo": 1}),
            ("bad-name", {"resource_provider_generation": 4, "traits": ["lower"]})):
        yield Case(f"rp-traits-put-{label}", "PUT", rt, LATEST, body)
    yield Case("rp-traits-put", "PUT", rt, LATEST,
               {"resource_provider_generation": Gen(CN1),
                "traits": ["CUSTOM_FOO", "HW_CPU_X86_AVX2"]})
    yield Case("rp-traits-put-same", "PUT", rt, LATEST,
               {"resource_provider_generation": Gen(CN1),
                "traits": ["HW_CPU_X86_AVX2", "CUSTOM_FOO"]})
    yield Case("rp-traits-get-after", "GET", rt, LATEST)
    yield Case("trait-delete-in-use", "DELETE", f"{t}/CUSTOM_FOO", LATEST)
    yield Case("traits-query-associated-after", "GET", f"{t}?associated=true", LATEST)
    yield Case("rp-traits-missing-rp", "GET", f"/resource_providers/{u('missing')}/traits")
    yield Case("rp-traits-delete-cn2", "DELETE", f"/resource_providers/{CN2}/traits", LATEST)
    yield Case("rp-query-required-after", "GET",
               "/resource_providers?required=CUSTOM_FOO,!HW_CPU_X86_SSE", LATEST)


def aggregates() -> Iterator[Case]:
    ag = f"/resource_providers/{CN1}/aggregates"
    yield from _at(("1.0", "1.1", "1.19", LATEST), "agg-get", "GET", ag)
    yield Case("agg-put@1.1", "PUT", ag, "1.1", [AGG1])
    yield Case("agg-put@1.1-bad-uuid", "PUT", ag, "1.1", ["abc"])
    yield Case("agg-put@1.1-dup", "PUT", ag, "1.1", [AGG1, AGG1])
    yield Case("agg-put@1.1-dict", "PUT", ag, "1.1", {"aggregates": [AGG1]})
    yield Case("agg-put@1.19-list", "PUT", ag, "1.19", [AGG1])
    yield Case("agg-put@1.19-no-gen", "PUT", ag, "1.19", {"aggregates": [AGG1]})
    yield Case("agg-put@1.19-stale", "PUT", ag, "1.19",
               {"aggregates": [AGG1], "resource_provider_generation": 0})
    yield Case("agg-put@1.19", "PUT", ag, "1.19",
               {"aggregates": [AGG1, AGG2], "resource_provider_generation": 6})
    yield Case("agg-put@1.19-extra", "PUT", ag, "1.19",
               {"aggregates": [], "resource_provider_generation": 7, "foo": 1})
    yield Case("agg-put-ss", "PUT", f"/resource_providers/{SS}/aggregates", LATEST,
               {"aggregates": [AGG1], "resource_provider_generation": 1})
    yield Case("agg-put-braced", "PUT", f"/resource_providers/{CN2}/aggregates", "1.1",
               ["{" + AGG2 + "}"])
    yield Case("agg-put-upper", "PUT", f"/resource_providers/{CN2}/aggregates", "1.1",
               [AGG2.upper()])
    yield Case("agg-get-cn2", "GET", f"/resource_providers/{CN2}/aggregates", LATEST)
    yield Case("agg-missing-rp", "GET", f"/resource_providers/{u('missing')}/aggregates")
    yield Case("rp-query-member_of-after", "GET",
               f"/resource_providers?member_of=in:{AGG1},{AGG2}", LATEST)
    yield Case("rp-query-member_of-not-after", "GET",
               f"/resource_providers?member_of=!{AGG2}", LATEST)


def allocations() -> Iterator[Case]:
    a = "/allocations"
    old = {"allocations": [{"resource_provider": {"uuid": CN1}, "resources": {"VCPU": 1}}]}
    yield Case("alloc-put@1.0", "PUT", f"{a}/{C1}", "1.0", old)
    yield Case("alloc-put@1.0-extra", "PUT", f"{a}/{C2}", "1.0", {**old, "foo": 1})
    yield Case("alloc-put@1.8-noproject", "PUT", f"{a}/{C2}", "1.8", old)
    yield Case("alloc-put@1.8", "PUT", f"{a}/{C2}", "1.8",
               {**old, "project_id": PROJ, "user_id": USER})
    yield Case("alloc-put@1.12-list", "PUT", f"{a}/{C3}", "1.12",
               {**old, "project_id": PROJ, "user_id": USER})

    def new(resources: dict[str, int], rp: str = CN1, **extra: Any) -> dict[str, Any]:
        return {"allocations": {rp: {"resources": resources}}, "project_id": PROJ,
                "user_id": USER, **extra}

    yield Case("alloc-put@1.12", "PUT", f"{a}/{C3}", "1.12", new({"VCPU": 1, "MEMORY_MB": 512}))
    yield Case("alloc-put@1.28-no-gen", "PUT", f"{a}/{C4}", "1.28", new({"VCPU": 1}))
    yield Case("alloc-put@1.28-stale-new", "PUT", f"{a}/{C4}", "1.28",
               new({"VCPU": 1}, consumer_generation=3))
    yield Case("alloc-put@1.28", "PUT", f"{a}/{C4}", "1.28",
               new({"VCPU": 1}, consumer_generation=None))
    yield Case("alloc-put@1.28-null-existing", "PUT", f"{a}/{C4}", "1.28",
               new({"VCPU": 2}, consumer_generation=None))
    yield Case("alloc-put@1.28-stale", "PUT", f"{a}/{C4}", "1.28",
               new({"VCPU": 2}, consumer_generation=5))
    yield Case("alloc-put@1.28-update", "PUT", f"{a}/{C4}", "1.28",
               new({"VCPU": 2}, consumer_generation=1))
    yield Case("alloc-put@1.38-no-type", "PUT", f"{a}/{C5}", "1.38",
               new({"VCPU": 1}, consumer_generation=None))
    yield Case("alloc-put@1.37-type", "PUT", f"{a}/{C5}", "1.37",
               new({"VCPU": 1}, consumer_generation=None, consumer_type="INSTANCE"))
    yield Case("alloc-put@1.38-bad-type", "PUT", f"{a}/{C5}", "1.38",
               new({"VCPU": 1}, consumer_generation=None, consumer_type="lower"))
    yield Case("alloc-put@1.38-long-type", "PUT", f"{a}/{C5}", "1.38",
               new({"VCPU": 1}, consumer_generation=None, consumer_type="A" * 256))
    yield Case("alloc-put@1.38", "PUT", f"{a}/{C5}", "1.38",
               new({"VCPU": 1}, consumer_generation=None, consumer_type="INSTANCE"))
    yield Case("alloc-put@1.38-retype", "PUT", f"{a}/{C5}", "1.38",
               new({"VCPU": 1}, consumer_generation=1, consumer_type="MIGRATION"))
    for label, body in (
            ("over-capacity", new({"VCPU": 100})),
            ("no-inventory", new({"DISK_GB": 1}, rp=CN2)),
            ("unknown-class", new({"CUSTOM_NOPE": 1})),
            ("bad-class", new({"nope": 1})),
            ("missing-rp", new({"VCPU": 1}, rp=u("missing"))),
            ("bad-rp", new({"VCPU": 1}, rp="abc")),
            ("zero", new({"VCPU": 0})),
            ("neg", new({"VCPU": -1})),
            ("string-amount", new({"VCPU": "1"})),
            ("step", new({"MEMORY_MB": 100})),
            ("below-min", new({"MEMORY_MB": 0})),
            ("above-max", new({"VCPU": 9})),
            ("empty-resources", new({})),
            ("bad-project", new({"VCPU": 1}, project_id="")),
            ("long-project", new({"VCPU": 1}, project_id="p" * 256)),
            ("no-user", {"allocations": {CN1: {"resources": {"VCPU": 1}}},
                         "project_id": PROJ, "consumer_generation": None}),
            ("extra", new({"VCPU": 1}, consumer_generation=None, foo=1)),
            ("generation-in-rp", {"allocations": {CN1: {"resources": {"VCPU": 1},
                                                        "generation": 99}},
                                  "project_id": PROJ, "user_id": USER,
                                  "consumer_generation": None})):
        yield Case(f"alloc-put-{label}", "PUT", f"{a}/{C6}", "1.28", body)
    # On a consumer of its own: Placement keeps an empty consumer record behind.
    yield Case("alloc-put-empty-allocs", "PUT", f"{a}/{C7}", "1.28",
               {"allocations": {}, "project_id": PROJ, "user_id": USER,
                "consumer_generation": None})
    yield Case("alloc-put-empty-allocs-rp", "POST", "/resource_providers", LATEST,
               {"name": "c7rp", "uuid": C7RP})
    yield Case("alloc-put-empty-allocs-inv", "PUT", f"/resource_providers/{C7RP}/inventories",
               LATEST, {"resource_provider_generation": 0,
                        "inventories": {"VCPU": {"total": 4}}})
    yield Case("alloc-put-empty-allocs-again", "PUT", f"{a}/{C7}", "1.28",
               new({"VCPU": 1}, rp=C7RP, consumer_generation=None))
    yield Case("alloc-put-empty-allocs-cleanup", "DELETE", f"{a}/{C7}", LATEST)
    yield Case("alloc-put-empty-allocs-rp-delete", "DELETE", f"/resource_providers/{C7RP}",
               LATEST)
    yield Case("alloc-put-bad-consumer", "PUT", f"{a}/abc", "1.28",
               new({"VCPU": 1}, consumer_generation=None))
    yield Case("alloc-put-upper-consumer", "PUT", f"{a}/{C6.upper()}", "1.28",
               new({"VCPU": 1}, consumer_generation=None))
    for v in ("1.0", "1.12", "1.28", "1.37", "1.38", LATEST):
        yield Case(f"alloc-get@{v}", "GET", f"{a}/{C5}", v)
    yield Case("alloc-get-unknown", "GET", f"{a}/{u('nobody')}", LATEST)
    yield Case("alloc-get-bad", "GET", f"{a}/abc", LATEST)
    for v in ("1.0", "1.28", LATEST):
        yield Case(f"rp-allocs@{v}", "GET", f"/resource_providers/{CN1}/allocations", v)
    yield Case("rp-allocs-missing", "GET", f"/resource_providers/{u('missing')}/allocations")
    post = {C1: {"allocations": {CN1: {"resources": {"VCPU": 1}}}, "project_id": PROJ,
                 "user_id": USER, "consumer_generation": 1},
            C6: {"allocations": {CN2: {"resources": {"VCPU": 1}}}, "project_id": PROJ,
                 "user_id": USER, "consumer_generation": None}}
    yield Case("alloc-post@1.12", "POST", a, "1.12", post)
    yield Case("alloc-post@1.28-stale", "POST", a, "1.28",
               {**post, C1: {**post[C1], "consumer_generation": 7}})
    yield Case("alloc-post@1.38-no-type", "POST", a, "1.38", post)
    yield Case("alloc-post-bad-key", "POST", a, "1.28", {"abc": post[C1]})
    yield Case("alloc-post-empty", "POST", a, "1.28", {})
    yield Case("alloc-post-over", "POST", a, "1.28",
               {C6: {**post[C6], "allocations": {CN2: {"resources": {"VCPU": 99}}}}})
    yield Case("alloc-post@1.28", "POST", a, "1.28",
               {C1: {**post[C1], "consumer_generation": ConsumerGen(C1)},
                C6: {**post[C6], "consumer_generation": ConsumerGen(C6)}})
    yield Case("alloc-post-empty-allocs", "POST", a, "1.28",
               {C6: {"allocations": {}, "project_id": PROJ, "user_id": USER,
                     "consumer_generation": 1}})
    yield Case("inv-delete-in-use", "DELETE", f"/resource_providers/{CN1}/inventories/VCPU")
    yield Case("inv-delete-all-in-use", "DELETE", f"/resource_providers/{CN1}/inventories",
               "1.5")
    yield Case("inv-put-drop-in-use", "PUT", f"/resource_providers/{CN1}/inventories", LATEST,
               {"resource_provider_generation": Gen(CN1),
                "inventories": {"DISK_GB": {"total": 1}}})
    yield Case("inv-put-below-usage", "PUT", f"/resource_providers/{CN1}/inventories", LATEST,
               {"resource_provider_generation": Gen(CN1),
                "inventories": {"VCPU": {"total": 1}, "MEMORY_MB": {"total": 4096},
                                "DISK_GB": {"total": 100}}})
    # CN1's VCPU is now over capacity: a write may keep or lower its usage.
    same = {"allocations": {CN1: {"resources": {"VCPU": 1}}}, "project_id": PROJ,
            "user_id": USER, "consumer_generation": ConsumerGen(C2)}
    yield Case("alloc-over-capacity-same", "PUT", f"{a}/{C2}", "1.28", same)
    yield Case("alloc-over-capacity-more", "PUT", f"{a}/{C2}", "1.28",
               {**same, "allocations": {CN1: {"resources": {"VCPU": 2}}}})
    yield Case("alloc-over-capacity-new", "PUT", f"{a}/{u('newcomer')}", "1.28",
               {**same, "consumer_generation": None})
    yield Case("inv-get-gen", "GET", f"/resource_providers/{CN1}", LATEST)
    yield Case("rp-delete-with-allocs", "DELETE", f"/resource_providers/{CN2}", LATEST)
    yield Case("alloc-delete", "DELETE", f"{a}/{C3}", LATEST)
    yield Case("alloc-delete-again", "DELETE", f"{a}/{C3}", LATEST)
    yield Case("alloc-delete-bad", "DELETE", f"{a}/abc", LATEST)


def usages() -> Iterator[Case]:
    ru = f"/resource_providers/{CN1}/usages"
    yield from _at(("1.0", LATEST), "rp-usages", "GET", ru)
    yield Case("rp-usages-missing", "GET", f"/resource_providers/{u('missing')}/usages")
    rows = (("none", "", ("1.8", "1.9")),
            ("project", f"project_id={PROJ}", ("1.9", "1.37", "1.38", LATEST)),
            ("project+user", f"project_id={PROJ}&user_id={USER}", ("1.9",)),
            ("empty-project", "project_id=", ("1.9",)),
            ("user-only", f"user_id={USER}", ("1.9",)),
            ("consumer_type", f"project_id={PROJ}&consumer_type=INSTANCE", ("1.37", "1.38")),
            ("consumer_type-all", f"project_id={PROJ}&consumer_type=all", ("1.38",)),
            ("consumer_type-unknown", f"project_id={PROJ}&consumer_type=unknown", ("1.38",)),
            ("consumer_type-bad", f"project_id={PROJ}&consumer_type=lower", ("1.38",)),
            ("unknown-param", f"project_id={PROJ}&foo=1", ("1.9",)))
    for label, query, versions in rows:
        for v in versions:
            yield Case(f"usages-{label}@{v}", "GET", f"/usages?{query}", v)


# Placement's reshaper policy wants the service role (Nova's own token).
_SERVICE = {"X-Roles": "admin,service"}


def reshaper() -> Iterator[Case]:
    def _reshape(name: str, version: str, body: Any) -> Case:
        return Case(name, "POST", "/reshaper", version, body, headers=_SERVICE)

    body = {"inventories": {NUMA0: {"resource_provider_generation": Gen(NUMA0),
                                    "inventories": {"VCPU": {"total": 4},
                                                    "MEMORY_MB": {"total": 2048}}}},
            "allocations": {C1: {"allocations": {CN1: {"resources": {"VCPU": 1}}},
                                 "project_id": PROJ, "user_id": USER,
                                 "consumer_generation": ConsumerGen(C1)}}}
    yield _reshape("reshape@1.29", "1.29", body)
    yield _reshape("reshape-missing-allocs", "1.30", {"inventories": body["inventories"]})
    inv = body["inventories"][NUMA0]
    alloc = body["allocations"][C1]
    yield _reshape("reshape-stale-rp", "1.30",
                   {**body, "inventories": {NUMA0: {**inv, "resource_provider_generation": 0}}})
    yield _reshape("reshape-stale-consumer", "1.30",
                   {**body, "allocations": {C1: {**alloc, "consumer_generation": 9}}})
    yield _reshape("reshape-missing-rp", "1.30", {**body, "inventories": {u("missing"): inv}})
    yield _reshape("reshape-extra", "1.30", {**body, "foo": 1})
    yield _reshape("reshape@1.38-no-type", "1.38", body)
    yield _reshape("reshape@1.30", "1.30", body)
    yield Case("reshape-get-alloc", "GET", f"/allocations/{C1}", LATEST)


def candidates() -> Iterator[Case]:
    ac = "/allocation_candidates"
    rows: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("basic", "resources=VCPU:1", ("1.9", "1.10", "1.12", "1.17", "1.27", "1.29", "1.34",
                                       LATEST)),
        ("none", "", ("1.10", "1.25", "1.33")),
        ("zero", "resources=VCPU:0", ("1.10",)),
        ("neg", "resources=VCPU:-1", ("1.10",)),
        ("bad-class", "resources=nope:1", ("1.10",)),
        ("unknown-class", "resources=CUSTOM_NOPE:1", ("1.10",)),
        ("noamount", "resources=VCPU", ("1.10",)),
        ("dup-class", "resources=VCPU:1,VCPU:1", ("1.10",)),
        ("dup-param", "resources=VCPU:1&resources=MEMORY_MB:256", ("1.10", LATEST)),
        ("unknown-param", "resources=VCPU:1&foo=bar", ("1.10", LATEST)),
        ("limit", "resources=VCPU:1&limit=1", ("1.15", "1.16")),
        ("limit-zero", "resources=VCPU:1&limit=0", ("1.16",)),
        ("limit-neg", "resources=VCPU:1&limit=-1", ("1.16",)),
        ("limit-abc", "resources=VCPU:1&limit=abc", ("1.16",)),
        ("required", "resources=VCPU:1&required=CUSTOM_FOO", ("1.16", "1.17")),
        ("required-unknown", "resources=VCPU:1&required=CUSTOM_NOPE", ("1.17",)),
        ("required-forbidden", "resources=VCPU:1&required=!CUSTOM_FOO", ("1.21", "1.22")),
        ("required-in", "resources=VCPU:1&required=in:CUSTOM_FOO,HW_CPU_X86_SSE",
         ("1.38", "1.39")),
        ("required-not-in", "resources=VCPU:1&required=!in:CUSTOM_FOO,HW_CPU_X86_SSE",
         ("1.39",)),
        ("required-empty", "resources=VCPU:1&required=", ("1.17",)),
        ("member_of", f"resources=VCPU:1&member_of={AGG1}", ("1.20", "1.21")),
        ("member_of-not", f"resources=VCPU:1&member_of=!{AGG1}", ("1.31", "1.32")),
        ("member_of-bad", "resources=VCPU:1&member_of=abc", ("1.21",)),
        ("granular", "resources1=VCPU:1&resources2=MEMORY_MB:256&group_policy=isolate",
         ("1.24", "1.25", LATEST)),
        ("granular-no-policy", "resources1=VCPU:1&resources2=MEMORY_MB:256",
         ("1.25", "1.26")),
        ("granular-one-no-policy", "resources1=VCPU:1", ("1.25",)),
        ("granular-none", "resources=VCPU:1&resources1=MEMORY_MB:256&group_policy=none",
         ("1.25",)),
        ("group_policy-bad", "resources1=VCPU:1&resources2=VCPU:1&group_policy=bogus",
         ("1.25",)),
        ("granular-orphan-required", "resources=VCPU:1&required1=CUSTOM_FOO", ("1.25",)),
        ("granular-orphan-member_of", f"resources=VCPU:1&member_of1={AGG1}", ("1.25",)),
        ("granular-suffix-str", "resources_A=VCPU:1&resources_B=MEMORY_MB:256&group_policy=none",
         ("1.32", "1.33")),
        ("granular-suffix-long", f"resources_{'A' * 65}=VCPU:1", ("1.33",)),
        ("granular-suffix-bad", "resources_a!=VCPU:1", ("1.33",)),
        ("granular-suffix-zero", "resources0=VCPU:1", ("1.25",)),
        ("in_tree", f"resources=VCPU:1&in_tree={CN1}", ("1.30", "1.31")),
        ("in_tree-bad", "resources=VCPU:1&in_tree=abc", ("1.31",)),
        ("in_tree-missing", f"resources=VCPU:1&in_tree={u('missing')}", ("1.31",)),
        ("in_tree-granular", f"resources1=VCPU:1&in_tree1={NUMA0}", ("1.31",)),
        ("root_required", "resources=VCPU:1&root_required=CUSTOM_FOO", ("1.34", "1.35")),
        ("root_required-not", "resources=VCPU:1&root_required=!CUSTOM_FOO", ("1.35",)),
        ("root_required-in", "resources=VCPU:1&root_required=in:CUSTOM_FOO,HW_CPU_X86_SSE",
         ("1.38", "1.39")),
        ("root_required-unknown", "resources=VCPU:1&root_required=CUSTOM_NOPE", ("1.35",)),
        ("root_required-granular", "resources=VCPU:1&root_required1=CUSTOM_FOO", ("1.35",)),
        ("same_subtree", "resources_A=VCPU:1&resources_B=MEMORY_MB:256&group_policy=none"
         "&same_subtree=_A,_B", ("1.35", "1.36", LATEST)),
        ("same_subtree-unknown", "resources_A=VCPU:1&group_policy=none&same_subtree=_A,_Z",
         ("1.36",)),
        ("same_subtree-no-underscore", "resources_A=VCPU:1&same_subtree=A", ("1.36",)),
        ("same_subtree-resourceless", "resources_A=VCPU:1&required_B=CUSTOM_FOO"
         "&group_policy=none&same_subtree=_A,_B", ("1.36",)),
        ("resourceless-alone", "required_B=CUSTOM_FOO", ("1.36",)),
        ("nested", "resources=VCPU:8", ("1.28", "1.29")),
        ("sharing", "resources=VCPU:1,DISK_GB:10", ("1.28", LATEST)),
        ("over", "resources=VCPU:1000", ("1.10",)),
    )
    for label, query, versions in rows:
        for v in versions:
            yield Case(f"ac-{label}@{v}", "GET", f"{ac}?{query}", v)


def bad_input() -> Iterator[Case]:
    rp = "/resource_providers"
    yield Case("json-invalid", "POST", rp, LATEST, raw=b"{not json",
               headers={"Content-Type": "application/json"})
    yield Case("json-text-plain", "POST", rp, LATEST, raw=b'{"name": "tp"}',
               headers={"Content-Type": "text/plain"})
    yield Case("json-no-content-type", "POST", rp, LATEST, raw=b'{"name": "nct"}')
    yield Case("json-array", "POST", rp, LATEST, [{"name": "arr"}])
    yield Case("json-null", "POST", rp, LATEST, raw=b"null",
               headers={"Content-Type": "application/json"})
    yield Case("json-empty", "POST", rp, LATEST, raw=b"",
               headers={"Content-Type": "application/json"})
    yield Case("json-deep", "POST", rp, LATEST,
               raw=(b'{"name": ' + b"[" * 600 + b"]" * 600 + b"}"),
               headers={"Content-Type": "application/json"})
    yield Case("json-bad-utf8", "POST", rp, LATEST, raw=b'{"name": "\xff\xfe"}',
               headers={"Content-Type": "application/json"})
    yield Case("json-charset", "POST", rp, LATEST, raw=b'{"name": "charset"}',
               headers={"Content-Type": "application/json; charset=utf-8"})
    yield Case("json-dup-keys", "POST", rp, LATEST, raw=b'{"name": "a", "name": "dupkey"}',
               headers={"Content-Type": "application/json"})
    yield Case("json-put-text", "PUT", f"/resource_providers/{CN3}/inventories", LATEST,
               raw=b"x", headers={"Content-Type": "text/plain"})
    yield Case("json-nan", "PUT", f"/resource_providers/{CN3}/inventories", LATEST,
               raw=b'{"resource_provider_generation": 1, "inventories": '
                   b'{"VCPU": {"total": 1, "allocation_ratio": NaN}}}',
               headers={"Content-Type": "application/json"})
    yield Case("name-unicode", "POST", rp, LATEST, {"name": "n\u00e9\u2603"})
    yield Case("name-nul", "POST", rp, LATEST, {"name": "a\u0000b", "uuid": u("nul")})
    yield Case("name-nul-delete", "DELETE", f"{rp}/{u('nul')}", LATEST)
    yield Case("query-bad-utf8", "GET", f"{rp}?name=%ff", LATEST)
    yield Case("path-uuid-encoded", "GET", f"{rp}/{CN1}%2F", LATEST)


def http_edges() -> Iterator[Case]:
    """Methods, paths and headers around the resources."""
    rp = "/resource_providers"
    yield Case("trailing-slash", "GET", f"{rp}/", LATEST)
    yield Case("head-rps", "HEAD", rp, LATEST)
    yield Case("options-rps", "OPTIONS", rp, LATEST)
    yield Case("put-collection", "PUT", rp, LATEST, {"name": "x"})
    yield Case("delete-root", "DELETE", "/", LATEST)
    yield Case("post-traits", "POST", "/traits", LATEST, {"name": "CUSTOM_X"})
    yield Case("mv-two-services", "GET", rp, NO_HEADER,
               headers={"OpenStack-API-Version": "compute 2.1, placement 1.14"})
    yield Case("mv-legacy-header", "GET", rp, NO_HEADER,
               headers={"X-OpenStack-Placement-API-Version": "1.14"})
    yield Case("content-type-upper", "POST", rp, LATEST,
               raw=b'{"name": "ctupper", "uuid": "%s"}' % u("ctupper").encode(),
               headers={"Content-Type": "Application/JSON"})
    yield Case("content-type-upper-delete", "DELETE", f"{rp}/{u('ctupper')}", LATEST)
    yield Case("content-type-json-patch", "POST", rp, LATEST, raw=b'{"name": "ctpatch"}',
               headers={"Content-Type": "application/json-patch+json"})
    yield Case("accept-any", "GET", rp, LATEST, headers={"Accept": "*/*"})
    yield Case("accept-xml", "GET", f"{rp}/{u('missing')}", LATEST,
               headers={"Accept": "application/xml"})
    yield Case("huge-amount-query", "GET", "/allocation_candidates?resources=VCPU:99999999999",
               LATEST)
    yield Case("huge-limit", "GET", "/allocation_candidates?resources=VCPU:1&limit=99999999999",
               LATEST)
    yield Case("huge-alloc", "PUT", f"/allocations/{u('huge')}", LATEST,
               {"allocations": {NUMA1: {"resources": {"VCPU": 2 ** 31}}}, "project_id": PROJ,
                "user_id": USER, "consumer_generation": None, "consumer_type": "INSTANCE"})
    yield Case("rc-put@1.6-body", "PUT", "/resource_classes/CUSTOM_BRONZE", "1.6",
               {"name": "CUSTOM_IRON"})
    yield Case("rc-put@1.7-body", "PUT", "/resource_classes/CUSTOM_TIN", "1.7",
               {"name": "CUSTOM_TIN"})
    yield Case("rp-in_tree-child", "GET", f"{rp}?in_tree={NUMA1}", LATEST)
    yield Case("rp-resources-nested", "GET", f"{rp}?resources=VCPU:1,MEMORY_MB:512", LATEST)
    yield Case("ac-member_of-in-twice", "GET",
               f"/allocation_candidates?resources=VCPU:1&member_of=in:{AGG1},{AGG2}"
               f"&member_of={AGG1}", LATEST)
    yield Case("ac-required-twice", "GET", "/allocation_candidates?resources=VCPU:1"
               "&required=HW_CPU_X86_AVX2&required=!CUSTOM_FOO", LATEST)
    yield Case("ac-required-twice@1.38", "GET", "/allocation_candidates?resources=VCPU:1"
               "&required=HW_CPU_X86_AVX2&required=!CUSTOM_FOO", "1.38")
    yield Case("ac-same_subtree-twice", "GET", "/allocation_candidates?resources_A=VCPU:1"
               "&resources_B=MEMORY_MB:256&group_policy=none&same_subtree=_A&same_subtree=_B",
               LATEST)
    yield Case("ac-suffix-mixed", "GET", "/allocation_candidates?resources1=VCPU:1"
               "&resources_1=VCPU:1&group_policy=none", LATEST)
    yield Case("ac-spaces", "GET", "/allocation_candidates?resources=%20VCPU%20:%201", LATEST)
    yield Case("ac-spaces-amount", "GET", "/allocation_candidates?resources=VCPU:%201%20",
               LATEST)
    yield Case("rp-resources-spaces", "GET", f"{rp}?resources=%20VCPU:1", LATEST)
    yield Case("ac-group_policy-twice", "GET", "/allocation_candidates?resources1=VCPU:1"
               "&resources2=VCPU:1&group_policy=none&group_policy=isolate", LATEST)
    yield Case("usages-twice", "GET", f"/usages?project_id={PROJ}&project_id=other", LATEST)
    yield Case("rp-name-twice", "GET", f"{rp}?name=cn1&name=cn2", LATEST)
    yield Case("alloc-list-of-consumer-type", "PUT", f"/allocations/{u('ctype')}", LATEST,
               {"allocations": {NUMA1: {"resources": {"VCPU": 1}}}, "project_id": PROJ,
                "user_id": USER, "consumer_generation": None, "consumer_type": ["INSTANCE"]})
    yield Case("alloc-post-consumer-type", "POST", "/allocations", LATEST,
               {u("ctype2"): {"allocations": {NUMA1: {"resources": {"VCPU": 1}}},
                              "project_id": PROJ, "user_id": USER,
                              "consumer_generation": None, "consumer_type": "MIGRATION"}})
    yield Case("usages-consumer-type-migration", "GET",
               f"/usages?project_id={PROJ}&consumer_type=MIGRATION", LATEST)
    yield Case("alloc-get-ctype2", "GET", f"/allocations/{u('ctype2')}", LATEST)
    yield Case("rp-move-subtree@1.37", "PUT", f"{rp}/{NUMA1}", "1.37",
               {"name": "numa1", "parent_provider_uuid": CN3})
    yield Case("rp-move-subtree-back@1.37", "PUT", f"{rp}/{NUMA1}", "1.37",
               {"name": "numa1", "parent_provider_uuid": CN1})
    yield Case("rp-delete-parent-with-allocs", "DELETE", f"{rp}/{CN3}", LATEST)
    yield Case("trait-255", "PUT", "/traits/CUSTOM_" + "A" * 248, LATEST)
    yield Case("trait-256", "PUT", "/traits/CUSTOM_" + "A" * 249, LATEST)
    yield Case("trait-prefix-only", "PUT", "/traits/CUSTOM_", LATEST)
    yield Case("rc-255", "PUT", "/resource_classes/CUSTOM_" + "A" * 248, LATEST)
    yield Case("rc-256", "PUT", "/resource_classes/CUSTOM_" + "A" * 249, LATEST)
    yield Case("rc-prefix-only", "PUT", "/resource_classes/CUSTOM_", LATEST)
    yield Case("traits-in-empty", "GET", "/traits?name=in:", LATEST)
    yield Case("traits-startswith-empty", "GET", "/traits?name=startswith:", LATEST)
    yield Case("delete-rp-aggregates", "DELETE", f"{rp}/{CN1}/aggregates", LATEST)
    yield Case("put-rp-allocations", "PUT", f"{rp}/{CN1}/allocations", LATEST, {})
    yield Case("get-allocations", "GET", "/allocations", LATEST)
    yield Case("post-usages", "POST", "/usages", LATEST, {})
    yield Case("rp-create-null-parent", "POST", rp, "1.14",
               {"name": "nullparent", "uuid": u("nullparent"), "parent_provider_uuid": None})
    yield Case("rp-create-null-parent-delete", "DELETE", f"{rp}/{u('nullparent')}", LATEST)
    mapped = {"allocations": {NUMA1: {"resources": {"VCPU": 1}}}, "project_id": PROJ,
              "user_id": USER, "consumer_generation": None, "consumer_type": "INSTANCE",
              "mappings": {"": [NUMA1]}}
    yield Case("alloc-put-mappings@1.33", "PUT", f"/allocations/{u('mapped')}", "1.33",
               {k: v for k, v in mapped.items() if k != "consumer_type"})
    yield Case("alloc-put-mappings", "PUT", f"/allocations/{u('mapped')}", LATEST, mapped)
    yield Case("alloc-post-mappings@1.34", "POST", "/allocations", "1.34",
               {u("mapped2"): {k: v for k, v in mapped.items() if k != "consumer_type"}})
    yield Case("alloc-post-mappings-bad", "POST", "/allocations", "1.34",
               {u("mapped3"): {**{k: v for k, v in mapped.items() if k != "consumer_type"},
                               "mappings": {"": "notalist"}}})
    yield Case("rp-resources-in_tree", "GET", f"{rp}?resources=VCPU:1&in_tree={CN1}", LATEST)
    yield Case("rp-required-in_tree", "GET", f"{rp}?required=!CUSTOM_FOO&in_tree={CN1}", LATEST)
    yield Case("rp-member_of-multi@1.24", "GET",
               f"{rp}?member_of=in:{AGG1},{AGG2}&member_of=!{AGG2}", "1.32")


def final_state() -> Iterator[Case]:
    """What each server ended with, so a difference hidden in a write shows."""
    yield Case("final-rps", "GET", "/resource_providers", LATEST)
    for name, rp in (("cn1", CN1), ("cn3", CN3), ("numa0", NUMA0), ("ss", SS)):
        yield Case(f"final-inv-{name}", "GET", f"/resource_providers/{rp}/inventories", LATEST)
        yield Case(f"final-usage-{name}", "GET", f"/resource_providers/{rp}/usages", LATEST)
    yield Case("final-rcs", "GET", "/resource_classes?", LATEST)
    yield Case("final-traits", "GET", "/traits?name=startswith:CUSTOM", LATEST)
    for i, c in enumerate((C1, C2, C3, C4, C5, C6), 1):
        yield Case(f"final-alloc-c{i}", "GET", f"/allocations/{c}", LATEST)
    yield Case("final-usages", "GET", f"/usages?project_id={PROJ}", LATEST)


SECTIONS = (root_and_versions, providers, provider_queries, inventories, resource_classes,
            traits, aggregates, allocations, usages, reshaper, candidates, bad_input,
            http_edges, final_state)


def catalogue() -> list[Case]:
    cases = [c for section in SECTIONS for c in section()]
    names = [c.name for c in cases]
    dups = {n for n in names if names.count(n) > 1}
    if dups:
        raise ValueError(f"duplicate case names: {sorted(dups)}")
    return cases
