"""Rare features and the spare mask, and rule masks (strato.engine.constraints)."""

from __future__ import annotations

import uuid

from strato.engine.constraints import rare_features, rule_masks, spare_mask
from strato.engine.hosts import HostArrays, HostView
from strato.engine.index import ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord
from strato.model.schedule import DEFAULT_LEVELS, SpreadRuleSpec

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


def in_two_rooms() -> tuple[ProviderIndex, HostArrays]:
    """h0, h1 in dfw/room1 and h2, h3 in dfw/room2."""
    recs = [ProviderRecord(uuid=u(f"h{i}"), inventories=CPU) for i in range(4)]
    index = ProviderIndex.build(recs)
    view = HostView()
    view.load_static((u(f"h{i}"), ("dfw", f"room{i // 2 + 1}", f"rack{i}", f"h{i}"), ())
                     for i in range(4))
    return index, view.arrays(index)


def test_affinity_cannot_join_a_group_already_in_two_domains() -> None:
    index, hosts = in_two_rooms()
    split = {"web4": {"m1": {u("h0")}, "m2": {u("h2")}}}
    rule = {"type": "affinity", "level": "room"}
    [hard] = rule_masks(index, hosts, [SpreadRuleSpec.model_validate(rule)], "web4", split,
                        DEFAULT_LEVELS)
    # Every member in one room cannot hold whatever the new ones do: no host.
    assert rows(index, hard.allowed) == set()
    assert hard.reason == "affinity web4@room (members already in 2 rooms: dfw/room1, dfw/room2)"
    [soft] = rule_masks(index, hosts, [SpreadRuleSpec.model_validate({**rule, "hard": False})],
                        "web4", split, DEFAULT_LEVELS)
    assert rows(index, soft.allowed) == set() and soft.reason == "affinity web4@room"
    # Members in one room: that room. Affinity to another group (the new ones
    # do not join it) follows its members, wherever they are.
    one = {"web4": {"m1": {u("h0")}}}
    [kept] = rule_masks(index, hosts, [SpreadRuleSpec.model_validate(rule)], "web4", one,
                        DEFAULT_LEVELS)
    assert rows(index, kept.allowed) == {"h0", "h1"}
    [other] = rule_masks(index, hosts, [SpreadRuleSpec.model_validate(
        {**rule, "group": "web4"})], "app", split, DEFAULT_LEVELS)
    assert rows(index, other.allowed) == {"h0", "h1", "h2", "h3"}
