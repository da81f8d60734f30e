"""`strato serve --config FILE`: a zone's settings in a TOML file.

The file holds the same settings as `strato serve`'s options, named as the
options are, with `-` or `_`::

    # /etc/strato/dfw.toml
    db = "postgresql+psycopg://strato@db1/dfw"
    zone = "dfw"
    parent = "https://root.example:8780"
    location-prefix = "dfw"
    tag = ["hipaa"]
    child-timeout = 3.0

Keys may also sit in a `[serve]` table. What decides a setting, first to
last: the command line, the environment (`STRATO_...`), the file, the
default (Click's `default_map`). An unknown key or a value of the wrong type
is an error naming it, before anything starts. `strato config show` prints
every setting with the value in effect and where it came from, secrets
masked.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from strato.cli import consoles

ENV = "STRATO_CONFIG"
# Never printed: shown as "****".
SECRETS = frozenset({"auth_token", "parent_token", "metrics_token", "keystone_password",
                     "registration_token", "link_token"})


class ConfigError(ValueError):
    pass


def config_path(args: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    """The file named by `--config FILE` (or `--config=FILE`) in `args`, else
    by STRATO_CONFIG."""
    for i, a in enumerate(args):
        given = (args[i + 1] if a == "--config" and i + 1 < len(args)
                 else a.split("=", 1)[1] if a.startswith("--config=") else None)
        if given is not None:
            if not given.strip():
                # (--config "$FILE" with the variable unset: Path("") is ".")
                raise ConfigError("--config is empty: give a TOML file, or leave the "
                                  "option out")
            return Path(given)
    value = environ.get(ENV)
    return Path(value) if value else None


# Typer carries its own copy of Click: its commands, contexts and parameters
# are handled here by what they do, not by Click's classes.
Command = Any


def load(path: Path, command: Command) -> dict[str, Any]:
    """The file's settings for `command`, by parameter name; ConfigError
    names what is wrong."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not valid TOML: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    table = data.pop("serve", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [serve] must be a table")
    params = options(command)
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in [*((k, v) for k, v in data.items()),
                       *((f"[serve] {k}", v) for k, v in table.items())]:
        name = key.removeprefix("[serve] ").replace("-", "_")
        param = params.get(name)
        if param is None or name == "config":
            close = difflib.get_close_matches(name, [n for n in params if n != "config"], 1)
            hint = f"did you mean {close[0].replace('_', '-')!r}? " if close else ""
            raise ConfigError(f"{path}: unknown setting {key!r} ({hint}the settings are "
                              "strato serve's options: strato serve --help)")
        if name in given:
            # (one at the top and one in [serve], or as child-timeout and child_timeout)
            raise ConfigError(f"{path}: {key!r} is set twice (also as {given[name]!r}): "
                              "keep one")
        given[name] = key
        if param.multiple and not isinstance(value, list):
            value = [value]
        out[name] = _checked(f"{path}: {key}", value, param)
    return out


def _checked(where: str, value: Any, param: Any) -> Any:
    """`value` as the option takes it, or ConfigError."""
    kind = param.type_descriptor.annotation
    if param.multiple:
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: must be a string or a list of strings, got {value!r}")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {value!r}")
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: must be an integer, got {value!r}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: must be a number, got {value!r}")
        value = float(value)
    elif not isinstance(value, str):
        raise ConfigError(f"{where}: must be a string, got {value!r}")
    try:
        # The option's own limits (--stale-after at least 1, ...): said here,
        # naming the file, not as if the value had come from its variable.
        return param.get_runtime_param().coerce(value, param=param, ctx=None)
    except typer.BadParameter as exc:
        raise ConfigError(f"{where}: {exc.message}, got {value!r}") from None


def options(command: Command) -> dict[str, Any]:
    return {p.name: p for p in command.params
            if getattr(p, "param_type_name", "") == "option" and p.name}


def default_map(args: Sequence[str], environ: Mapping[str, str],
                group: Command) -> dict[str, Any] | None:
    """Click's default_map for `strato serve` and `strato config show` from the
    configuration file, if one is named."""
    if not args or args[0] not in ("serve", "config"):
        return None
    path = config_path(args, environ)
    if path is None:
        return None
    serve = group.commands["serve"]
    return {"serve": load(path, serve)}


def effective(command: Command, from_file: Mapping[str, Any],
              environ: Mapping[str, str]) -> list[tuple[str, Any, str, str]]:
    """(option, value, source, environment variable) for every setting of
    `command`, as `strato serve` would resolve them without flags: the value
    as the option takes it (a number, true or false, a list; None for unset),
    secrets masked. ConfigError names a variable of the wrong type or out of
    its option's range (what a value means is checked by `strato serve`)."""
    rows = []
    for name, p in sorted(options(command).items()):
        if name in ("config", "help"):
            continue
        envvar = p.envvar if isinstance(p.envvar, str) else None
        if envvar and environ.get(envvar) not in (None, ""):
            value: Any = _from_env(envvar, environ[envvar], p)
            source = "environment"
        elif name in from_file:
            value, source = from_file[name], "file"
        else:
            value, source = p.default, "default"
        if isinstance(value, tuple):
            value = list(value)
        shown = "****" if name in SECRETS and value not in (None, "") else value
        rows.append((p.opts[0], shown, source, envvar or ""))
    return rows


def _from_env(envvar: str, raw: str, param: Any) -> Any:
    """A variable's text as the option takes it (as `strato serve` reads it),
    or ConfigError naming the variable."""
    coerce = param.get_runtime_param().coerce
    try:
        if param.multiple:
            return [coerce(v, param=param, ctx=None) for v in param.split_envvar_value(raw)]
        return coerce(raw, param=param, ctx=None)
    except typer.BadParameter as exc:
        raise ConfigError(f"{envvar}={raw!r}: {exc.message}") from None


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "-"
    return str(value)


config_app = typer.Typer(help="A zone's configuration file.", no_args_is_help=True,
                         rich_markup_mode=None)


@config_app.command("show", short_help="Each serve setting: its value and where it came from.")
def show(ctx: typer.Context,
         config: str = typer.Option(None, "--config", envvar=ENV,
                                    help="The TOML file (as strato serve --config)."),
         as_json: bool = typer.Option(False, "--json", help="JSON instead of a table.")
         ) -> None:
    """Every `strato serve` setting: the value in effect, and whether it comes
    from the environment, the file or the default (secrets masked)."""
    import json

    serve = ctx.find_root().command.commands["serve"]  # type: ignore[attr-defined]
    from_file: dict[str, Any] = {}
    if config:
        try:
            from_file = load(Path(config), serve)
        except ConfigError as exc:
            consoles.console(stderr=True).print(f"[red]invalid configuration[/]: "
                                                f"{escape(str(exc))}",
                                                soft_wrap=True)
            raise typer.Exit(2) from None
    try:
        rows = effective(serve, from_file, os.environ)
    except ConfigError as exc:
        consoles.console(stderr=True).print(f"[red]invalid environment[/]: "
                                            f"{escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    if as_json:
        # Values as JSON has them: numbers, true/false, lists, null for unset.
        print(json.dumps([{"option": o, "value": v, "source": s, "env": e}
                          for o, v, s, e in rows], indent=2))
        return
    t = Table(title=f"strato serve settings ({config or 'no file'})")
    for col in ("option", "value", "from", "environment"):
        t.add_column(col)
    for option, value, source, envvar in rows:
        t.add_row(option, _show(value), source, envvar)
    consoles.console().print(t)
