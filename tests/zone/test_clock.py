"""A child's clock offset, estimated from its summaries (zone/clock.py)."""

from __future__ import annotations

import pytest

from strato.zone import clock


def test_the_sample_with_the_shortest_round_trip_wins() -> None:
    skew = clock.Skew()
    skew.note(their_now=1030.0, sent=1000.0, received=1002.0)  # offset 29, +-1
    skew.note(their_now=1040.05, sent=1010.0, received=1010.1)  # offset 30, +-0.05
    skew.note(their_now=1050.0, sent=1020.0, received=1028.0)  # a slow answer
    assert skew.best() == clock.Sample(pytest.approx(30.0), pytest.approx(0.05))
    assert skew.offset() == pytest.approx(30.0)


@pytest.mark.parametrize(("their_now", "applied"), [
    (1000.3, 0.0),  # within the tolerance: left alone
    (999.7, 0.0),
    (1002.0, 2.0),
    (995.0, -5.0),
])
def test_small_offsets_are_left_alone(their_now: float, applied: float) -> None:
    skew = clock.Skew()
    skew.note(their_now, sent=999.99, received=1000.01)
    assert skew.offset() == pytest.approx(applied, abs=0.02)


def test_an_uncertain_sample_is_not_acted_on() -> None:
    """A round trip of 10 s: an offset of 4 s may be none at all."""
    skew = clock.Skew()
    skew.note(their_now=1009.0, sent=1000.0, received=1010.0)
    assert skew.offset() == 0.0


def test_a_clock_set_right_again_is_followed_at_once() -> None:
    """Samples of one clock all hold the true offset; one that cannot means a
    clock was set: the older samples (however precise) are of another clock."""
    skew = clock.Skew()
    for i in range(clock.SAMPLES):
        skew.note(2000.0 + i, sent=1000.0 + i, received=1000.001 + i)
    assert skew.offset() == pytest.approx(1000.0, abs=0.01)
    skew.note(1100.0, sent=1099.9, received=1100.1)  # +-0.1, a worse round trip
    assert skew.offset() == 0.0
    skew.note(1090.0, sent=1100.0, received=1100.01)  # now 10 s behind
    assert skew.offset() == pytest.approx(-10.005, abs=0.01)


def test_samples_of_one_clock_are_kept() -> None:
    """Jitter within the samples' own error is no clock step: the precise
    sample stays the best."""
    skew = clock.Skew()
    skew.note(1030.0, sent=1000.0, received=1000.002)  # offset 30 +- 0.001
    skew.note(1040.5, sent=1010.0, received=1011.0)  # 30.0 +- 0.5
    skew.note(1050.2, sent=1019.9, received=1020.5)  # 30.0 +- 0.3
    assert skew.best() == clock.Sample(pytest.approx(29.999), pytest.approx(0.001))


def test_this_zones_clock_set_back_meanwhile_is_no_sample() -> None:
    skew = clock.Skew()
    skew.note(their_now=1000.0, sent=1000.0, received=990.0)
    assert skew.best() is None and skew.offset() == 0.0
