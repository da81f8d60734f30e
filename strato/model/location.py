"""Provider locations and tags: parsing, validation, canonical form.

A location is a path from the widest failure domain to the narrowest,
written ``dfw/room1/rack1/machine1``. The dotted "pragma" form
``machine1.rack1.room1.dfw`` names the same path read from the narrowest end
(like a host name), so it is reversed. Strato stores and answers the slash
form only, so the engine and every client compare one spelling.

Tags are short lowercase identifiers (``hipaa``, ``pci-dss``): static facts
about a provider that requests may require or forbid.

Pure functions, no I/O: the store, the engine and the agent share them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

# A segment is a name a human would give a site, room, rack or host. No dots
# (they separate the pragma form), no slashes, nothing that needs quoting in a
# URL or a shell; patterns such as `dfw/room1/*` stay unambiguous.
_SEGMENT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62})$")
_TAG = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62})$")
MAX_SEGMENTS = 16
MAX_LOCATION_CHARS = 255
MAX_TAGS = 64


class LocationError(ValueError):
    """A location or tag that is not valid; the message says which part and why."""


def parse_location(text: str) -> tuple[str, ...]:
    """The segments of `text`, widest first. Raises LocationError when invalid.

    ``dfw/room1/rack1`` and ``rack1.room1.dfw`` both give
    ``("dfw", "room1", "rack1")``; a single name is a one-segment path.
    """
    if not isinstance(text, str) or not text:
        raise LocationError("must be a non-empty string such as 'dfw/room1/rack1/machine1'")
    if "/" in text and "." in text:
        raise LocationError(
            f"{text!r} mixes '/' and '.': use 'dfw/room1/rack1' or its pragma form "
            "'rack1.room1.dfw'")
    segments = text.split("/") if "/" in text else list(reversed(text.split(".")))
    if len(segments) > MAX_SEGMENTS:
        raise LocationError(f"{text!r} has {len(segments)} segments, at most "
                            f"{MAX_SEGMENTS} are allowed")
    for seg in segments:
        if not seg:
            raise LocationError(f"{text!r} has an empty segment")
        if not _SEGMENT.match(seg):
            raise LocationError(
                f"segment {seg!r} of {text!r} is not valid: use 1-63 letters, digits, "
                "'-' or '_', starting with a letter or digit")
    canonical = "/".join(segments)
    if len(canonical) > MAX_LOCATION_CHARS:
        raise LocationError(f"{text!r} is longer than {MAX_LOCATION_CHARS} characters")
    return tuple(segments)


def canonical_location(text: str | None) -> str | None:
    """`text` in the stored slash form, or None for None. Raises LocationError."""
    if text is None:
        return None
    return "/".join(parse_location(text))


def canonical_tags(tags: Iterable[str]) -> list[str]:
    """Tags sorted and without duplicates. Raises LocationError naming a bad tag."""
    out = set()
    for tag in tags:
        if not isinstance(tag, str) or not _TAG.match(tag):
            raise LocationError(
                f"tag {tag!r} is not valid: use 1-63 lowercase letters, digits, '-' or '_', "
                "starting with a letter or digit (e.g. 'hipaa', 'pci-dss')")
        out.add(tag)
    if len(out) > MAX_TAGS:
        raise LocationError(f"{len(out)} tags given, at most {MAX_TAGS} are allowed")
    return sorted(out)


def effective_location(own: str | None, root: str | None) -> str | None:
    """A provider's own location, else its root provider's (children inherit)."""
    return own if own is not None else root


def location_pattern(pattern: str) -> tuple[tuple[str, ...], bool]:
    """(segments widest first, exact) of a location pattern.

    The slash form (``dfw/room1/*``, ``dfw/room1``) matches every location that
    starts with those segments; ``*`` matches any one segment and shell-style
    wildcards work inside a segment (``rack1*``). The dotted pragma form
    (``machine1.rack1.room1.dfw``) names exactly one place: the whole path must
    be equal.
    """
    exact = "." in pattern and "/" not in pattern
    segments = tuple(reversed(pattern.split("."))) if exact else tuple(pattern.split("/"))
    return segments, exact


def location_matches(pattern: tuple[tuple[str, ...], bool],
                     location: tuple[str, ...] | None) -> bool:
    segments, exact = pattern
    if location is None or len(location) < len(segments):
        return False
    if exact and len(location) != len(segments):
        return False
    return all(fnmatch.fnmatchcase(seg, pat) for pat, seg in zip(segments, location,
                                                                   strict=False))
