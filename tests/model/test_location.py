"""Locations and tags: the slash form, the dotted pragma form, and what is refused."""

from __future__ import annotations

import pytest

from strato.model.location import (
    LocationError,
    canonical_location,
    canonical_tags,
    effective_location,
    parse_location,
)


def test_slash_and_pragma_forms_mean_the_same_path() -> None:
    assert parse_location("dfw/room1/rack1/machine1") == ("dfw", "room1", "rack1", "machine1")
    assert canonical_location("machine1.rack1.room1.dfw") == "dfw/room1/rack1/machine1"
    assert canonical_location("dfw") == "dfw"
    assert canonical_location(None) is None


@pytest.mark.parametrize("bad", ["", "dfw//rack1", "/dfw", "dfw/", "a.b/c", "dfw/r ack",
                                 "dfw/-x", "x" * 64, "/".join(["a"] * 17), "dfw/ráck"])
def test_bad_locations_are_refused(bad: str) -> None:
    with pytest.raises(LocationError):
        parse_location(bad)


def test_tags_are_sorted_unique_lowercase_identifiers() -> None:
    assert canonical_tags(["pci-dss", "hipaa", "hipaa"]) == ["hipaa", "pci-dss"]
    for bad in ["HIPAA", "", "a b", "-x", "x" * 64]:
        with pytest.raises(LocationError):
            canonical_tags([bad])


def test_children_inherit_the_root_location() -> None:
    assert effective_location(None, "dfw/r1") == "dfw/r1"
    assert effective_location("ord", "dfw/r1") == "ord"
