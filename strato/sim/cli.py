"""`strato sim SCENARIO`: run a scenario against Strato and baselines, write a report."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from strato.cli import consoles

console = consoles.console(stderr=True)


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


def sim(
    scenario: Path = typer.Argument(..., help="Scenario TOML file (see scenarios/)."),
    out: Path = typer.Option(None, help="Write report.json, report.md and plots here."),
    compare: str = typer.Option("strato", help="Policies, comma separated: strato, "
                                "strato-tree, strato-tree-best, strato-memory, "
                                "strato-tree-memory, strato-live, random, first-fit, nova, "
                                "exact."),
    seed: int = typer.Option(1, help="Same scenario + seed = same run."),
    seeds: int = typer.Option(1, help="Run seeds SEED .. SEED+N-1 and average the "
                              "headline figures (reports per seed in OUT/seed-K)."),
    providers: float = typer.Option(1.0, help="Scale the host counts (and the arrival "
                                    "rate with them, keeping the load)."),
    requests: float = typer.Option(1.0, help="Scale the number of requests."),
    db: str = typer.Option(None, help="An empty PostgreSQL database for the in-process "
                           "zone (default: SQLite in a temporary directory)."),
    url: str = typer.Option(None, help="A running Strato server, for strato-live."),
    token: str = typer.Option("admin", envvar="STRATO_AUTH_TOKEN",
                              help="X-Auth-Token for --url."),
    register: bool = typer.Option(True, "--register/--no-register",
                                  help="strato-live: register the scenario's providers "
                                  "(--no-register: the server already has them)."),
    time_scale: float = typer.Option(60.0, help="strato-live: virtual seconds per wall "
                                     "second."),
    exact_time_limit: float = typer.Option(120.0, help="Seconds HiGHS may spend on the "
                                           "exact solution."),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Simulate a workload on a cluster: Strato against baselines, in virtual time."""
    from strato.sim.compare import Options
    from strato.sim.compare import compare as run_compare
    from strato.sim.scenario import ScenarioError, load

    try:
        sc = load(scenario)
    except (OSError, ScenarioError) as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    if providers != 1.0 or requests != 1.0:
        sc = sc.scaled(providers=providers, requests=requests)
    policies = [p.strip() for p in compare.split(",") if p.strip()]
    opts = Options(seed=seed, db_url=db, live_url=url, live_token=token,
                   live_register=register, time_scale=time_scale,
                   exact_time_limit=exact_time_limit)
    console.print(f"scenario {sc.name}: {sc.provider_count()} providers, "
                  f"{sc.workload.requests} requests, seed {seed}")
    with _bars(progress) as bars:
        def factory(name: str) -> Callable[[int, int], None] | None:
            if bars is None:
                return None
            task = bars.add_task(name, total=sc.workload.requests)
            return lambda done, total: bars.update(task, completed=done)

        try:
            if seeds > 1:
                from strato.sim.compare import compare_seeds

                summary = compare_seeds(sc, policies, opts, seeds, out, progress=factory)
                _print_seeds(summary)
                bad = sum(m["hard_violations"] + m["invariant_violations"]
                          for m in summary["mean"].values())
                raise typer.Exit(1 if bad else 0)
            data = run_compare(sc, policies, opts, out, progress=factory)
        except ValueError as exc:
            console.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
    _print(data)
    if out is not None:
        console.print(f"report: {out / 'report.md'}")
    if data["checks"]["hard_violations"]:
        raise typer.Exit(1)


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
