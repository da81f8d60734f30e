"""`strato agent`: run on a host, report it to its zone.

Kept apart from `strato.cli.main` so that `python -m strato.cli.agent` runs the
agent without importing the server (FastAPI, SQLAlchemy): the agent lives on
every host and should cost little.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import typer

from strato.agent.config import DEFAULT_INTERVAL, AgentConfig, ConfigError, load_file, parse_pairs


def agent(
    zone_url: str = typer.Option(None, "--zone-url", "--url", envvar="STRATO_ZONE_URL",
                                 help="The zone server to report to, e.g. http://zone:8780."),
    token: str = typer.Option(None, envvar="STRATO_AUTH_TOKEN",
                              help="X-Auth-Token (default: 'admin', development mode)."),
    config: str = typer.Option(None, help="TOML or YAML file with the same settings "
                               "(flags win)."),
    uuid: str = typer.Option(None, help="Provider UUID (default: uuid5 of /etc/machine-id)."),
    name: str = typer.Option(None, help="Provider name (default: the host name)."),
    location: str = typer.Option(None, help="dfw/room1/rack1/host1 or host1.rack1.room1.dfw."),
    tag: list[str] = typer.Option(None, help="Static tag, e.g. hipaa (repeatable)."),
    disk_path: list[str] = typer.Option(None, help="Path whose filesystem counts toward "
                                        "DISK_GB (repeatable; default /)."),
    reserve: list[str] = typer.Option(None, help="Static reservation CLASS=N, e.g. "
                                      "MEMORY_MB=2048 (repeatable; CLASS:N works too)."),
    allocation_ratio: list[str] = typer.Option(None, help="Enforce CLASS=RATIO, e.g. "
                                               "VCPU=4.0 (repeatable; CLASS:RATIO works "
                                               "too)."),
    measure: str = typer.Option(None, help="Classes whose usage outside Strato is reserved: "
                                "comma list, or 'none' (default VCPU,MEMORY_MB,DISK_GB)."),
    interval: float = typer.Option(None, help=f"Seconds between reports (default "
                                   f"{DEFAULT_INTERVAL:g})."),
    max_backoff: float = typer.Option(None, help="Longest wait between retries while the zone "
                                      "is unreachable (default 300)."),
    timeout: float = typer.Option(None, help="HTTP timeout in seconds (default 10)."),
    facts_file: str = typer.Option(None, help="JSON file overriding measured facts (tests)."),
    once: bool = typer.Option(False, "--once", help="Report once and exit (1 on failure)."),
    log_level: str = typer.Option("info", help="Log level."),
) -> None:
    """Report this host (inventory, usage Strato did not place, location, tags) to a zone."""
    from strato.agent.agent import Agent

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per HTTP request every interval is noise; the agent logs what matters.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    log = logging.getLogger("strato.agent")
    try:
        overrides: dict[str, Any] = {
            "zone_url": zone_url, "token": token, "uuid": uuid, "name": name,
            "location": location, "tags": tag or None, "disk_paths": disk_path or None,
            "reserved": parse_pairs(reserve, int, "--reserve") if reserve else None,
            "allocation_ratio": (parse_pairs(allocation_ratio, float, "--allocation-ratio")
                                 if allocation_ratio else None),
            "measure": _measure(measure), "interval": interval, "max_backoff": max_backoff,
            "timeout": timeout, "facts_file": facts_file,
        }
        settings = AgentConfig()
        if config:
            settings = settings.merged(load_file(config))
        settings = settings.merged(overrides).validated()
    except ConfigError as exc:
        typer.echo(f"strato agent: {exc}", err=True)
        raise typer.Exit(2) from None
    if settings.token is None:
        log.info("no --token: sending the development-mode token 'admin'")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    runner = Agent(settings)
    if once:
        log.info("agent for %s (%s) reporting once to %s", settings.name, settings.uuid,
                 settings.zone_url)
    else:
        log.info("agent for %s (%s) reporting to %s every %gs", settings.name,
                 settings.uuid, settings.zone_url, settings.interval)
    try:
        code = runner.run(stop, once=once)
    finally:
        runner.close()
    raise typer.Exit(code)


def _measure(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if value.strip().lower() == "none":
        return ()
    return tuple(v.strip().upper() for v in value.split(",") if v.strip())


if __name__ == "__main__":
    typer.run(agent)
