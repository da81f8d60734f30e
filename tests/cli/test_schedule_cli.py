"""`strato schedule` and `strato explain`: flags and files to requests, answers to tables.

Most tests run the command against the app in memory (the module's
`client_factory` is pointed at a TestClient); the last ones start a real
server process and talk to it over HTTP, with a token.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from strato.cli import main as cli
from strato.cli import schedule as sched
from strato.cli.schedule import InputError, Inputs, build_request
from tests.helpers import api
from tests.helpers.server import ServerProcess

# Wide enough that uuids and reasons are never folded over lines.
ENV = {"COLUMNS": "250", "NO_COLOR": "1", "STRATO_AUTH_TOKEN": "admin"}


class _Borrowed(TestClient):
    """The fixture's client, lent to the command: entering and leaving it is a no-op,
    so the app's lifespan runs once, in the fixture."""

    def __enter__(self) -> _Borrowed:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def sent_headers() -> list[dict[str, str]]:
    """The headers of every client the command opened."""
    return []


@pytest.fixture
def in_process(client: TestClient, monkeypatch: pytest.MonkeyPatch,
               sent_headers: list[dict[str, str]]) -> TestClient:
    def factory(url: str, headers: dict[str, str], timeout: float) -> httpx.Client:
        sent_headers.append(dict(headers))
        return _Borrowed(client.app, headers=headers, raise_server_exceptions=False)

    monkeypatch.setattr(sched, "client_factory", factory)
    return client


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli.app, list(args), env={**ENV, **(env or {})})


def host(c: TestClient, name: str, location: str | None = None, vcpu: int = 8,
         traits: list[str] | None = None, tags: list[str] | None = None) -> str:
    rp = c.post("/resource_providers", json={"name": name}).json()["uuid"]
    r = c.put(f"/resource_providers/{rp}/inventories", json={
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": vcpu}, "MEMORY_MB": {"total": 8192}}})
    assert r.status_code == 200, r.text
    if traits:
        r = c.put(f"/resource_providers/{rp}/traits",
                  json={"traits": traits, "resource_provider_generation": 1})
        assert r.status_code == 200, r.text
    if location or tags:
        r = c.put(f"/strato/v1/providers/{rp}/meta",
                  json={"location": location, "tags": tags or []})
        assert r.status_code == 200, r.text
    return str(rp)


def vcpu_used(c: TestClient | httpx.Client, rp: str) -> int:
    return int(c.get(f"/resource_providers/{rp}/usages").json()["usages"].get("VCPU", 0))


@pytest.fixture
def racks(in_process: TestClient) -> dict[str, str]:
    """4 hosts: dfw/room1/rack1/{a,b}, dfw/room1/rack2/c, ord/room1/rack3/d (hipaa)."""
    return {
        "a": host(in_process, "a", "dfw/room1/rack1/a"),
        "b": host(in_process, "b", "dfw/room1/rack1/b", traits=["HW_CPU_X86_AVX2"]),
        "c": host(in_process, "c", "dfw/room1/rack2/c"),
        "d": host(in_process, "d", "ord/room1/rack3/d", tags=["hipaa"]),
    }


# -- flags and files to a request body (no server) ------------------------------------

def test_flags_become_the_request_body() -> None:
    body = build_request(Inputs(
        resources=["VCPU:2,MEMORY_MB:4096"], count=3, required=["HW_CPU_X86_AVX2"],
        group="web", anti_affinity=["rack"], affinity=["db@room:soft=3"],
        location=["dfw/*"], tag=["hipaa", "!pci-dss:soft"], weigher="pack",
        class_weight=["VCPU=2"], spare=False, atomic=False, request_id="r1", dry_run=True,
        explain=True))
    assert len(body.pop("consumers")) == 3
    assert body == {
        "groups": [{"resources": {"VCPU": 2, "MEMORY_MB": 4096},
                    "required": ["HW_CPU_X86_AVX2"]}],
        "project_id": "strato-cli", "user_id": "strato-cli", "group": "web",
        "request_id": "r1", "atomic": False,
        "constraints": [
            {"type": "location", "pattern": "dfw/*", "hard": True},
            {"type": "tags", "required": ["hipaa"], "hard": True},
            {"type": "tags", "forbidden": ["pci-dss"], "hard": False},
            {"type": "affinity", "level": "room", "group": "db", "hard": False, "weight": 3.0},
            {"type": "anti_affinity", "level": "rack", "hard": True}],
        "weigher": {"name": "pack", "spare": False, "class_weights": {"VCPU": 2.0}},
        "dry_run": True, "explain": True}


def test_an_in_list_of_traits_is_kept_whole() -> None:
    """'in:A,B' is any of A and B: not split into 'in:A' and B (all of them)."""
    body = build_request(Inputs(resources=["VCPU=1"], member_of=["in:a1,a2", "a3"],
                                required=["in:HW_A,HW_B", "HW_C,in:HW_D, HW_E", "!HW_F,HW_G"]))
    assert body["groups"] == [{"resources": {"VCPU": 1},
                               "required": ["in:HW_A,HW_B", "HW_C", "in:HW_D,HW_E", "!HW_F",
                                            "HW_G"],
                               "member_of": [["a1", "a2"], ["a3"]]}]


def test_required_any_of_places_on_a_host_with_one_of_them(
        in_process: TestClient, racks: dict[str, str]) -> None:
    result = invoke("explain", "-r", "VCPU=1", "--required",
                    "in:HW_CPU_X86_AVX2,HW_CPU_X86_SSE42", "--json")
    assert result.exit_code == 0, result.output
    assert [p["provider"] for p in json.loads(result.output)["placements"]] == [racks["b"]]


def test_resources_take_equals_or_colon() -> None:
    body = build_request(Inputs(resources=["VCPU=2,MEMORY_MB:4096", "disk_gb=10"],
                                class_weight=["VCPU:2", "MEMORY_MB=0.5"]))
    assert body["groups"] == [{"resources": {"VCPU": 2, "MEMORY_MB": 4096}},
                              {"resources": {"DISK_GB": 10}}]
    assert body["weigher"]["class_weights"] == {"VCPU": 2.0, "MEMORY_MB": 0.5}


def test_soft_makes_flag_rules_soft_unless_they_say_hard() -> None:
    body = build_request(Inputs(resources=["VCPU:1"], location=["dfw/*", "dfw/room1/*:hard"],
                                soft=True, weight=2.5, group="g",
                                anti_affinity=["host"]))
    assert [(r["hard"], r.get("weight")) for r in body["constraints"]] == [
        (False, 2.5), (True, None), (False, 2.5)]


def test_several_resources_flags_make_numbered_groups() -> None:
    body = build_request(Inputs(resources=["VCPU:1", "DISK_GB:10"], group_policy="none",
                                member_of=["9c5e1c8e-0c1f-4b8e-9a57-1f7c1c1b0a01"]))
    assert body["groups"] == [
        {"resources": {"VCPU": 1},
         "member_of": [["9c5e1c8e-0c1f-4b8e-9a57-1f7c1c1b0a01"]]},
        {"resources": {"DISK_GB": 10}}]
    assert body["group_policy"] == "none"


def test_yaml_file_with_flags_on_top(tmp_path: Path) -> None:
    consumers = [str(uuid.uuid4()), str(uuid.uuid4())]
    path = tmp_path / "request.yaml"
    path.write_text(f"""
consumers: [{consumers[0]}, {consumers[1]}]
project_id: proj
user_id: user
groups:
  - resources: {{VCPU: 1}}
    required: [HW_CPU_X86_AVX2]
constraints:
  - {{type: tags, required: [hipaa], hard: false, weight: 2}}
""")
    body = build_request(Inputs(file=path, location=["ord/*"], required=["!CUSTOM_X"]))
    assert body["consumers"] == consumers and body["project_id"] == "proj"
    assert body["groups"][0]["required"] == ["HW_CPU_X86_AVX2", "!CUSTOM_X"]
    assert [c["type"] for c in body["constraints"]] == ["tags", "location"]
    json_path = tmp_path / "request.json"
    json_path.write_text(json.dumps({"groups": [{"resources": {"VCPU": 1}}]}))
    assert len(build_request(Inputs(file=json_path, count=4))["consumers"]) == 4


@pytest.mark.parametrize(("inputs", "needle"), [
    (Inputs(), "no resources"),
    (Inputs(resources=["VCPU"]), r"'VCPU': expected CLASS=N \(or CLASS:N\)"),
    (Inputs(resources=["VCPU=2,GPU-X=1"]), "'GPU-X=1'"),
    (Inputs(resources=["VCPU:1"], location=["dfw/*:maybe"]), "suffix"),
    (Inputs(resources=["VCPU:1"], consumers=[str(uuid.uuid4())], count=2), "--count 2"),
    (Inputs(resources=["VCPU:1"], class_weight=["VCPU"]), "--class-weight 'VCPU'"),
    (Inputs(file=Path("/nonexistent/request.yaml")), "request.yaml"),
    (Inputs(resources=["VCPU:1"], anti_affinity=["rack"]),
     "--anti-affinity rack needs a server group: pass --group NAME"),
    (Inputs(resources=["VCPU:1"], affinity=["host:soft"]), "--affinity GROUP@host"),
])
def test_unreadable_inputs_are_refused(inputs: Inputs, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        build_request(inputs)


def test_invalid_inputs_exit_2_before_any_request(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    def no_server(*a: Any) -> httpx.Client:
        raise AssertionError("must not contact the server")

    monkeypatch.setattr(sched, "client_factory", no_server)
    result = invoke("schedule", "--resources", "VCPU")
    assert result.exit_code == 2 and "CLASS=N (or CLASS:N)" in result.output
    bad = tmp_path / "r.yaml"
    bad.write_text("- just\n- a list\n")
    result = invoke("explain", "-f", str(bad))
    assert result.exit_code == 2 and "mapping" in result.output
    # Not text (was a UnicodeDecodeError traceback), not YAML (was five lines
    # of the parser's): one line each.
    for name, content, said in (
            ("b.json", b"\xff\xfe{}", "b.json: not UTF-8 text"),
            ("c.yaml", b"a: [1\n", "c.yaml: not valid YAML: expected ',' or ']', but got "
             "'<stream end>' (line 2, column 1)")):
        bad = tmp_path / name
        bad.write_bytes(content)
        result = invoke("schedule", "-f", str(bad))
        assert result.exit_code == 2, result.output
        assert said in result.output and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    # A body guessed from the flags' names: the file is named, and what it lacks.
    guessed = tmp_path / "guessed.json"
    guessed.write_text('{"resources": {"VCPU": 1}, "count": 2}')
    result = invoke("schedule", "-f", str(guessed))
    assert result.exit_code == 2, result.output
    out = " ".join(result.output.split())
    assert "guessed.json has no 'groups'" in out and "top-level keys: count, resources" in out


# -- against the app ---------------------------------------------------------------

def test_schedule_places_claims_and_prints_the_table(in_process: TestClient,
                                                     racks: dict[str, str]) -> None:
    result = invoke("schedule", "-r", "VCPU:2,MEMORY_MB:1024", "-n", "3", "--group", "web",
                    "--anti-affinity", "rack", "--location", "dfw/*", "--consumer-type",
                    "INSTANCE")
    assert result.exit_code == 1, result.output  # only two dfw racks: three cannot spread
    assert "no valid placement" in result.output
    assert sum(vcpu_used(in_process, rp) for rp in racks.values()) == 0

    result = invoke("schedule", "-r", "VCPU:2,MEMORY_MB:1024", "-n", "2", "--group", "web",
                    "--anti-affinity", "rack", "--location", "dfw/*")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "placements" in out and "2 of 2 consumer(s) placed" in out
    assert "VCPU:2" in out and "MEMORY_MB:1024" in out
    assert "dfw/room1/rack2/c" in out  # rack2 has a single host: it must be used
    lines = [ln for ln in out.splitlines() if "dfw/room1/rack" in ln]
    assert len(lines) == 2 and any(" c " in ln for ln in lines)  # names, not uuids
    assert vcpu_used(in_process, racks["c"]) == 2
    assert sum(vcpu_used(in_process, rp) for rp in racks.values()) == 4


def test_token_comes_from_the_flag_or_the_environment(
        racks: dict[str, str], sent_headers: list[dict[str, str]]) -> None:
    invoke("schedule", "-r", "VCPU:1", "--dry-run", "--token", "admin")
    assert sent_headers[-1] == {"x-auth-token": "admin"}
    result = invoke("schedule", "-r", "VCPU:1", env={"STRATO_AUTH_TOKEN": "alice:proj"})
    assert sent_headers[-1] == {"x-auth-token": "alice:proj"}
    assert result.exit_code == 1 and "HTTP 403" in result.output  # not an admin


def test_relaxed_soft_rules_are_listed(in_process: TestClient, racks: dict[str, str]) -> None:
    result = invoke("schedule", "-r", "VCPU:1", "--location", "lon/*:soft=1",
                    "--tag", "hipaa:soft=5")
    assert result.exit_code == 0, result.output
    assert "relaxed soft rule #0 location lon/*" in result.output
    assert "ord/room1/rack3/d" in result.output  # the hipaa rule held


def test_pragma_location_names_one_host(in_process: TestClient, racks: dict[str, str]) -> None:
    result = invoke("schedule", "-r", "VCPU:1", "--location", "b.rack1.room1.dfw")
    assert result.exit_code == 0, result.output
    assert vcpu_used(in_process, racks["b"]) == 1


def test_no_valid_placement_prints_the_explanation_and_exits_1(
        in_process: TestClient, racks: dict[str, str]) -> None:
    result = invoke("schedule", "-r", "VCPU:4", "--required", "HW_CPU_X86_AVX2",
                    "--tag", "hipaa")
    assert result.exit_code == 1, result.output
    out = result.output
    assert out.startswith("nothing fits: no valid placement for 1 consumer(s)"), out
    assert "explain: unsuffixed group, 4 providers" in out
    assert "tags hipaa" in out and "trait HW_CPU_X86_AVX2 missing" in out
    # The first line holds the funnel's summary: it is not said twice.
    assert "summary (zone" not in out
    # The funnel adds up: 3 without the tag, then the hipaa host lacks the trait.
    rows = {ln.split("│")[2].strip(): ln.split("│")[3].strip()
            for ln in out.splitlines() if ln.count("│") >= 4}
    assert rows["tags hipaa"] == "3" and rows["trait HW_CPU_X86_AVX2 missing"] == "1"


def test_bad_request_prints_the_detail_and_exits_2(in_process: TestClient,
                                                   racks: dict[str, str]) -> None:
    result = invoke("schedule", "-r", "CUSTOM_NOPE:1")
    assert result.exit_code == 2, result.output
    assert "invalid request" in result.output and "CUSTOM_NOPE" in result.output
    result = invoke("schedule", "-r", "VCPU:1", "--group", "g", "--anti-affinity", "galaxy")
    assert result.exit_code == 2 and "galaxy" in result.output


def test_explain_shows_the_funnel_and_claims_nothing(in_process: TestClient,
                                                     racks: dict[str, str]) -> None:
    result = invoke("explain", "-r", "VCPU:1", "--required", "HW_CPU_X86_AVX2")
    assert result.exit_code == 0, result.output
    assert "dry run, nothing claimed" in result.output
    assert "trait HW_CPU_X86_AVX2 missing" in result.output and "remaining" in result.output
    assert sum(vcpu_used(in_process, rp) for rp in racks.values()) == 0
    result = invoke("explain", "-r", "VCPU:64")
    assert result.exit_code == 1, result.output
    assert "VCPU: short of 64" in result.output and "nothing fits" in result.output


def test_schedule_explain_flag_adds_the_funnel(in_process: TestClient,
                                               racks: dict[str, str]) -> None:
    result = invoke("schedule", "-r", "VCPU:1", "--location", "ord/*", "--explain")
    assert result.exit_code == 0, result.output
    assert "location ord/*" in result.output and "1 of 1 consumer(s) placed" in result.output


def test_json_prints_the_raw_answer(in_process: TestClient, racks: dict[str, str]) -> None:
    result = invoke("schedule", "-r", "VCPU:1", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["dry_run"] is True and len(answer["placements"]) == 1
    assert sum(vcpu_used(in_process, rp) for rp in racks.values()) == 0
    result = invoke("schedule", "-r", "VCPU:99", "--json")
    assert result.exit_code == 1
    assert json.loads(result.output)["errors"][0]["code"] == "strato.no_valid_placement"


def test_request_id_replays(in_process: TestClient, racks: dict[str, str]) -> None:
    first = invoke("schedule", "-r", "VCPU:3", "--request-id", "cli-1", "--json")
    again = invoke("schedule", "-r", "VCPU:3", "--request-id", "cli-1")
    assert first.exit_code == 0 and again.exit_code == 0, again.output
    assert "replayed answer of request_id cli-1" in again.output
    assert json.loads(first.output)["placements"][0]["consumer_uuid"] in again.output
    assert sum(vcpu_used(in_process, rp) for rp in racks.values()) == 3


# -- against a real server process -------------------------------------------------------

@pytest.fixture
def server(sqlite_db_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(sqlite_db_url, extra=["--auth-token", "s3cret"],
                       log_path=tmp_path / "server.log") as s:
        yield s


@pytest.mark.slow
def test_against_a_real_server_with_a_token(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, headers={**api.HEADERS, "x-auth-token": "s3cret"},
                      timeout=30) as c:
        rp = api.make_provider(c, "h1", {"VCPU": {"total": 4}})
        result = invoke("schedule", "--url", server.url, "-r", "VCPU:3",
                        env={"STRATO_AUTH_TOKEN": "s3cret"})
        assert result.exit_code == 0, result.output
        assert "h1" in result.output and vcpu_used(c, rp) == 3
        result = invoke("explain", "--url", server.url, "-r", "VCPU:3", "--token", "s3cret")
        assert result.exit_code == 1 and "VCPU: short of 3" in result.output
        result = invoke("schedule", "--url", server.url, "-r", "VCPU:1", "--token", "wrong")
        assert result.exit_code == 1 and "HTTP 401" in result.output
    server.stop()
    result = invoke("schedule", "--url", server.url, "-r", "VCPU:1")
    assert result.exit_code == 3 and "could not be reached" in result.output


# -- the wire format the command reads --------------------------------------------------

def test_answers_match_the_published_model(in_process: TestClient,
                                           racks: dict[str, str]) -> None:
    from strato.model.schedule import ScheduleAnswer

    def post(path: str, **extra: Any) -> dict[str, Any]:
        body = {"consumers": [str(uuid.uuid4())], "project_id": "p", "user_id": "u",
                "groups": [{"resources": {"VCPU": 1}}], **extra}
        return dict(in_process.post(path, json=body).json())

    answers = [
        post("/strato/v1/schedule", constraints=[
            {"type": "location", "pattern": "lon/*", "hard": False}]),
        post("/strato/v1/schedule", request_id="model-1"),
        post("/strato/v1/schedule", request_id="model-1"),
        post("/strato/v1/explain", groups=[{"resources": {"VCPU": 99}}]),
    ]
    assert answers[0]["relaxed"] and answers[2].get("replayed")
    for answer in answers:
        ScheduleAnswer.model_validate(answer, strict=False)


def test_explain_leads_with_why_nothing_fits(in_process: TestClient,
                                            racks: dict[str, str]) -> None:
    result = invoke("explain", "-r", "VCPU=64",
                    "--consumer", "c0ffee00-0000-4000-8000-000000000001")
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    # The answer first: nothing fits and why, then the funnel, then the tally.
    assert lines[0].startswith("nothing fits"), lines[0]
    assert "VCPU: short of 64" in lines[0]
    # Said once: the funnel's summary line is not printed again below it.
    assert not [ln for ln in lines if ln.startswith("summary")], result.output
    funnel = next(i for i, ln in enumerate(lines) if "explain: unsuffixed group" in ln)
    tally = next(i for i, ln in enumerate(lines) if "placed" in ln and "nothing" not in ln)
    assert funnel < tally == len(lines) - 1
    assert lines[tally] == ("0 of 1 consumer(s) would be placed; not placed: "
                            "c0ffee00-0000-4000-8000-000000000001"), lines[tally]
    assert "unplaced" not in result.output


def test_a_zone_that_cannot_be_reached_exits_3_as_for_every_command() -> None:
    """Not 1: a script must tell "nothing fits" from "no zone to ask"."""
    for command in ("schedule", "explain"):
        result = invoke(command, "-r", "VCPU:1", "--url", "http://127.0.0.1:1")
        assert result.exit_code == 3, (command, result.output)
        assert "could not be reached" in result.output, result.output


def test_a_narrow_funnel_keeps_its_title_on_one_line() -> None:
    from rich.console import Console

    explain = {"groups": [{"suffix": None, "providers": 3, "remaining": 0,
                           "removed": [{"stage": "constraint", "reason": "tags gpu",
                                        "count": 3}]}]}
    console = Console(width=200, record=True)
    for t in sched.explain_tables(explain):
        console.print(t)
    assert "explain: unsuffixed group, 3 providers" in console.export_text()
