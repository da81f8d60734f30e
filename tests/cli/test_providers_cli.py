"""`strato providers add/set/delete` against a real zone process (issue 16):
a host with no agent, added, changed and removed from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from strato.process import free_port
from tests.e2e.test_zone_split import cells  # noqa: F401 (the fixture)
from tests.helpers import api
from tests.helpers.server import ServerProcess


def strato(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strato.cli.main", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


def test_a_provider_from_the_command_line(tmp_path: Path) -> None:
    with ServerProcess(f"sqlite:///{tmp_path / 'z.db'}", log_path=tmp_path / "z.log") as z:
        u = ("--url", z.url)
        r = strato("providers", "add", "h1", "-r", "VCPU=8", "-r", "MEMORY_MB=16384",
                   "--ratio", "VCPU=4", "--reserved", "MEMORY_MB=512", "-r", "CUSTOM_FPGA=2",
                   "--trait", "HW_CPU_X86_AVX2", "--trait", "CUSTOM_LOW_LATENCY",
                   "--location", "h1.rack1.room1.dfw", "--tag", "hipaa", "--json", *u)
        assert r.returncode == 0, r.stderr
        view = json.loads(r.stdout)
        assert view["inventories"]["VCPU"]["allocation_ratio"] == 4.0
        assert view["inventories"]["MEMORY_MB"]["reserved"] == 512
        assert view["inventories"]["CUSTOM_FPGA"]["total"] == 2
        assert view["traits"] == ["CUSTOM_LOW_LATENCY", "HW_CPU_X86_AVX2"]
        assert view["location"] == "dfw/room1/rack1/h1" and view["tags"] == ["hipaa"]
        host = view["uuid"]
        r = strato("providers", "add", "h1-numa0", "-r", "VCPU=4", "--parent", "h1", *u)
        assert r.returncode == 0 and "added provider h1-numa0" in r.stdout, r.stderr

        # The scheduler sees it at once.
        with api.client(z.url) as c:
            cands = c.get("/allocation_candidates?resources=CUSTOM_FPGA:1").json()
            assert [list(a["allocations"]) for a in cands["allocation_requests"]] == [[host]]

        r = strato("providers", "set", "h1", "-r", "VCPU=16", "--remove-resource",
                   "CUSTOM_FPGA", "--remove-trait", "CUSTOM_LOW_LATENCY", "--tag", "",
                   "--name", "host-1", "--json", *u)
        assert r.returncode == 0, r.stderr
        view = json.loads(r.stdout)
        assert view["name"] == "host-1"
        assert view["inventories"]["VCPU"] == {**view["inventories"]["VCPU"], "total": 16,
                                               "allocation_ratio": 4.0}
        assert "CUSTOM_FPGA" not in view["inventories"]
        assert view["traits"] == ["HW_CPU_X86_AVX2"] and view["tags"] == []
        assert view["location"] == "dfw/room1/rack1/h1"

        # In use: a class cannot go and the provider cannot be deleted (409, exit 1).
        with api.client(z.url) as c:
            consumer = "11111111-2222-3333-4444-555555555555"
            r0 = c.put(f"/allocations/{consumer}", json={
                "allocations": {host: {"resources": {"VCPU": 2}}}, "project_id": "p",
                "user_id": "u", "consumer_generation": None},
                headers={"openstack-api-version": "placement 1.36"})
            assert r0.status_code == 204, r0.text
        r = strato("providers", "set", host, "--remove-resource", "VCPU", *u)
        assert r.returncode == 1 and "HTTP 409" in r.stderr, r.stderr
        r = strato("providers", "delete", "h1-numa0", *u)
        assert r.returncode == 0 and "deleted provider h1-numa0" in r.stdout
        r = strato("providers", "delete", "host-1", *u)
        assert r.returncode == 1 and "HTTP 409" in r.stderr, r.stderr

        # Bad input: exit 2, nothing changed; a refused step undoes the add.
        for args in (["add", "x", "-r", "VCPU"], ["add", "x", "-r", "VCPU=-1"],
                     ["add", "x", "--ratio", "VCPU=2"], ["add", "x", "--trait", "bad trait"],
                     ["add", "x", "--uuid", "nope"], ["set", "host-1", "-r", "VCPU=x"]):
            r = strato("providers", *args, *u)
            assert r.returncode == 2 and "invalid" in r.stderr, (args, r.stderr)
        r = strato("providers", "add", "x", "-r", "VCPU=4", "--trait", "HW_NO_SUCH_TRAIT", *u)
        assert r.returncode == 1 and "was not added" in r.stderr, r.stderr
        # A bad location is refused before anything is sent.
        r = strato("providers", "add", "x", "-r", "VCPU=4", "--location", "a//b", *u)
        assert r.returncode == 2 and "invalid --location" in r.stderr, r.stderr
        # A refused set changes nothing, its name neither.
        for args in (["--remove-resource", "VCPU=4"], ["--remove-resource", "DISK_GB"],
                     ["--reserved", "DISK_GB=1"]):
            r = strato("providers", "set", "host-1", "--name", "renamed", *args, *u)
            assert r.returncode == 2 and "invalid" in r.stderr, (args, r.stderr)
        r = strato("providers", "set", "host-1", "--remove-resource", "VCPU=4", *u)
        assert "give the class alone: --remove-resource VCPU" in r.stderr, r.stderr
        r = strato("providers", "set", "nosuch", "-r", "VCPU=1", *u)
        assert r.returncode == 1 and "no provider named 'nosuch'" in r.stderr
        listed = strato("providers", "list", "--json", *u)
        names = sorted(p["name"] for p in json.loads(listed.stdout)["providers"])
        assert names == ["host-1"], names
    r = strato("providers", "add", "x", "--url", "http://127.0.0.1:1")
    assert r.returncode == 3 and "could not be reached" in r.stderr


def test_shell_completion() -> None:
    r = strato("--show-completion", "bash")
    assert r.returncode == 0 and "_STRATO_COMPLETE=complete_bash" in r.stdout, r.stderr
    env = {**os.environ, "COMP_WORDS": "strato providers ", "COMP_CWORD": "2",
           "_STRATO_COMPLETE": "complete_bash"}
    r = subprocess.run([sys.executable, "-m", "strato.cli.main"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert {"list", "add", "set", "delete"} <= set(r.stdout.split()), r.stdout + r.stderr


def test_a_provider_below_the_root_is_changed_in_its_cell(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    root, ord_ = cells["root"].url, cells["ord"].url
    r = strato("providers", "set", "ord-h1", "-r", "VCPU=12", "--trait", "CUSTOM_FAST",
               "--location", "ord/room2/rack9/h1", "--tag", "pci", "--url", root, "--json")
    assert r.returncode == 0, r.stderr
    with api.client(ord_) as c:
        rp = c.get("/resource_providers?name=ord-h1").json()["resource_providers"][0]
        u = rp["uuid"]
        assert c.get(f"/resource_providers/{u}/inventories").json()[
            "inventories"]["VCPU"]["total"] == 12
        assert c.get(f"/resource_providers/{u}/traits").json()["traits"] == ["CUSTOM_FAST"]
        meta = c.get(f"/strato/v1/providers/{u}/meta").json()
        assert (meta["location"], meta["tags"]) == ("ord/room2/rack9/h1", ["pci"])
    r = strato("providers", "delete", u, "--url", root)
    assert r.returncode == 0, r.stderr
    with api.client(ord_) as c:
        assert c.get(f"/resource_providers/{u}").status_code == 404


def test_the_schedule_table_through_the_root_names_hosts_and_zones(
        cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    r = strato("schedule", "-r", "VCPU:8", "-n", "2", "-g", "web", "--anti-affinity", "site:hard",
               "--url", cells["root"].url)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "zone" in out and "root/dfw" in out and "root/ord" in out, out
    assert "dfw-h" in out and "ord-h" in out, out  # host names, not uuids


def test_inventory_flags_take_equals_or_colon() -> None:
    from strato.cli.providers import _inventory_changes

    assert _inventory_changes(["VCPU:16,MEMORY_MB=65536"], ["memory_mb:512"], ["VCPU:4"]) == {
        "VCPU": {"total": 16, "allocation_ratio": 4.0},
        "MEMORY_MB": {"total": 65536, "reserved": 512}}


def test_listing_an_unreachable_zone_is_exit_3() -> None:
    # As add, set and delete: 3 means the zone could not be reached (retry).
    url = f"http://127.0.0.1:{free_port()}"
    for args in (("providers", "--url", url), ("providers", "list", "--url", url),
                 ("providers", "delete", "h1", "--url", url)):
        r = strato(*args)
        assert r.returncode == 3, (args, r.stdout, r.stderr)
        assert "could not be reached" in r.stderr and "Traceback" not in r.stderr


def test_a_bad_location_or_tag_is_refused_before_anything_is_sent() -> None:
    # Exit 2, nothing sent (no zone listens there): not a provider made, then deleted.
    url = f"http://127.0.0.1:{free_port()}"
    for args, needle in ((("add", "h1", "-r", "VCPU=4", "--location", "dfw room1"),
                          "invalid --location 'dfw room1'"),
                         (("add", "h1", "-r", "VCPU=4", "--tag", "HIPAA"),
                          "invalid --tag 'HIPAA'"),
                         (("set", "h1", "--location", "dfw//r1"), "empty segment")):
        r = strato("providers", *args, "--url", url)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr and "could not be reached" not in r.stderr, r.stderr


LISTING = {"providers": [], "stale_after": 90}


def test_options_before_a_subcommand_apply_to_it() -> None:
    """`strato providers --url U --stale list` as docs/agent.md writes it: the
    group's options are not dropped; the subcommand's own win."""
    from tests.cli.stub import Canned, Stub
    from tests.cli.test_schedule_cli import invoke

    with Stub({"GET /strato/v1/providers": Canned.json(LISTING)}) as z, Stub() as other:
        r = invoke("providers", "--zone-url", z.url, "--stale", "--tag", "hipaa",
                   "--token", "t0k", "list")
        assert r.exit_code == 0, r.output
        assert z.paths() == ["/strato/v1/providers?stale=true&tag=hipaa"]
        assert z.seen[0].headers["x-auth-token"] == "t0k"
        r = invoke("providers", "--url", other.url, "--json", "list", "--url", z.url)
        assert r.exit_code == 0 and json.loads(r.output) == LISTING, r.output
        assert other.seen == [] and len(z.seen) == 2
        r = invoke("providers", "--url", z.url, "delete", "h1")
        assert r.exit_code == 1, r.output  # the stub knows no provider h1
        assert z.seen[-1].path == "/resource_providers?name=h1"
        r = invoke("providers", "--stale", "add", "h1", "--url", z.url)
        assert r.exit_code == 2 and "--stale is an option of listing" in r.output, r.output


def test_a_partial_list_is_said_and_exits_1() -> None:
    """A zone with children names in x-strato-incomplete the zones it could not
    ask: their providers are missing, which the list says (exit 1, as `strato
    tree` for a zone it could not ask), and --json carries it."""
    from tests.cli.stub import Canned, Stub
    from tests.cli.test_schedule_cli import invoke

    partial = Canned.json(LISTING, headers={"x-strato-incomplete": "dfw, ord/ord-c1"})
    with Stub({"GET /strato/v1/providers": partial}) as z:
        for args in (["providers"], ["providers", "list"]):
            r = invoke(*args, "--url", z.url)
            assert r.exit_code == 1, r.output
            assert "providers (stale after 90s)" in r.output
            assert (f"warning: the list is partial: zone(s) dfw, ord/ord-c1 below {z.url} "
                    "could not be asked") in r.output, r.output
        r = invoke("providers", "--json", "--url", z.url)
        assert r.exit_code == 1, r.output
        assert json.loads(r.output.split("\nwarning")[0]) == {
            **LISTING, "incomplete": ["dfw", "ord/ord-c1"]}
    with Stub({"GET /strato/v1/providers": Canned.json(LISTING)}) as z:
        r = invoke("providers", "--url", z.url)
        assert r.exit_code == 0 and "partial" not in r.output, r.output
