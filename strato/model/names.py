"""Resource class and trait names: the standard sets and the CUSTOM_ rules."""

from __future__ import annotations

import re

import os_resource_classes
import os_traits

CUSTOM_PREFIX = "CUSTOM_"
# Placement: custom names are CUSTOM_ followed by upper-case letters, digits, underscores.
_CUSTOM_RE = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
MAX_NAME_LENGTH = 255

STANDARD_RESOURCE_CLASSES: tuple[str, ...] = tuple(os_resource_classes.STANDARDS)
STANDARD_TRAITS: tuple[str, ...] = tuple(sorted(os_traits.get_traits()))
_STANDARD_RC_SET = frozenset(STANDARD_RESOURCE_CLASSES)
_STANDARD_TRAIT_SET = frozenset(STANDARD_TRAITS)


def is_custom_name(name: str) -> bool:
    return len(name) <= MAX_NAME_LENGTH and bool(_CUSTOM_RE.fullmatch(name))


def is_standard_resource_class(name: str) -> bool:
    return name in _STANDARD_RC_SET


def is_standard_trait(name: str) -> bool:
    return name in _STANDARD_TRAIT_SET
