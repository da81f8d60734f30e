"""Agent settings: files, flags, identity and validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strato.agent.config import AgentConfig, ConfigError, load_file, machine_uuid, parse_pairs
from strato.agent.facts import FactsCollector


def test_toml_and_yaml_files_then_flags(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text('zone_url = "http://zone:8780"\nlocation = "h1.rack1.dfw"\n'
                    'tags = ["pci-dss"]\n[reserved]\nMEMORY_MB = 2048\n')
    yml = tmp_path / "agent.yaml"
    yml.write_text("zone-url: http://zone:8780\ninterval: 5\ndisk_paths: [/, /var]\n")
    cfg = AgentConfig().merged(load_file(toml)).merged({"tags": ["hipaa"], "name": None})
    cfg = cfg.merged({"uuid": "0c1b4b4e-7f8a-4d7e-9b7c-3a2f0e4d5c6b"}).validated()
    assert cfg.location == "dfw/rack1/h1"
    assert cfg.tags == ("hipaa",) and cfg.reserved == {"MEMORY_MB": 2048}
    assert cfg.name  # the host name
    y = AgentConfig().merged(load_file(yml))
    assert (y.interval, y.disk_paths) == (5.0, ("/", "/var"))


@pytest.mark.parametrize("overrides", [
    {"zone_url": "zone:8780"},
    {"zone_url": "http://[::1"}, {"zone_url": "http://z:abc"}, {"zone_url": "http://z:99999"},
    {"zone_url": "http://z:8780?x=1"}, {"zone_url": "http://"},
    {"location": "dfw/a.b"},
    {"tags": ["Bad"]},
    {"reserved": {"GPU": 1}},
    {"allocation_ratio": {"VCPU": 0}},
    {"interval": 0},
    {"uuid": "nope"},
])
def test_bad_settings_are_refused(overrides: dict[str, object]) -> None:
    base = {"zone_url": "http://z", "uuid": "0c1b4b4e-7f8a-4d7e-9b7c-3a2f0e4d5c6b"}
    with pytest.raises(ConfigError):
        AgentConfig().merged({**base, **overrides}).validated()


def test_unknown_keys_and_bad_pairs() -> None:
    with pytest.raises(ConfigError, match="colour"):
        AgentConfig().merged({"colour": "red"})
    assert parse_pairs(["memory_mb=10"], int, "--reserve") == {"MEMORY_MB": 10}
    assert parse_pairs(["VCPU:4.0,MEMORY_MB=1.5"], float, "--allocation-ratio") == {
        "VCPU": 4.0, "MEMORY_MB": 1.5}
    with pytest.raises(ConfigError, match="--reserve 'MEMORY_MB': expected CLASS=N"):
        parse_pairs(["MEMORY_MB"], int, "--reserve")


def test_machine_uuid_is_stable() -> None:
    if not Path("/etc/machine-id").exists():
        pytest.skip("no machine id here")
    assert machine_uuid() == machine_uuid()


def test_facts_file_overrides_and_survives_a_broken_file(tmp_path: Path) -> None:
    f = tmp_path / "facts.json"
    f.write_text(json.dumps({"vcpu": 3, "memory_mb": 1000, "disk_gb": 7,
                             "used": {"MEMORY_MB": 10}}))
    c = FactsCollector(("/",), str(f))
    got = c.collect()
    assert (got.vcpu, got.memory_mb, got.disk_gb, got.used["MEMORY_MB"]) == (3, 1000, 7, 10)
    f.write_text("{not json")
    again = c.collect()
    assert (again.vcpu, again.memory_mb) == (3, 1000)  # last good facts kept
    real = FactsCollector(("/", "/"), None).collect()
    assert real.vcpu >= 1 and real.memory_mb > 0 and real.disk_gb >= 0
