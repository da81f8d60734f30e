"""`CLASS=N` / `CLASS:N`: the one reader of per-class numbers typed by people."""

from __future__ import annotations

import pytest

from strato.model.amounts import AmountError, parse_amount, parse_amounts


@pytest.mark.parametrize("item", ["VCPU=2", "VCPU:2", " vcpu = 2 ", "Vcpu:2"])
def test_either_separator_and_any_case(item: str) -> None:
    assert parse_amount(item, int) == ("VCPU", 2)


def test_repeated_and_comma_separated_items() -> None:
    assert parse_amounts(["VCPU=2,MEMORY_MB:4096", "DISK_GB=10,", "VCPU:3"], int) == {
        "VCPU": 3, "MEMORY_MB": 4096, "DISK_GB": 10}
    assert parse_amounts(["VCPU:4.0"], float) == {"VCPU": 4.0}


@pytest.mark.parametrize(("items", "bad", "why"), [
    (["VCPU"], "VCPU", "expected CLASS=N (or CLASS:N)"),
    (["VCPU=2,MEMORY_MB"], "MEMORY_MB", "expected CLASS=N"),
    (["=2"], "=2", "a resource class"),
    (["GPU-X=1"], "GPU-X=1", "a resource class"),
    (["VCPU=two"], "VCPU=two", "'two' is not an integer"),
    (["VCPU=2=3"], "VCPU=2=3", "is not an integer"),
    (["VCPU:1.5"], "VCPU:1.5", "is not an integer"),
])
def test_a_bad_item_is_named(items: list[str], bad: str, why: str) -> None:
    with pytest.raises(AmountError) as caught:
        parse_amounts(items, int)
    assert caught.value.item == bad and why in caught.value.why
    assert repr(bad) in str(caught.value)


@pytest.mark.parametrize("text", ["nan", "inf", "x"])
def test_floats_are_finite_numbers(text: str) -> None:
    with pytest.raises(AmountError, match="number"):
        parse_amount(f"VCPU={text}", float)
