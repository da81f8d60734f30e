"""What the host has and what is in use on it, measured with psutil.

`HostFacts.used` is everything the host sees in use (the kernel's view),
including what runs in Strato's own allocations; `inventory.py` subtracts
those to find the usage Strato did not place.

A JSON facts file overrides any measured value, so tests (and hosts whose
real capacity differs from what the kernel shows) can state facts directly:
``{"vcpu": 8, "memory_mb": 16384, "disk_gb": 100,
"used": {"MEMORY_MB": 2048, "VCPU": 0.5, "DISK_GB": 10}}``.
It is re-read when its modification time changes.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import psutil

log = logging.getLogger("strato.agent")

MIB = 1024 * 1024
GIB = 1024 * MIB
# Smoothing of CPU load: a burst must last a few intervals before it is reserved.
_CPU_SMOOTHING = 0.3


@dataclass(frozen=True, slots=True)
class HostFacts:
    vcpu: int
    memory_mb: int
    disk_gb: int
    used: dict[str, float] = field(default_factory=dict)

    def totals(self) -> dict[str, int]:
        return {"VCPU": self.vcpu, "MEMORY_MB": self.memory_mb, "DISK_GB": self.disk_gb}


class FactsCollector:
    """Measures host facts; keeps the little state CPU smoothing and the facts file need."""

    def __init__(self, disk_paths: tuple[str, ...], facts_file: str | None = None) -> None:
        self.disk_paths = disk_paths
        self.facts_file = Path(facts_file) if facts_file else None
        self._file_mtime: float | None = None
        self._file_data: dict[str, object] = {}
        self._busy_cpus: float | None = None

    def collect(self) -> HostFacts:
        overrides = self._overrides()
        used: dict[str, float] = {}
        vcpu = _int(overrides.get("vcpu")) or psutil.cpu_count(logical=True) or 1
        mem = psutil.virtual_memory()
        memory_mb = _int(overrides.get("memory_mb"))
        if memory_mb is None:
            memory_mb = mem.total // MIB
        used["MEMORY_MB"] = (mem.total - mem.available) / MIB
        disk_gb = _int(overrides.get("disk_gb"))
        if disk_gb is None:
            disk_gb, used["DISK_GB"] = self._disks()
        used["VCPU"] = self._cpu_busy(vcpu)
        file_used = overrides.get("used")
        if isinstance(file_used, dict):
            used.update({str(k): float(v) for k, v in file_used.items()})
        return HostFacts(vcpu=vcpu, memory_mb=memory_mb, disk_gb=disk_gb, used=used)

    def _cpu_busy(self, ncpu: int) -> float:
        prev = self._busy_cpus
        # Since the previous call; the very first call samples 0.1 s instead, so the
        # agent's own start-up (imports) is not counted as load.
        percent = psutil.cpu_percent(interval=None if prev is not None else 0.1)
        busy = percent / 100.0 * ncpu
        self._busy_cpus = busy if prev is None else prev + _CPU_SMOOTHING * (busy - prev)
        return self._busy_cpus

    def _disks(self) -> tuple[int, float]:
        """Total GiB (rounded down) and used GiB over the paths, each filesystem once."""
        seen: set[int] = set()
        total = used = 0
        for path in self.disk_paths:
            try:
                dev = os.stat(path).st_dev
                if dev in seen:
                    continue
                seen.add(dev)
                usage = psutil.disk_usage(path)
            except OSError as exc:
                log.warning("disk path %s cannot be measured: %s", path, exc)
                continue
            total += usage.total
            used += usage.used
        return total // GIB, used / GIB

    def _overrides(self) -> dict[str, object]:
        if self.facts_file is None:
            return {}
        try:
            mtime = self.facts_file.stat().st_mtime
            if mtime != self._file_mtime:
                data = json.loads(self.facts_file.read_text())
                if not isinstance(data, dict):
                    raise ValueError("expected a JSON object")
                self._file_data, self._file_mtime = data, mtime
        except (OSError, ValueError) as exc:
            # Keep the last good facts: a half-written file must not zero an inventory.
            log.warning("facts file %s not used: %s", self.facts_file, exc)
        return self._file_data


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)
