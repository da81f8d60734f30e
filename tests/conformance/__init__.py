"""Differential conformance checks of Strato against real OpenStack Placement."""
