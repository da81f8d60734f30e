"""Differential conformance check: Strato against real OpenStack Placement 16.0.0.

    .venv/bin/python -m tests.conformance.diff [--verbose] [--only PREFIX] [--json PATH]

Starts Placement (benchmarks/peer, its own virtualenv `.venv-placement/`,
noauth2, SQLite; created on first use) and `strato serve` (SQLite, or
`--strato-db URL`), sends every case of `tests.conformance.cases` to both in
order, and compares:

- the status code;
- the error `code` of the first error, where Placement gives one;
- for a success, the body after masking what cannot align (uuids the
  catalogue did not fix, timestamps, the host of links), both its shape (keys
  and JSON types) and its values; lists compare as sorted.
- a few headers: `openstack-api-version`, and the presence of `location`,
  `last-modified` and `cache-control`; on every answer the media type and the
  presence of `allow` and `x-openstack-request-id`.

It prints one line per divergence and exits 1 when any divergence is not in
`ALLOWED` (each entry says why Strato knowingly differs), 0 otherwise. Not part
of the default pytest run: it needs the peer's virtualenv (created on first
use, ~15-30 s, from PyPI) and two servers; a run takes 10-30 s (see
tests/conformance/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.peer.placement import PlacementPeer, ensure_peer_venv
from strato.process import ServerProcess
from tests.conformance.cases import Case, ConsumerGen, Gen, catalogue, u

# case name -> why Strato knowingly differs there. An entry covers every
# aspect (status, code, body, header) of that case.
ALLOWED: dict[str, str] = {
    "rp-query-uuid-upper@1.0": (
        "Placement compares ?uuid= as text, so an upper-case spelling of a stored uuid "
        "finds nothing; Strato reads it as the uuid it spells. Lenient, harmless, left."),
    "inv-put-min>max": (
        "Placement bug: it stores min_unit > max_unit, an inventory no allocation can "
        "ever use; Strato refuses it with a 400."),
    "inv-put-min>max-get": "follows from inv-put-min>max (Placement stored it)",
    "traits-query-bad-prefix": (
        "Placement bug: ?name=foo:HW (neither in: nor startswith:) is ignored and every "
        "trait listed; Strato answers the 400 that Placement's own message describes."),
    "agg-put-braced": (
        "Placement bug: a braced aggregate uuid passes its schema and is stored braced "
        "('{...}'), so member_of can never match it; Strato refuses it."),
    "alloc-put-empty-allocs-again": (
        "Placement bug: PUT of empty allocations for an unknown consumer leaves an "
        "empty consumer record (generation 0) behind, so the next consumer_generation: "
        "null is a 409; Strato keeps no consumer without allocations, as Placement does "
        "after any other write that empties one."),
    "alloc-put-empty-allocs-cleanup": "follows from alloc-put-empty-allocs-again",
    "inv-delete-in-use": (
        "Placement sends placement.concurrent_update for DELETE of one class in use (a "
        "client would retry it forever); Strato sends placement.inventory.inuse, as "
        "Placement itself does for the same condition on DELETE of all and on PUT."),
    "ac-limit@1.16": (
        "limit keeps the first candidates in each server's order: Placement's is provider "
        "id, Strato's is its weigher (spread), so other providers are kept."),
    "json-deep": "Placement bug: a deeply nested body is a 500 (recursion); Strato a 400.",
    "json-nan": (
        "Strato refuses NaN (not JSON) with a 400; Placement's parser takes it and fails "
        "later (a 500 with a current generation, a 409 with a stale one)."),
    "name-nul": (
        "Strato refuses a NUL in a name (PostgreSQL text cannot hold one, so Placement on "
        "PostgreSQL fails with a 500); Placement on SQLite stores it."),
    "name-nul-delete": "follows from name-nul (only Placement has that provider to delete)",
    "content-type-upper": (
        "Placement bug: it compares the media type case-sensitively, so "
        "'Application/JSON' is a 415; media types are case-insensitive (RFC 9110) and "
        "Strato takes it."),
    "content-type-upper-delete": "follows from content-type-upper (only Strato has it)",
}

_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                   r"[0-9a-fA-F]{12}")
_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
_HEADERS_PRESENT = ("location", "last-modified", "cache-control")
# Compared on every answer, errors too. Not `vary`: Placement drops it (with
# openstack-api-version) from the 404s its object layer raises and from a few
# 400s, but not from others; Strato always sends it, which no client can mind.
_HEADERS_ALWAYS = ("allow", "x-openstack-request-id")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any
    text: str


@dataclass
class Divergence:
    case: Case
    aspect: str
    placement: Any
    strato: Any

    @property
    def allowed(self) -> str | None:
        return ALLOWED.get(self.case.name)


def _current(client: httpx.Client, marker: Gen | ConsumerGen) -> int | None:
    """What a Gen or ConsumerGen marker stands for on this server, now."""
    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement latest"}
    if isinstance(marker, Gen):
        r = client.get(f"/resource_providers/{marker.provider}", headers=headers)
        return r.json().get("generation") if r.status_code == 200 else 0
    r = client.get(f"/allocations/{marker.consumer}", headers=headers)
    return r.json().get("consumer_generation") if r.status_code == 200 else None


def resolve(client: httpx.Client, body: Any) -> Any:
    if isinstance(body, Gen | ConsumerGen):
        return _current(client, body)
    if isinstance(body, dict):
        return {k: resolve(client, v) for k, v in body.items()}
    if isinstance(body, list):
        return [resolve(client, v) for v in body]
    return body


def send(client: httpx.Client, case: Case) -> Answer:
    headers = {"X-Auth-Token": "admin", "Accept": "application/json", **case.headers}
    if case.version is not None:
        headers["OpenStack-API-Version"] = f"placement {case.version}"
    kwargs: dict[str, Any] = {"headers": headers}
    if case.raw is not None:
        kwargs["content"] = case.raw
    elif case.body is not None:
        kwargs["json"] = resolve(client, case.body)
    r = client.request(case.method, case.path, **kwargs)
    try:
        body = r.json() if r.content else None
    except ValueError:
        body = None
    return Answer(r.status_code, {k.lower(): v for k, v in r.headers.items()}, body, r.text)


def _known_uuids() -> set[str]:
    from tests.conformance import cases
    return {v.lower().replace("-", "") for k, v in vars(cases).items()
            if k.isupper() and isinstance(v, str) and _UUID.fullmatch(v)}


def normalize(value: Any, known: set[str]) -> Any:
    """Mask what cannot align between two servers, sort lists."""
    if isinstance(value, dict):
        return {_mask_str(k, known): normalize(v, known) for k, v in value.items()}
    if isinstance(value, list):
        items = [normalize(v, known) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, str):
        return _mask_str(value, known)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _mask_str(s: str, known: set[str]) -> str:
    if _TS.match(s):
        return "<timestamp>"
    s = re.sub(r"^https?://[^/]+", "", s)

    def sub(m: re.Match[str]) -> str:
        return m.group(0) if m.group(0).lower().replace("-", "") in known else "<uuid>"
    return _UUID.sub(sub, s)


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        shapes = {json.dumps(shape(v), sort_keys=True) for v in value}
        return [json.loads(s) for s in sorted(shapes)]
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, int | float):
        return "number"
    return "string"


def _error_keys(body: Any) -> list[str] | None:
    """The keys of the first error (Placement's have no `code` before 1.23)."""
    if isinstance(body, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        first = body["errors"][0]
        if isinstance(first, dict):
            return sorted(first)
    return None


def _error_code(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("errors"), list) and body["errors"]:
        first = body["errors"][0]
        if isinstance(first, dict):
            return first.get("code")
    return None


def _media(a: Answer) -> str | None:
    ct = a.headers.get("content-type")
    return ct.split(";")[0].strip().lower() if ct and a.text else None


def compare(case: Case, p: Answer, s: Answer, known: set[str]) -> Iterator[Divergence]:
    if p.status != s.status:
        yield Divergence(case, "status", f"{p.status} {_brief(p)}", f"{s.status} {_brief(s)}")
        return
    for h in _HEADERS_ALWAYS:
        if (h in p.headers) != (h in s.headers):
            yield Divergence(case, f"header:{h}", p.headers.get(h), s.headers.get(h))
    if _media(p) != _media(s):
        yield Divergence(case, "header:content-type", p.headers.get("content-type"),
                         s.headers.get("content-type"))
    if p.status >= 400:
        code = _error_code(p.body)
        if code is not None and code != _error_code(s.body):
            yield Divergence(case, "code", code, _error_code(s.body))
        pk, sk = _error_keys(p.body), _error_keys(s.body)
        if pk is not None and pk != sk:
            yield Divergence(case, "error-keys", pk, sk)
        return
    pv, sv = p.headers.get("openstack-api-version"), s.headers.get("openstack-api-version")
    if pv != sv:
        yield Divergence(case, "header:openstack-api-version", pv, sv)
    for h in _HEADERS_PRESENT:
        if (h in p.headers) != (h in s.headers):
            yield Divergence(case, f"header:{h}", p.headers.get(h), s.headers.get(h))
    pb, sb = normalize(p.body, known), normalize(s.body, known)
    if shape(pb) != shape(sb):
        yield Divergence(case, "shape", _diff_keys(pb, sb), None)
    elif pb != sb:
        yield Divergence(case, "value", *_first_value_diff(pb, sb))


def _brief(a: Answer) -> str:
    detail = None
    if isinstance(a.body, dict) and a.body.get("errors"):
        e = a.body["errors"][0]
        # Placement's detail starts with the status's generic sentence.
        lines = [ln.strip() for ln in str(e.get("detail")).splitlines() if ln.strip()]
        detail = f"{e.get('code')}: {(lines[-1] if lines else '')[:160]}"
    return detail or a.text[:160].replace("\n", " ")


def _diff_keys(p: Any, s: Any, path: str = "") -> str:
    if isinstance(p, dict) and isinstance(s, dict):
        only_p, only_s = set(p) - set(s), set(s) - set(p)
        if only_p or only_s:
            return f"{path or '/'}: only placement {sorted(only_p)}, only strato {sorted(only_s)}"
        for k in p:
            if shape(p[k]) != shape(s[k]):
                return _diff_keys(p[k], s[k], f"{path}/{k}")
    if isinstance(p, list) and isinstance(s, list):
        if len(p) != len(s):
            return f"{path}: {len(p)} items vs {len(s)}"
        for i, (a, b) in enumerate(zip(p, s, strict=True)):
            if shape(a) != shape(b):
                return _diff_keys(a, b, f"{path}[{i}]")
    return f"{path}: {json.dumps(p)[:200]} vs {json.dumps(s)[:200]}"


def _first_value_diff(p: Any, s: Any, path: str = "") -> tuple[str, str]:
    if isinstance(p, dict) and isinstance(s, dict):
        for k in p:
            if p[k] != s.get(k):
                return _first_value_diff(p[k], s.get(k), f"{path}/{k}")
    if isinstance(p, list) and isinstance(s, list) and len(p) != len(s):
        pk = [json.dumps(x, sort_keys=True) for x in p]
        sk = [json.dumps(x, sort_keys=True) for x in s]
        return (f"{path}: only placement {[x[:200] for x in pk if x not in sk]}",
                f"{path}: only strato {[x[:200] for x in sk if x not in pk]}")
    if isinstance(p, list) and isinstance(s, list) and len(p) == len(s):
        for i, (a, b) in enumerate(zip(p, s, strict=True)):
            if a != b:
                return _first_value_diff(a, b, f"{path}[{i}]")
    return (f"{path}: {json.dumps(p)[:300]}", f"{path}: {json.dumps(s)[:300]}")


def run(cases: list[Case], placement_url: str, strato_url: str
        ) -> tuple[list[Divergence], list[tuple[Case, Answer, Answer]]]:
    known = _known_uuids()
    out: list[Divergence] = []
    seen: list[tuple[Case, Answer, Answer]] = []
    with httpx.Client(base_url=placement_url, timeout=60) as pc, \
            httpx.Client(base_url=strato_url, timeout=60) as sc:
        for case in cases:
            p, s = send(pc, case), send(sc, case)
            seen.append((case, p, s))
            out.extend(compare(case, p, s, known))
    return out, seen


@contextlib.contextmanager
def _strato_db(arg: str | None, tmp: Path) -> Iterator[str]:
    """Strato's database: the URL given, a temporary SQLite file, or with
    'postgresql' a fresh database on the local server, dropped afterwards."""
    if arg != "postgresql":
        yield arg or f"sqlite:///{tmp / 'strato.db'}"
        return
    import psycopg

    server = os.environ.get("STRATO_PEER_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"strato_conf_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield "postgresql+psycopg://" + server.split("://", 1)[1].rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the cases whose name starts with this "
                    "(their setup cases are then missing: expect noise)")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every case")
    ap.add_argument("--json", help="write every divergence to this file")
    ap.add_argument("--strato-db", help="Strato's database URL, or 'postgresql' for a "
                    "temporary database on $STRATO_PEER_PG_URL (default: a temporary SQLite)")
    args = ap.parse_args(argv)
    cases = [c for c in catalogue() if c.name.startswith(args.only)]
    t0 = time.perf_counter()
    ensure_peer_venv()
    with tempfile.TemporaryDirectory(prefix="strato-conf-") as tmp, \
            _strato_db(args.strato_db, Path(tmp)) as db_url, \
            PlacementPeer(workers=1, threads=1) as peer, \
            ServerProcess(db_url, log_path=Path(tmp) / "strato.log") as strato:
        started = time.perf_counter()
        divergences, seen = run(cases, peer.url, strato.url)
        ran = time.perf_counter() - started
    if args.verbose:
        for case, p, s in seen:
            why = f"  {_brief(p)[:110]}" if p.status >= 400 else ""
            print(f"{case.name:50} {case.method:6} {p.status} {s.status}{why}")
    bad = [d for d in divergences if d.allowed is None]
    allowed = [d for d in divergences if d.allowed is not None]
    for d in divergences:
        mark = "allowed" if d.allowed else "DIVERGES"
        print(f"{mark:8} {d.case.name} [{d.aspect}] {d.case.method} {d.case.path} "
              f"@{d.case.version}\n         placement: {d.placement}\n"
              f"         strato:    {d.strato}")
        if d.allowed:
            print(f"         why:       {d.allowed}")
    stale = sorted(set(ALLOWED) - {d.case.name for d in divergences}
                   - ({c.name for c in catalogue()} - {c.name for c in cases}))
    for name in stale:
        print(f"stale    allow-list entry {name}: no divergence any more")
    print(f"{len(cases)} cases, {len(bad)} divergences, {len(allowed)} allowed, "
          f"{len(stale)} stale allow-list entries; {ran:.1f} s of requests, "
          f"{time.perf_counter() - t0:.1f} s in all")
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{"case": d.case.name, "aspect": d.aspect, "placement": d.placement,
              "strato": d.strato, "allowed": d.allowed} for d in divergences], indent=1))
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["ALLOWED", "Divergence", "compare", "main", "normalize", "run", "u"]
