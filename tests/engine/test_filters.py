"""Resource fit masks (strato.engine.filters), kept across inventory changes."""

from __future__ import annotations

import uuid

import numpy as np

from strato.engine import filters
from strato.engine.index import ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord

A = str(uuid.UUID(int=1))


def provider(uid: str, **inv: int) -> ProviderRecord:
    return ProviderRecord(uuid=uid, inventories={"VCPU": InventoryRecord(**inv)})


def test_units_follow_inventory_changes() -> None:
    index = ProviderIndex.build([provider(A, total=16, max_unit=4)])
    assert not filters.fits(index, "VCPU", 8)[0]
    index.apply([provider(A, total=16, max_unit=16, step_size=4)], ())
    assert filters.fits(index, "VCPU", 8)[0]
    assert not filters.fits(index, "VCPU", 6)[0]  # not a multiple of the step
    index.apply([provider(A, total=16, min_unit=10, max_unit=16)], ())
    assert not filters.fits(index, "VCPU", 8)[0]


def test_units_follow_new_rows_and_usage() -> None:
    index = ProviderIndex.build([provider(A, total=4)])
    assert filters.fits(index, "VCPU", 4).tolist() == [True]
    many = [provider(str(uuid.UUID(int=i)), total=8) for i in range(2, 2000)]
    index.apply(many, ())  # the arrays grow
    assert filters.fits(index, "VCPU", 8).sum() == len(many)
    index.add_usage(A, {"VCPU": 1})
    assert not filters.fits(index, "VCPU", 4)[0]
    assert filters.fits_rows(index, "VCPU", 3, np.array([index.pos[A]]))[0]
