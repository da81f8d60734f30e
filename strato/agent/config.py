"""The agent's configuration: defaults, then a TOML/YAML file, then flags.

Also where the host's identity comes from: a stable provider UUID derived from
/etc/machine-id (so a reinstall of the agent, or a restart, finds the same
provider) and the host name.
"""

from __future__ import annotations

import socket
import tomllib
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from strato.model.amounts import AmountError, parse_amounts
from strato.model.location import LocationError, canonical_location, canonical_tags

DEFAULT_INTERVAL = 30.0
MANAGED_CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
# A fixed namespace: the same machine-id always gives the same provider UUID.
_NAMESPACE = uuidlib.UUID("6f1c3c0e-5b7a-4e43-9d0a-5a0f3e7d2b11")
_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


class ConfigError(ValueError):
    """A configuration the agent cannot run with; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    zone_url: str = ""
    token: str | None = None
    uuid: str | None = None  # None: uuid5 of the machine id
    name: str | None = None  # None: the host name
    location: str | None = None  # None: leave the zone's value alone
    tags: tuple[str, ...] | None = None  # None: leave the zone's value alone
    disk_paths: tuple[str, ...] = ("/",)
    # Static reservations per class (host OS, hypervisor), always reserved.
    reserved: Mapping[str, int] = field(default_factory=dict)
    # Allocation ratios to enforce; classes not named keep the zone's value.
    allocation_ratio: Mapping[str, float] = field(default_factory=dict)
    # Classes whose usage outside Strato's allocations is measured and reserved.
    measure: tuple[str, ...] = MANAGED_CLASSES
    interval: float = DEFAULT_INTERVAL
    max_backoff: float = 300.0
    timeout: float = 10.0
    facts_file: str | None = None  # JSON overrides of measured facts (tests, odd hosts)

    def validated(self) -> AgentConfig:
        """This config with location and tags canonical; ConfigError on anything wrong."""
        if not self.zone_url.startswith(("http://", "https://")):
            raise ConfigError(f"zone_url must be an http(s) URL, got {self.zone_url!r}")
        try:
            parts = urlsplit(self.zone_url)
            parts.port  # noqa: B018 (read for its check: a port that is not a number)
        except ValueError as exc:
            raise ConfigError(f"zone_url {self.zone_url!r} is not a URL: {exc}") from None
        if not parts.hostname or parts.query or parts.fragment:
            raise ConfigError(f"zone_url {self.zone_url!r} must be http(s)://host[:port]"
                              "[/path], with no query or fragment")
        try:
            location = canonical_location(self.location)
            tags = None if self.tags is None else tuple(canonical_tags(self.tags))
        except LocationError as exc:
            raise ConfigError(str(exc)) from None
        for name in (*self.reserved, *self.allocation_ratio, *self.measure):
            if name not in MANAGED_CLASSES:
                raise ConfigError(f"{name!r} is not a class the agent reports "
                                  f"({', '.join(MANAGED_CLASSES)})")
        if any(v < 0 for v in self.reserved.values()):
            raise ConfigError("reserved amounts must be >= 0")
        if any(v <= 0 for v in self.allocation_ratio.values()):
            raise ConfigError("allocation ratios must be > 0")
        if self.interval <= 0 or self.max_backoff <= 0 or self.timeout <= 0:
            raise ConfigError("interval, max_backoff and timeout must be > 0")
        if self.uuid is not None:
            try:
                uuid = str(uuidlib.UUID(self.uuid))
            except ValueError:
                raise ConfigError(f"uuid {self.uuid!r} is not a UUID") from None
        else:
            uuid = machine_uuid()
        return replace(self, location=location, tags=tags, uuid=uuid,
                       name=self.name or socket.gethostname(),
                       zone_url=self.zone_url.rstrip("/"))

    def merged(self, overrides: Mapping[str, Any]) -> AgentConfig:
        """This config with every non-None value of `overrides` applied."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
        values = {k: _coerce(k, v) for k, v in overrides.items() if v is not None}
        return replace(self, **values)


_TEXT = ("zone_url", "token", "uuid", "name", "location", "facts_file")


def _coerce(key: str, value: Any) -> Any:
    """`value` as setting `key` holds it; ConfigError naming the key (a file's
    `interval = "soon"` or `tags = 5` is said, not a traceback)."""
    if key in _TEXT:
        if not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return value
    if key in ("tags", "disk_paths", "measure"):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key} must be a string or a list of strings, got {value!r}")
        return tuple(value)
    if key in ("reserved", "allocation_ratio"):
        whole = key == "reserved"
        what = "a whole number" if whole else "a number"
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key} must be a table of CLASS = {what}, got {value!r}")
        out: dict[str, float] = {}
        for k, v in value.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or (
                    whole and not float(v).is_integer()):
                raise ConfigError(f"{key}.{k} must be {what}, got {v!r}")
            out[str(k)] = int(v) if whole else float(v)
        return out
    if key in ("interval", "max_backoff", "timeout"):
        try:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be a number of seconds, got {value!r}") from None
    return value


def load_file(path: str | Path) -> dict[str, Any]:
    """Settings from a .toml, .yaml or .yml file (flat keys as in AgentConfig)."""
    import yaml

    p = Path(path)
    if p.suffix not in (".toml", ".yaml", ".yml"):
        raise ConfigError(f"{p}: use a .toml, .yaml or .yml file")
    try:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = yaml.safe_load(text) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        from strato.cli.hints import parse_error

        said = parse_error(exc)
        kind = "TOML" if p.suffix == ".toml" else "YAML"
        raise ConfigError(f"{p} is not valid {kind}: {said}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a table of settings")
    return {k.replace("-", "_"): v for k, v in data.items()}


def parse_pairs(items: list[str], cast: type[int] | type[float], what: str
                ) -> dict[str, Any]:
    """`CLASS=VALUE` / `CLASS:VALUE` flags (repeatable, or comma separated) as a dict."""
    try:
        return dict(parse_amounts(items, cast))
    except AmountError as exc:
        raise ConfigError(f"{what} {exc}") from None


def machine_uuid() -> str:
    """uuid5 of the machine id: stable across restarts and agent reinstalls."""
    for path in _MACHINE_ID_FILES:
        try:
            mid = Path(path).read_text().strip()
        except OSError:
            continue
        if mid:
            return str(uuidlib.uuid5(_NAMESPACE, mid))
    raise ConfigError("no /etc/machine-id: pass --uuid")
