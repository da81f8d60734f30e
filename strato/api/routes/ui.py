"""`GET /ui`: a zone's read-only web page, and `/docs` served without a CDN.

One server-rendered HTML page, no script and no asset from elsewhere (it
works on a machine with no internet): the tree below the zone with health
and a capacity bar per class, the zone's last decisions (placements, and
refusals with their explain), and its requests in doubt. It refreshes itself
every `?refresh=N` seconds (default 10, 0 for never).

It shows consumers and hosts, so it needs an admin, as the API does. A
browser cannot send `X-Auth-Token`; it sends the token as the password of
HTTP Basic authentication (any user name), which the browser asks for when
the page answers 401 (api/middleware.py).

What the children say is input: every text is escaped, every number checked,
and a child that does not answer within `LOOK_S` is shown as such.
"""

from __future__ import annotations

import asyncio
import html
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

import strato
from strato.api import deps
from strato.api.recent import Decision, Recent
from strato.store import in_doubt
from strato.store.children import Child
from strato.store.db import Database
from strato.zone.transport import Unreachable
from strato.zone.tree import ZoneTree

router = APIRouter(tags=["ui"], include_in_schema=False)
LOOK_S = 2.0          # seconds to wait for a child's list of its children
MAX_NODES = 200       # zones drawn below this one (the rest are counted)
MAX_DOUBT = 50        # requests in doubt listed
DOCS_STATIC = "/docs/static"


def docs_assets() -> Path:
    """Swagger UI's files, from the fastapi-offline wheel (a current Swagger UI
    that reads OpenAPI 3.1, which FastAPI writes)."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


@router.get("/docs")
async def docs() -> Response:
    return get_swagger_ui_html(
        openapi_url="/openapi.json", title="Strato API",
        swagger_js_url=f"{DOCS_STATIC}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_STATIC}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_STATIC}/favicon.png")


@router.get("/ui")
async def ui(request: Request, refresh: int = 10) -> Response:
    deps.require_admin(request, "strato:ui:show")
    tree: ZoneTree = request.app.state.tree
    recent: Recent = request.app.state.recent
    summary = await tree.summary()
    kids = await tree.children()
    doubt_counts = await tree.in_doubt_counts()
    doubts = await run_in_threadpool(_pending, request.app.state.db)
    below = await asyncio.gather(*(_children_of(tree, c) for c in kids))
    page = _page(tree, summary, kids, doubt_counts, below, recent.latest(), doubts,
                 max(0, min(refresh, 3600)))
    return HTMLResponse(page, headers={"cache-control": "no-store",
                                       "content-security-policy": CSP})


def _pending(db: Database) -> list[in_doubt.InDoubt]:
    with db.read() as conn:
        return in_doubt.pending(conn, limit=MAX_DOUBT)


# Nothing is loaded from anywhere: no script at all, styles only inline.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; frame-ancestors 'none'"


async def _children_of(tree: ZoneTree, child: Child) -> list[dict[str, Any]] | str:
    """The child's own children as it lists them, or why they are not shown."""
    if not tree.health_of(child.name).healthy:
        return "not asked: unhealthy"
    try:
        reply = await tree.transport.call(child.url, "GET", "/strato/v1/children",
                                          token=child.credential,
                                          timeout=min(LOOK_S, tree.config.child_timeout))
    except Unreachable as exc:
        return f"could not be asked: {exc.why}"
    body = reply.body
    if reply.status != 200 or not isinstance(body, dict) or not isinstance(
            body.get("children"), list):
        return f"answered {reply.status}"
    return [k for k in body["children"] if isinstance(k, dict)]


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(0, min(n, 2**63))


def _bars(summary: Any) -> str:
    classes = summary.get("classes") if isinstance(summary, dict) else None
    if not isinstance(classes, dict) or not classes:
        return '<div class="bars empty">no capacity</div>'
    rows = []
    for rc, c in sorted(classes.items(), key=lambda kv: str(kv[0]))[:32]:
        if not isinstance(c, dict):
            continue
        used, cap = _num(c.get("used")), _num(c.get("capacity"))
        share = min(1.0, used / cap) if cap else 0.0
        level = "low" if share < 0.7 else "mid" if share < 0.9 else "high"
        rows.append(
            f'<div class="bar-row"><span class="rc">{_e(rc)}</span>'
            f'<span class="bar" role="meter" aria-label="{_e(rc)} used" aria-valuemin="0" '
            f'aria-valuemax="{cap}" aria-valuenow="{used}">'
            f'<span class="fill {level}" style="width:{share * 100:.1f}%"></span></span>'
            f'<span class="num">{used:,} / {cap:,} ({share:.0%})</span></div>')
    return f'<div class="bars">{"".join(rows)}</div>'


def _health(h: Any) -> str:
    if not isinstance(h, dict):
        return '<span class="badge">unknown</span>'
    if h.get("healthy"):
        return '<span class="badge ok">healthy</span>'
    why = str(h.get("last_error") or "")[:200]
    return f'<span class="badge down">unhealthy</span> <span class="why">{_e(why)}</span>'


def _node(name: Any, badge: str, summary: Any, extra: str = "", inner: str = "",
          link: str | None = None) -> str:
    title = f'<a href="{_e(link)}">{_e(name)}</a>' if link else _e(name)
    return (f'<li class="zone" data-zone="{_e(name)}"><div class="node">'
            f'<span class="name">{title}</span> {badge} {extra}</div>{_bars(summary)}'
            f'{inner}</li>')


def _page(tree: ZoneTree, summary: dict[str, Any], kids: list[Child],
          doubt: dict[str, int], below: list[list[dict[str, Any]] | str],
          decisions: list[Decision], doubts: list[in_doubt.InDoubt], refresh: int) -> str:
    shown = 0
    items = []
    for c, grand in zip(kids, below, strict=True):
        cached = tree.cache.get(c.name)
        extra = f'<span class="doubt">{doubt[c.name]} in doubt</span>' if doubt.get(
            c.name) else ""
        if c.location_prefix:
            extra = f'<span class="loc">{_e(c.location_prefix)}</span> ' + extra
        if isinstance(grand, str):
            inner = f'<div class="note">{_e(grand)}</div>' if grand else ""
        else:
            nodes = []
            for g in grand:
                if shown >= MAX_NODES:
                    break
                shown += 1
                gd = _num(g.get("in_doubt"))
                nodes.append(_node(
                    str(g.get("name", "?"))[:100], _health(g.get("health")), g.get("summary"),
                    f'<span class="doubt">{gd} in doubt</span>' if gd else ""))
            more = len(grand) - len(nodes)
            inner = (f'<ul>{"".join(nodes)}</ul>' if nodes else "") + (
                f'<div class="note">{more} more zones not shown</div>' if more > 0 else "")
        shown += 1
        link = c.url.rstrip("/") + "/ui" if c.url.startswith(("http://", "https://")) else None
        items.append(_node(c.name, _health(tree.health_of(c.name).as_dict()),
                           cached.body if cached else None, extra, inner, link))
    me = tree.config.name
    top = _node(me, '<span class="badge self">this zone</span>', summary,
                f'<span class="loc">{_e(tree.config.location_prefix or "")}</span> '
                f'<span class="count">{_num(summary.get("providers")):,} providers below</span>',
                f'<ul>{"".join(items)}</ul>' if items else "")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""}
<title>Strato · {_e(me)}</title><style>{STYLE}</style></head>
<body><header><h1>Strato · zone <span id="zone">{_e(me)}</span></h1>
<p>version {_e(strato.__version__)} · {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
{f" · refreshes every {refresh}s" if refresh else ""} ·
<a href="/docs">API</a> · <a href="/metrics">metrics</a> · <a href="/readyz">ready?</a></p>
</header>
<section id="tree"><h2>The tree below</h2><ul class="tree">{top}</ul></section>
<section id="recent"><h2>Recent decisions</h2>{_decisions(decisions)}</section>
<section id="doubt"><h2>Requests in doubt</h2>{_doubts(doubts)}</section>
</body></html>"""


def _decisions(decisions: list[Decision]) -> str:
    if not decisions:
        return '<p class="note">No schedule request since this process started.</p>'
    rows = []
    for d in decisions:
        when = time.strftime("%H:%M:%S", time.gmtime(d.at))
        if d.result == "placed":
            where = ", ".join(f"{_e(host)} <span class=\"zpath\">{_e(zone)}</span>"
                              for _, host, zone in d.placements)
            if d.placed > len(d.placements):
                where += f" and {d.placed - len(d.placements)} more"
            what = f'<span class="badge ok">placed {d.placed}</span>'
        else:
            lines = "".join(f"<li>{_e(line)}</li>" for line in d.explain)
            where = (f'<details><summary>{_e(d.detail or "")}</summary><ul>{lines}</ul>'
                     f'</details>') if lines else _e(d.detail or "")
            what = f'<span class="badge down">{_e(d.result)}</span>'
        rows.append(f"<tr class=\"{_e(d.result)}\"><td>{when}</td><td>{_e(d.request_id or '-')}"
                    f"</td><td>{what}</td><td>{d.consumers}</td><td>{d.seconds * 1000:.1f} ms"
                    f"</td><td>{where}</td></tr>")
    return ("<table><thead><tr><th>UTC</th><th>request</th><th>result</th><th>consumers</th>"
            f"<th>took</th><th>where, or why not</th></tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>")


def _doubts(doubts: list[in_doubt.InDoubt]) -> str:
    if not doubts:
        return '<p class="note">None: every answer from the children was heard.</p>'
    rows = "".join(
        f"<tr><td>{_e(d.child)}</td><td>{_e(d.request_id)}</td><td>{len(d.consumers)}</td>"
        f"<td>{_e(d.reason[:200])}</td><td>{d.attempts}</td>"
        f"<td>{_e((d.last_error or '')[:200])}</td></tr>" for d in doubts)
    return ("<table><thead><tr><th>child</th><th>request</th><th>consumers</th><th>why</th>"
            f"<th>tries</th><th>last error</th></tr></thead><tbody>{rows}</tbody></table>")


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:0}h2{font-size:1.1em;margin:1.2em 0 .4em}
header p{margin:.2em 0;color:#555}a{color:#0b5cad}
ul.tree,ul.tree ul{list-style:none;padding-left:1.4em;margin:0}
ul.tree{padding-left:0}li.zone{margin:.4em 0;padding:.3em .5em;border-left:3px solid #ccd}
.node .name{font-weight:600}.badge{font-size:.8em;padding:.05em .5em;border-radius:.7em;
background:#ddd}.badge.ok{background:#cdebd3;color:#135c22}.badge.down{background:#f6d0cd;
color:#8a1c12}.badge.self{background:#d6e4f5;color:#123f6e}.loc,.zpath,.count{color:#666;
font-size:.9em}.doubt{color:#8a5a00;font-weight:600}.why,.note{color:#8a1c12;font-size:.9em}
.note{color:#666}.bars{margin:.2em 0 .2em .2em}.bar-row{display:flex;align-items:center;
gap:.6em;margin:.1em 0}.rc{width:11em;font-family:monospace;font-size:.9em}
.bar{display:inline-block;width:16em;height:.9em;background:#e4e4e4;border-radius:.2em;
overflow:hidden}.fill{display:block;height:100%}.fill.low{background:#2e9e47}
.fill.mid{background:#d89a00}.fill.high{background:#c7372a}.num{font-size:.85em;color:#444}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:.25em .5em;
text-align:left;vertical-align:top;font-size:.9em}details summary{cursor:pointer}
"""
