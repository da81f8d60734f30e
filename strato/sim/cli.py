"""`strato sim SCENARIO`: run a scenario against Strato and baselines, write a report."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from strato.cli import consoles, hints, wire

if TYPE_CHECKING:
    from strato.sim.exact import SolveProgress

console = consoles.console(stderr=True)
# Without progress bars, a line every this many seconds of a long exact solve.
LINE_EVERY = 10.0


def _wide() -> Console:
    """Stdout, wide enough for every column of the tables even in a narrow terminal."""
    out = consoles.console()
    out.width = max(110, out.width)
    return out


@contextmanager
def _bars(enabled: bool) -> Iterator[Progress | None]:
    if not enabled:
        yield None
        return
    with Progress(TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bars:
        yield bars


def _scale(value: float) -> float:
    """A scale factor: a host count or a rate times 0 is no simulation."""
    if not value > 0:
        raise typer.BadParameter(f"{value:g}: a scale factor is more than 0 (0.5 halves, "
                                 "2 doubles)")
    return value


def sim(
    scenario: Path = typer.Argument(..., help="Scenario TOML file (see scenarios/)."),
    out: Path = typer.Option(None, help="Write report.json, report.md and plots here."),
    compare: str = typer.Option("strato", help="Policies, comma separated: strato, "
                                "strato-tree, strato-tree-best, strato-memory, "
                                "strato-tree-memory, strato-live, random, first-fit, nova, "
                                "exact."),
    seed: int = typer.Option(1, help="Same scenario + seed = same run."),
    seeds: int = typer.Option(1, min=1, help="Run seeds SEED .. SEED+N-1 and average the "
                              "headline figures (reports per seed in OUT/seed-K)."),
    providers: float = typer.Option(1.0, callback=_scale, help="Scale the host counts "
                                    "(and the arrival rate with them, keeping the load); "
                                    "more than 0."),
    requests: float = typer.Option(1.0, callback=_scale, help="Scale the number of "
                                   "requests; more than 0."),
    db: str = typer.Option(None, help="An empty PostgreSQL database for the in-process "
                           "zone (default: SQLite in a temporary directory)."),
    url: str = typer.Option(None, envvar="STRATO_URL", callback=wire.check_url,
                            help="A running Strato server, for strato-live."),
    token: str = typer.Option("admin", envvar="STRATO_AUTH_TOKEN",
                              help="X-Auth-Token for --url."),
    register: bool = typer.Option(True, "--register/--no-register",
                                  help="strato-live: register the scenario's providers "
                                  "(--no-register: the server already has them)."),
    time_scale: float = typer.Option(60.0, help="strato-live: virtual seconds per wall "
                                     "second."),
    timeout: float = typer.Option(60.0, "--timeout", callback=wire.check_timeout,
                                  help="strato-live: seconds to wait for each answer of the "
                                  "zone at --url (more than 0). A zone gives a schedule "
                                  "request --request-timeout (30 s by default) and answers "
                                  "503 past it, so the default hears that answer."),
    exact_time_limit: float = typer.Option(120.0, help="Seconds HiGHS may spend on the "
                                           "exact solution."),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Simulate a workload on a cluster: Strato against baselines, in virtual time."""
    from strato.sim.compare import Options
    from strato.sim.compare import compare as run_compare
    from strato.sim.live import LiveRefused
    from strato.sim.scenario import ScenarioError, load

    try:
        sc = load(scenario)
    except OSError as exc:
        console.print(f"[red]cannot read the scenario {scenario}[/]: "
                      f"{escape(str(exc.strerror or exc))} "
                      "(the shipped ones are in scenarios/ of the source tree)",
                      soft_wrap=True)
        raise typer.Exit(2) from None
    except ScenarioError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            console.print(f"[red]cannot write the report to {escape(str(out))}[/]: "
                          f"{escape(str(exc.strerror or exc))}", soft_wrap=True)
            raise typer.Exit(2) from None
    if providers != 1.0 or requests != 1.0:
        sc = sc.scaled(providers=providers, requests=requests)
    policies = [p.strip() for p in compare.split(",") if p.strip()]
    opts = Options(seed=seed, db_url=db, live_url=url, live_token=token,
                   live_register=register, live_timeout=timeout, time_scale=time_scale,
                   exact_time_limit=exact_time_limit)
    console.print(f"scenario {sc.name}: {sc.provider_count()} providers, "
                  f"{sc.workload.requests} requests, seed {seed}")
    with _bars(progress) as bars:
        def factory(name: str) -> Callable[[int, int], None] | None:
            if bars is None:
                return None
            task = bars.add_task(name, total=sc.workload.requests)
            return lambda done, total: bars.update(task, completed=done)

        solving = _SolveView(bars, exact_time_limit) if "exact" in policies else None
        if solving is not None:
            console.print(f"solving the exact bound with HiGHS (time limit "
                          f"{exact_time_limit:g} s) before the policies run")
        try:
            if seeds > 1:
                from strato.sim.compare import compare_seeds

                summary = compare_seeds(sc, policies, opts, seeds, out, progress=factory,
                                        solving=solving)
                _print_seeds(summary)
                bad = sum(m["hard_violations"] + m["invariant_violations"]
                          for m in summary["mean"].values())
                raise typer.Exit(1 if bad else 0)
            data = run_compare(sc, policies, opts, out, progress=factory, solving=solving)
        except ValueError as exc:
            console.print(f"[red]{escape(str(exc))}[/]")
            raise typer.Exit(2) from None
        except LiveRefused as exc:
            # strato-live: the zone at --url answered, and refused.
            r = exc.response
            more = ""
            if r.status_code == 409 and r.request.url.path == "/resource_providers":
                # (the scenario's hosts have fixed uuids: a second run finds them)
                more = escape("; the zone has the scenario's providers already (an earlier "
                              "run): --no-register uses them, or start a fresh zone")
            console.print(f"[red]strato-live: {r.request.method} {r.request.url.path} at {url} "
                          f"refused[/]: {hints.http_error(r)}{more}", soft_wrap=True)
            raise typer.Exit(1) from None
        except httpx.HTTPError as exc:
            console.print(f"[red]strato-live: {hints.unreachable(url, exc)}[/]",
                          soft_wrap=True)
            raise typer.Exit(3) from None
    _print(data)
    if out is not None:
        console.print(f"report: {out / 'report.md'}")
    if data["checks"]["hard_violations"]:
        raise typer.Exit(1)


def _share(value: float, offered: float) -> str:
    return f"{100 * value / offered:.1f}%" if math.isfinite(value) and offered else "-"


class _SolveView:
    """A running exact solve on stderr: a bar of its seconds against the time limit
    (or, without bars, a line every LINE_EVERY seconds), and a line when it ends."""

    def __init__(self, bars: Progress | None, limit: float) -> None:
        self.bars, self.limit = bars, limit
        self.task: Any = None
        self.last = 0.0

    def __call__(self, p: SolveProgress) -> None:
        found = (f"best {_share(p.incumbent, p.offered)} of the offered load, "
                 f"bound {_share(p.bound, p.offered)}")
        if self.bars is not None:
            if self.task is None:
                self.task = self.bars.add_task("exact solve", total=self.limit)
            if p.done:  # a full bar of the seconds it took, not of the limit
                self.bars.update(self.task, total=p.seconds, completed=p.seconds)
            else:
                self.bars.update(self.task, completed=min(p.seconds, self.limit))
        elif not p.done and p.seconds - self.last >= LINE_EVERY:
            self.last = p.seconds
            console.print(f"exact: {p.seconds:.0f} s, {found}")
        if p.done:
            console.print(f"exact bound solved in {p.seconds:.1f} s ({p.status}): {found}")
            self.task, self.last = None, 0.0


def _print_seeds(summary: dict[str, Any]) -> None:
    from rich.table import Table

    seeds = summary["seeds"]
    t = Table(title=f"{summary['scenario']}: mean over seeds {seeds[0]}..{seeds[-1]}")
    for col in ("policy", "accepted load", "rejected", "p50 ms", "violations"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for name, m in summary["mean"].items():
        t.add_row(name, f"{100 * m['accepted_load_share']:.1f}%",
                  f"{100 * m['rejection_rate']:.2f}%", f"{m['p50_ms']:.2f}",
                  f"{m['hard_violations'] + m['invariant_violations']:.0f}")
    _wide().print(t)


def _print(data: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=f"{data['scenario']} (seed {data['seed']})")
    for col in ("policy", "accepted load", "rejected", "p50 ms", "p99 ms", "placements/s",
                "soft kept", "violations"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for name, s in data["policies"].items():
        t.add_row(name, f"{100 * s['accepted_load_share']:.1f}%",
                  f"{100 * s['rejection_rate']:.1f}%", f"{s['latency_ms']['p50']:.2f}",
                  f"{s['latency_ms']['p99']:.2f}", f"{s['placements_per_s']:.0f}",
                  f"{100 * s['soft_rules']['satisfaction']:.0f}%",
                  str(s["hard_violations"] + s["invariant_violations"]))
    _wide().print(t)
    if data.get("exact"):
        ex = data["exact"]
        console.print(f"exact: {100 * ex['objective_share']:.1f}% of offered load "
                      f"(bound {100 * ex['bound_share']:.1f}%, {ex['status']})")
