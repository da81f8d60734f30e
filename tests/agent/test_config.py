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


@pytest.mark.parametrize(("name", "text", "said"), [
    ("a.yaml", "interval: [1\n", "a.yaml is not valid YAML: expected ',' or ']'"),
    ("a.yaml", "a: b: c\n", "not valid YAML: mapping values are not allowed here (line 1"),
    ("a.toml", 'interval = "soon"\n', "interval must be a number of seconds, got 'soon'"),
    ("a.toml", "interval = true\n", "interval must be a number of seconds, got True"),
    ("a.toml", "zone_url = 5\n", "zone_url must be a string, got 5"),
    ("a.toml", "tags = 5\n", "tags must be a string or a list of strings, got 5"),
    ("a.yaml", "disk_paths: [1]\n", "disk_paths must be a string or a list of strings"),
    ("a.toml", "reserved = 5\n", "reserved must be a table of CLASS = a whole number"),
    ("a.toml", 'reserved = {MEMORY_MB = "x"}\n', "reserved.MEMORY_MB must be a whole number"),
    ("a.toml", "allocation_ratio = {VCPU = [1]}\n", "allocation_ratio.VCPU must be a number"),
    ("a.json", "{}", "a.json: use a .toml, .yaml or .yml file"),
])
def test_a_bad_file_is_one_line_naming_the_setting(tmp_path: Path, name: str, text: str,
                                                    said: str) -> None:
    """`strato agent --config` with a file it cannot use: one line on stderr,
    exit 2 (a malformed YAML file, or a value of the wrong type, was a
    traceback)."""
    import subprocess
    import sys

    f = tmp_path / name
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "strato", "agent", "--once", "--config", str(f),
                        "--zone-url", "http://127.0.0.1:1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert said in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and f"{name}: {name}" not in r.stderr, r.stderr


def test_a_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cannot read .*missing.toml: No such file"):
        load_file(tmp_path / "missing.toml")
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"bin\.yaml: not UTF-8 text"):
        load_file(tmp_path / "bin.yaml")
