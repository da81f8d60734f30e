"""Rare features and the spare mask (strato.engine.constraints)."""

from __future__ import annotations

import uuid

from strato.engine.constraints import rare_features, spare_mask
from strato.engine.hosts import HostArrays, HostView
from strato.engine.index import ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord

CPU = {"VCPU": InventoryRecord(total=8)}
NAMES: dict[str, str] = {}


def u(name: str) -> str:
    got = str(uuid.uuid5(uuid.NAMESPACE_OID, name))
    NAMES[got] = name
    return got


def world(n: int, *, traits: dict[int, set[str]] | None = None,
          tags: dict[int, set[str]] | None = None, gpu_child_of: tuple[int, ...] = ()
          ) -> tuple[ProviderIndex, HostArrays]:
    """n hosts h0..h{n-1}; some with traits, tags or a child with VGPU."""
    traits, tags = traits or {}, tags or {}
    recs = [ProviderRecord(uuid=u(f"h{i}"), inventories=CPU,
                           traits=frozenset(traits.get(i, ()))) for i in range(n)]
    recs += [ProviderRecord(uuid=u(f"g{i}"), parent_uuid=u(f"h{i}"), root_uuid=u(f"h{i}"),
                            inventories={"VGPU": InventoryRecord(total=4)},
                            traits=frozenset({"CUSTOM_A100"}))
             for i in gpu_child_of]
    index = ProviderIndex.build(recs)
    view = HostView()
    view.load_static((u(f"h{i}"), None, tags.get(i, ())) for i in range(n))
    return index, view.arrays(index)


def rows(index: ProviderIndex, mask: object) -> set[str]:
    return {NAMES[index.uuids[p]] for p in range(index.size) if mask[p]}  # type: ignore[index]


def test_a_feature_is_rare_up_to_a_quarter_of_the_hosts() -> None:
    index, hosts = world(8, traits={0: {"T2"}, 1: {"T2", "T3"}, 2: {"T3"}, 3: {"T3"}},
                         tags={7: {"hipaa"}})
    rare = rare_features(index, hosts)
    assert set(rare) == {("trait", "T2"), ("tag", "hipaa")}
    assert rows(index, rare[("trait", "T2")]) == {"h0", "h1"}


def test_a_child_feature_belongs_to_its_host() -> None:
    index, hosts = world(8, gpu_child_of=(2,))
    rare = rare_features(index, hosts)
    assert set(rare) == {("class", "VGPU"), ("trait", "CUSTOM_A100")}
    # The whole tree: the host row and its GPU child's row.
    assert rows(index, rare[("class", "VGPU")]) == {"h2", "g2"}


def test_spare_leaves_out_the_hosts_of_rare_features_not_asked() -> None:
    index, hosts = world(8, traits={0: {"T2"}}, tags={1: {"hipaa"}})
    plain = spare_mask(index, hosts, frozenset({("class", "VCPU")}))
    assert plain is not None and rows(index, ~plain) == {"h0", "h1"}
    asks_t2 = spare_mask(index, hosts, frozenset({("class", "VCPU"), ("trait", "T2")}))
    assert asks_t2 is not None and rows(index, ~asks_t2) == {"h1"}
    both = spare_mask(index, hosts, frozenset({("trait", "T2"), ("tag", "hipaa")}))
    assert both is None  # nothing to leave out: no preference


def test_no_preference_when_every_host_is_rare_in_some_way() -> None:
    index, hosts = world(4, traits={0: {"A"}, 1: {"B"}, 2: {"C"}, 3: {"D"}})
    assert spare_mask(index, hosts, frozenset()) is None


def test_a_class_added_to_a_host_makes_it_rare() -> None:
    index, hosts = world(8)
    assert spare_mask(index, hosts, frozenset({("class", "VCPU")})) is None
    index.apply([ProviderRecord(uuid=u("h3"), inventories={
        **CPU, "VGPU": InventoryRecord(total=2)})], ())
    plain = spare_mask(index, hosts, frozenset({("class", "VCPU")}))
    assert plain is not None and rows(index, ~plain) == {"h3"}
