"""`strato schedule` and `strato explain`: place consumers through a zone, or say why not.

The request comes from flags or from a JSON/YAML file (`-f`), flags applied on
top of the file. The server validates it (it is the authority, and may be newer
than this client); this module only turns flags into the wire format of
`strato.model.schedule.ScheduleRequest` and prints the answer.

Exit codes: 0 placed (or, for `explain`, would place); 1 nothing fits
(`strato.no_valid_placement`) or another refusal; 2 the request is invalid
(a 400, or flags/file this command cannot read, a --url or --timeout it
cannot use); 3 the zone could not be reached (as every other command says it).
What answers but not as a Strato zone is exit 1 (strato.cli.wire).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from strato.cli import consoles, hints, wire
from strato.model.amounts import AmountError, parse_amounts

DEFAULT_URL = "http://127.0.0.1:8780"
NO_VALID_PLACEMENT = "strato.no_valid_placement"
# Host names are looked up for the placements table; past this many distinct
# hosts the table shows uuids rather than making one GET per host.
MAX_NAME_LOOKUPS = 50


class InputError(ValueError):
    """Flags or a request file this command cannot turn into a request (exit 2)."""


# Tests swap this for a factory returning an in-process client (Starlette's
# TestClient is an httpx.Client), so the same code runs against a real server
# or the app in memory.
def _default_client(url: str, headers: dict[str, str], timeout: float) -> httpx.Client:
    return httpx.Client(base_url=url, headers=headers, timeout=timeout)


client_factory: Callable[[str, dict[str, str], float], httpx.Client] = _default_client


# -- building the request ---------------------------------------------------------

@dataclass(frozen=True)
class RuleFlag:
    """A rule value from the command line, with its `:soft[=W]` / `:hard` suffix split off."""

    value: str
    hard: bool | None  # None: use --soft / default
    weight: float | None


def split_rule(text: str) -> RuleFlag:
    """`dfw/*:soft=2` -> ('dfw/*', soft, 2). Colons never occur in locations, tags or
    levels, so the suffix is unambiguous."""
    value, sep, mode = text.partition(":")
    if not sep:
        return RuleFlag(text, None, None)
    if mode == "hard":
        return RuleFlag(value, True, None)
    if mode == "soft":
        return RuleFlag(value, False, None)
    if mode.startswith("soft="):
        try:
            return RuleFlag(value, False, float(mode[5:]))
        except ValueError:
            pass
    raise InputError(f"{text!r}: the suffix after ':' must be 'hard', 'soft' or 'soft=WEIGHT'")


def parse_resources(text: str) -> dict[str, int]:
    """`VCPU=2,MEMORY_MB:4096` -> {"VCPU": 2, "MEMORY_MB": 4096}."""
    try:
        out = parse_amounts([text], int)
    except AmountError as exc:
        # (its message ends with an example of one item; this shows a list)
        raise InputError(f"--resources {exc}; several: VCPU=2,MEMORY_MB=4096") from None
    if not out:
        raise InputError("--resources is empty")
    return out


def _csv(values: Sequence[str]) -> list[str]:
    return [v.strip() for text in values for v in text.split(",") if v.strip()]


def _traits(values: Sequence[str]) -> list[str]:
    """--required items, comma separated, but for `in:A,B` (any of A and B),
    which runs to the end of its flag, as in Placement's `required=in:A,B`:
    'X,in:A,B' is X and one of A and B."""
    out: list[str] = []
    for text in values:
        items = [v.strip() for v in text.split(",")]
        for i, item in enumerate(items):
            if item.startswith("in:"):
                out.append("in:" + ",".join(v for v in [item[3:].strip(), *items[i + 1:]] if v))
                break
            if item:
                out.append(item)
    return out


def _aggregates(text: str) -> list[str]:
    """One --member-of: any of its aggregates. Placement's query spelling
    'in:A,B' says the same."""
    return _csv([text.strip().removeprefix("in:")])


def load_file(path: Path) -> dict[str, Any]:
    """A request body from JSON or YAML (YAML is a superset, but JSON errors read better)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text (a request is JSON or YAML)") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: "
                         f"{hints.parse_error(exc)}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: the request must be a mapping (a JSON object)")
    return data


@dataclass
class Inputs:
    """Everything `schedule` and `explain` take, before it becomes a body."""

    file: Path | None = None
    resources: Sequence[str] = ()
    count: int | None = None
    consumers: Sequence[str] = ()
    project_id: str | None = None
    user_id: str | None = None
    consumer_type: str | None = None
    required: Sequence[str] = ()
    member_of: Sequence[str] = ()
    in_tree: str | None = None
    group_policy: str | None = None
    group: str | None = None
    affinity: Sequence[str] = ()
    anti_affinity: Sequence[str] = ()
    location: Sequence[str] = ()
    tag: Sequence[str] = ()
    forbid_tag: Sequence[str] = ()
    soft: bool = False
    weight: float | None = None
    weigher: str | None = None
    class_weight: Sequence[str] = ()
    spare: bool | None = None
    atomic: bool | None = None
    request_id: str | None = None
    dry_run: bool = False
    explain: bool = False


def _rule(kind: dict[str, Any], flag: RuleFlag, inp: Inputs) -> dict[str, Any]:
    hard = flag.hard if flag.hard is not None else not inp.soft
    rule = {**kind, "hard": hard}
    weight = flag.weight if flag.weight is not None else inp.weight
    if not hard and weight is not None:
        rule["weight"] = weight
    return rule


def _spread(kind: str, text: str, inp: Inputs) -> dict[str, Any]:
    """`rack`, `web@rack` or `web@rack:soft=2`: a level, optionally of another group."""
    flag = split_rule(text)
    group, at, level = flag.value.rpartition("@")
    spec: dict[str, Any] = {"type": kind, "level": level or "host"}
    if at and group:
        spec["group"] = group
    return _rule(spec, flag, inp)


def build_request(inp: Inputs) -> dict[str, Any]:
    """The request body: the file's (if any) with the flags applied on top."""
    body: dict[str, Any] = load_file(inp.file) if inp.file else {}
    if inp.resources:
        groups: list[dict[str, Any]] = [{"resources": parse_resources(r)}
                                        for r in inp.resources]
        body["groups"] = groups
    first: dict[str, Any] | None = body["groups"][0] if body.get("groups") else None
    if inp.required or inp.member_of or inp.in_tree:
        if first is None:
            raise InputError("--required, --member-of and --in-tree need --resources "
                             "(or groups in the file)")
        if inp.required:
            first["required"] = [*first.get("required", []), *_traits(inp.required)]
        if inp.member_of:
            # Each --member-of is one "any of" list; repeat it for "all of".
            first["member_of"] = [*first.get("member_of", []),
                                  *[_aggregates(m) for m in inp.member_of]]
        if inp.in_tree:
            first["in_tree"] = inp.in_tree
    if "groups" not in body and inp.file:
        raise InputError(f"{inp.file} has no 'groups' (what one instance needs: "
                         f"groups: [{{resources: {{VCPU: 2}}}}]; top-level keys: "
                         f"{', '.join(sorted(body)) or 'none'}; see docs/schedule.md) and "
                         "no --resources was given")
    if "groups" not in body:
        raise InputError("no resources: pass --resources CLASS=N[,...] or -f FILE")

    given = list(inp.consumers) or list(body.get("consumers") or [])
    if given and inp.count is not None and inp.count != len(given):
        raise InputError(f"--count {inp.count} but {len(given)} consumer(s) given")
    if not given:
        # One fresh consumer per instance: the caller launches with these uuids.
        given = [str(uuid.uuid4()) for _ in range(inp.count if inp.count is not None else 1)]
    body["consumers"] = given

    scalars = {"project_id": inp.project_id, "user_id": inp.user_id,
               "consumer_type": inp.consumer_type, "group_policy": inp.group_policy,
               "group": inp.group, "request_id": inp.request_id, "atomic": inp.atomic}
    body.update({k: v for k, v in scalars.items() if v is not None})
    body.setdefault("project_id", os.environ.get("STRATO_PROJECT_ID", "strato-cli"))
    body.setdefault("user_id", os.environ.get("STRATO_USER_ID", "strato-cli"))

    rules: list[dict[str, Any]] = []
    for text in inp.location:
        flag = split_rule(text)
        rules.append(_rule({"type": "location", "pattern": flag.value}, flag, inp))
    tags = [split_rule(t) for t in inp.tag] + [
        RuleFlag("!" + f.value, f.hard, f.weight) for f in map(split_rule, inp.forbid_tag)]
    for flag in tags:
        names = _csv([flag.value.lstrip("!")])
        key = "forbidden" if flag.value.startswith("!") else "required"
        rules.append(_rule({"type": "tags", key: names}, flag, inp))
    rules += [_spread("affinity", a, inp) for a in inp.affinity]
    rules += [_spread("anti_affinity", a, inp) for a in inp.anti_affinity]
    for option, texts in (("--affinity", inp.affinity), ("--anti-affinity", inp.anti_affinity)):
        for text in texts:
            if "group" not in body and "@" not in split_rule(text).value:
                # The zone's words ("set `group` on the rule or the request") name
                # the body's fields, not the flags.
                raise InputError(f"{option} {text} needs a server group: pass --group NAME "
                                 f"(the group these consumers join), or {option} "
                                 f"GROUP@{split_rule(text).value} for another group")
    if rules:
        body["constraints"] = [*body.get("constraints", []), *rules]

    if inp.weigher or inp.class_weight or inp.spare is not None:
        weigher = dict(body.get("weigher") or {})
        if inp.weigher:
            weigher["name"] = inp.weigher
        if inp.spare is not None:
            weigher["spare"] = inp.spare
        if inp.class_weight:
            try:
                weights = parse_amounts(inp.class_weight, float)
            except AmountError as exc:
                raise InputError(f"--class-weight {exc}") from None
            weigher["class_weights"] = {**(weigher.get("class_weights") or {}), **weights}
        body["weigher"] = weigher
    if inp.dry_run:
        body["dry_run"] = True
    if inp.explain:
        body["explain"] = True
    return body


# -- printing the answer -------------------------------------------------------------

def _fmt_alloc(allocs: dict[str, Any], names: dict[str, str], host: str) -> str:
    parts = []
    for rp, a in allocs.items():
        res = ", ".join(f"{rc}:{n}" for rc, n in sorted(a["resources"].items()))
        # Say which provider only when it is not the host itself (nested, shared).
        parts.append(res if rp == host else f"{names.get(rp, rp)}: {res}")
    return "; ".join(parts)


def placements_table(answer: dict[str, Any], names: dict[str, str]) -> Table:
    title = "placements (dry run, nothing claimed)" if answer.get("dry_run") else "placements"
    t = Table(title=title)
    for col in ("consumer", "host", "zone", "location", "allocations"):
        t.add_column(col, overflow="fold")
    t.add_column("score", justify="right")
    for p in answer["placements"]:
        host = p["provider"]
        zone = str(p.get("zone") or "")
        if p.get("shared_zone"):
            zone += f" (+ pool in {p['shared_zone']})"
        t.add_row(p["consumer_uuid"], escape(names.get(host, host)), escape(zone),
                  p.get("location") or "",
                  _fmt_alloc(p["allocations"], names, host), f"{p['score']:.3f}")
    return t


def explain_tables(explain: dict[str, Any]) -> list[Table]:
    out = []
    for g in explain.get("groups", []):
        suffix = g.get("suffix") or ""
        name = f"group {suffix!r}" if suffix else "unsuffixed group"
        title = f"explain: {name}, {g['providers']} providers"
        # As wide as its title: a narrow funnel (one short reason) would fold it.
        t = Table(title=title, min_width=len(title) + 2)
        t.add_column("stage")
        t.add_column("reason", overflow="fold")
        t.add_column("count", justify="right")
        for s in g["removed"]:
            t.add_row(s["stage"], escape(str(s["reason"])), str(s["count"]))
        t.add_row("[bold]remaining[/]", "", f"[bold]{g['remaining']}[/]", end_section=True)
        out.append(t)
    return out


def print_explain(console: Console, explain: dict[str, Any] | None,
                  said: str | None = None) -> None:
    """The funnel's tables, then its summary unless `said` (a line printed
    already) holds it."""
    if not explain:
        return
    for t in explain_tables(explain):
        console.print(t)
    if explain.get("summary") and not (said and str(explain["summary"]) in said):
        zone = f" (zone {explain['zone']})" if explain.get("zone") else ""
        console.print(f"summary{zone}: {explain['summary']}")


def tally(answer: dict[str, Any]) -> str:
    """The closing line: how many of the consumers were (or would be) placed, which not."""
    placed, unplaced = len(answer["placements"]), list(answer.get("unplaced") or [])
    verb = "would be placed" if answer.get("dry_run") else "placed"
    line = f"{placed} of {placed + len(unplaced)} consumer(s) {verb}"
    if unplaced:
        line += f"; not placed: {', '.join(unplaced)}"
    if answer.get("retries"):
        line += f"; retries {answer['retries']}"
    if answer.get("replayed"):
        line += f"; replayed answer of request_id {answer.get('request_id')}"
    return line


def print_answer(console: Console, answer: dict[str, Any], names: dict[str, str]) -> None:
    """The answer first (the placements, or why nothing fits), then the funnel, then
    the tally."""
    if answer.get("detail"):
        console.print(f"[red]nothing fits[/]: {escape(str(answer['detail']))}", soft_wrap=True)
    if answer["placements"]:
        console.print(placements_table(answer, names))
    for r in answer.get("relaxed", []):
        what = r.get("rule") or r["type"]
        console.print(f"[yellow]relaxed[/] soft rule #{r['index']} {what} "
                      f"(weight {r['weight']:g})")
    print_explain(console, answer.get("explain"), said=answer.get("detail"))
    console.print(tally(answer), soft_wrap=True)


def host_names(c: httpx.Client, answer: dict[str, Any]) -> dict[str, str]:
    """Provider names for the table; uuids stay when a lookup fails (never fatal)."""
    uuids = {rp for p in answer.get("placements", [])
             for rp in [p["provider"], *p["allocations"]]}
    if len(uuids) > MAX_NAME_LOOKUPS:
        return {}
    names: dict[str, str] = {}
    for rp in sorted(uuids):
        try:
            r = c.get(f"/resource_providers/{quote(rp, safe='')}")
        except httpx.HTTPError:
            return names
        if r.status_code == 200:
            try:
                names[rp] = str(r.json().get("name") or rp)
            except (ValueError, AttributeError):
                return names
    return names


def _error(r: httpx.Response) -> tuple[str, str]:
    """(code, detail) of a Placement-style error body, or the raw text."""
    try:
        err = r.json()["errors"][0]
        return str(err.get("code") or ""), str(err.get("detail") or err.get("title"))
    except (ValueError, KeyError, IndexError, TypeError):
        return "", r.text[:500]


def run(inp: Inputs, *, path: str, url: str, token: str | None, as_json: bool,
        timeout: float) -> int:
    """Send the request, print the answer; the exit code."""
    out = consoles.console()
    err = consoles.console(stderr=True)
    try:
        body = build_request(inp)
    except InputError as exc:
        err.print(f"[red]invalid request[/]: {escape(str(exc))}")
        return 2
    headers = {"x-auth-token": token} if token else {}
    # A zone that cannot be reached: exit 3; an answer that is not a zone's: 1.
    with wire.talking_to(url):
        with client_factory(url.rstrip("/"), headers, timeout) as c:
            r = c.post(path, json=body)
            ok = r.status_code == 200
            names = host_names(c, wire.answer(r, "placements")) if ok and not as_json else {}
        return _report(r, as_json, out, err, names)


def _report(r: httpx.Response, as_json: bool, out: Console, err: Console,
            names: dict[str, str]) -> int:
    """The answer printed; the exit code."""
    if as_json:
        try:
            out.print_json(data=r.json())
        except ValueError:
            out.print(r.text)
    if r.status_code == 200:
        answer = wire.answer(r, "placements")
        if not as_json:
            print_answer(out, answer, names)
        # explain answers 200 even when nothing fits: that is still "no".
        return 0 if answer["placements"] else 1
    code, detail = _error(r)
    if as_json:
        return 2 if r.status_code == 400 else 1
    if r.status_code == 409 and code == NO_VALID_PLACEMENT:
        # As explain says it: the detail begins "no valid placement for ...", and
        # holds the funnel's summary, which is not printed a second time.
        err.print(f"[red]nothing fits[/]: {escape(detail)}", soft_wrap=True)
        print_explain(out, r.json().get("explain"), said=detail)
        return 1
    if r.status_code == 400:
        err.print(f"[red]invalid request[/] (HTTP 400): {escape(detail)}")
        return 2
    err.print(f"[red]{hints.status(r.status_code, code, detail)}[/]", soft_wrap=True)
    return 1


# -- the commands ----------------------------------------------------------------------

def _inputs(**kw: Any) -> Inputs:
    return Inputs(**kw)


FILE = typer.Option(None, "--file", "-f", exists=False, dir_okay=False,
                    help="Request body as JSON or YAML; flags are applied on top.")
RESOURCES = typer.Option([], "--resources", "-r", help="CLASS=N[,...] per instance, e.g. "
                         "VCPU=2,MEMORY_MB=4096 (CLASS:N works too); repeat for more request "
                         "groups (numbered suffixes).")
COUNT = typer.Option(None, "--count", "-n", min=1, help="Instances (default 1, or the "
                     "number of --consumer given).")
CONSUMER = typer.Option([], "--consumer", help="Consumer uuid; repeat per instance. "
                        "Default: generated.")
PROJECT = typer.Option(None, "--project-id", help="Default: $STRATO_PROJECT_ID or "
                       "'strato-cli'.")
USER = typer.Option(None, "--user-id", help="Default: $STRATO_USER_ID or 'strato-cli'.")
CTYPE = typer.Option(None, "--consumer-type", help="e.g. INSTANCE.")
REQUIRED = typer.Option([], "--required", help="Traits for the first group, comma "
                        "separated; '!TRAIT' forbids; 'in:A,B' needs any of them (to the "
                        "end of the flag: 'X,in:A,B' is X and A or B).")
MEMBER_OF = typer.Option([], "--member-of", help="Aggregates, comma separated (any of; "
                         "'in:A,B' too); repeat for all of.")
IN_TREE = typer.Option(None, "--in-tree", help="Provider uuid whose tree to use.")
POLICY = typer.Option(None, "--group-policy", help="none or isolate (several groups).")
GROUP = typer.Option(None, "--group", "-g", help="Server group the consumers join; "
                     "affinity rules refer to it.")
AFFINITY = typer.Option([], "--affinity", help="LEVEL or GROUP@LEVEL (host, rack, room, "
                        "site); suffix ':soft[=W]' or ':hard'.")
ANTI = typer.Option([], "--anti-affinity", help="LEVEL or GROUP@LEVEL; suffix ':soft[=W]' "
                    "or ':hard'.")
LOCATION = typer.Option([], "--location", help="'dfw/room1/*' (prefix, globs) or "
                        "'host1.rack1.room1.dfw' (exactly that host); suffix ':soft[=W]'.")
TAG = typer.Option([], "--tag", help="Required tag ('!tag' forbids); suffix ':soft[=W]'.")
FORBID_TAG = typer.Option([], "--forbid-tag", help="Forbidden tag.")
SOFT = typer.Option(False, "--soft", help="Make every rule given by flags soft (unless "
                    "it says ':hard').")
WEIGHT = typer.Option(None, "--weight", min=0, help="Weight of soft rules (default 1); "
                      "lowest weight is relaxed first.")
WEIGHER = typer.Option(None, "--weigher", help="spread or pack.")
CLASS_WEIGHT = typer.Option([], "--class-weight", help="CLASS=WEIGHT[,...] for the weigher "
                            "(CLASS:WEIGHT works too).")
SPARE = typer.Option(None, "--spare/--no-spare", help="Keep hosts with a rare trait, tag "
                     "or class for the requests that ask for it (default: on).")
ATOMIC = typer.Option(None, "--atomic/--no-atomic", help="All instances or none "
                      "(default), or as many as fit.")
REQUEST_ID = typer.Option(None, "--request-id", help="Idempotency key: a repeat returns "
                          "the first answer and claims nothing.")
# --zone-url and STRATO_ZONE_URL too: the names `strato agent` and `strato providers` take.
URL = typer.Option(DEFAULT_URL, "--url", "--zone-url", envvar=["STRATO_URL", "STRATO_ZONE_URL"],
                   callback=wire.check_url, help="The zone server.")
TOKEN = typer.Option("admin", "--token", envvar="STRATO_AUTH_TOKEN", help="X-Auth-Token.")
JSON = typer.Option(False, "--json", help="Print the server's JSON answer as is.")
TIMEOUT = typer.Option(60.0, "--timeout", callback=wire.check_timeout,
                       help="Seconds to wait for the answer (more than 0).")


def schedule(
    file: Path = FILE, resources: list[str] = RESOURCES, count: int = COUNT,
    consumer: list[str] = CONSUMER, project_id: str = PROJECT, user_id: str = USER,
    consumer_type: str = CTYPE, required: list[str] = REQUIRED,
    member_of: list[str] = MEMBER_OF, in_tree: str = IN_TREE, group_policy: str = POLICY,
    group: str = GROUP, affinity: list[str] = AFFINITY, anti_affinity: list[str] = ANTI,
    location: list[str] = LOCATION, tag: list[str] = TAG, forbid_tag: list[str] = FORBID_TAG,
    soft: bool = SOFT, weight: float = WEIGHT, weigher: str = WEIGHER,
    class_weight: list[str] = CLASS_WEIGHT, spare: bool = SPARE, atomic: bool = ATOMIC,
    request_id: str = REQUEST_ID,
    dry_run: bool = typer.Option(False, "--dry-run", help="Pick, but claim nothing."),
    explain: bool = typer.Option(False, "--explain", help="Also show what each filter "
                                 "stage removed."),
    url: str = URL, token: str = TOKEN, as_json: bool = JSON, timeout: float = TIMEOUT,
) -> None:
    """Place and claim consumers in one call (POST /strato/v1/schedule).

    Exit 0 when placed, 1 when nothing fits (the explanation is printed), 2 when
    the request is invalid, 3 when the zone cannot be reached.
    """
    inp = _inputs(file=file, resources=resources, count=count, consumers=consumer,
                  project_id=project_id, user_id=user_id, consumer_type=consumer_type,
                  required=required, member_of=member_of, in_tree=in_tree,
                  group_policy=group_policy, group=group, affinity=affinity,
                  anti_affinity=anti_affinity, location=location, tag=tag,
                  forbid_tag=forbid_tag, soft=soft, weight=weight, weigher=weigher,
                  class_weight=class_weight, spare=spare, atomic=atomic, request_id=request_id,
                  dry_run=dry_run, explain=explain)
    raise typer.Exit(run(inp, path="/strato/v1/schedule", url=url, token=token,
                         as_json=as_json, timeout=timeout))


def explain(
    file: Path = FILE, resources: list[str] = RESOURCES, count: int = COUNT,
    consumer: list[str] = CONSUMER, project_id: str = PROJECT, user_id: str = USER,
    consumer_type: str = CTYPE, required: list[str] = REQUIRED,
    member_of: list[str] = MEMBER_OF, in_tree: str = IN_TREE, group_policy: str = POLICY,
    group: str = GROUP, affinity: list[str] = AFFINITY, anti_affinity: list[str] = ANTI,
    location: list[str] = LOCATION, tag: list[str] = TAG, forbid_tag: list[str] = FORBID_TAG,
    soft: bool = SOFT, weight: float = WEIGHT, weigher: str = WEIGHER,
    class_weight: list[str] = CLASS_WEIGHT, spare: bool = SPARE, atomic: bool = ATOMIC,
    url: str = URL, token: str = TOKEN, as_json: bool = JSON, timeout: float = TIMEOUT,
) -> None:
    """Explain where a request would go and what each stage removed
    (POST /strato/v1/explain: a dry run, nothing is claimed).

    Exit 0 when it would be placed, 1 when nothing fits, 2 when it is invalid, 3
    when the zone cannot be reached.
    """
    inp = _inputs(file=file, resources=resources, count=count, consumers=consumer,
                  project_id=project_id, user_id=user_id, consumer_type=consumer_type,
                  required=required, member_of=member_of, in_tree=in_tree,
                  group_policy=group_policy, group=group, affinity=affinity,
                  anti_affinity=anti_affinity, location=location, tag=tag,
                  forbid_tag=forbid_tag, soft=soft, weight=weight, weigher=weigher,
                  class_weight=class_weight, spare=spare, atomic=atomic)
    raise typer.Exit(run(inp, path="/strato/v1/explain", url=url, token=token,
                         as_json=as_json, timeout=timeout))
