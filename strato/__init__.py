"""Strato: a distributed, hierarchical, generic resource scheduler and placement service."""

__version__ = "0.1.0"
