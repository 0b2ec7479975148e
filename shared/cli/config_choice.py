"""What the commands do with the config they chose (shared/settings.py choose_config: `--config`, $FLUX7_CONFIG,
./config.yaml, else the built-in defaults with their state in the per-user data directory).

A config named by the user is used as named. One only found is said on stderr, and a command that would create
a database there refuses: a database no server has made is one no server reads. When a flux7 server answers on
the config's port for another config, a command that works on the database says so, names that config when it
can tell which it is (a server's /health carries a hash of its config file's path), and refuses when the config
was only found, not chosen."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import click
import httpx

from flux7.shared.cli.kit import Fail, runtime
from flux7.shared.errors import ConfigError
from flux7.shared.settings import LOCAL_CONFIG, ConfigChoice, Settings, choose_config, config_id, load_settings

__all__ = [
    "announce",
    "database_settings",
    "load_chosen",
    "local_url",
    "require_database",
    "server_elsewhere",
    "the_servers_config",
]


def _prog() -> str:
    ctx = click.get_current_context(silent=True)
    return ctx.command_path if ctx is not None else "flux7"


def database_settings(option: str | None) -> Settings:
    """The settings of a command that works on the service's database (`--config` or the rule): the config
    chosen, said when found, its database required to exist when found, and a server of another config named."""
    rt = runtime()
    choice = choose_config(option, rt.env)
    settings = load_chosen(choice, rt.env)
    announce(choice, rt.err, _prog())
    server_elsewhere(choice, settings, rt.env, rt.err, _prog())  # first: its message names the config to use
    require_database(choice, settings)
    return settings


def load_chosen(choice: ConfigChoice, env: Mapping[str, str], **overrides: Any) -> Settings:
    """The settings, or a one-line failure (exit 2) that says where the config came from."""
    try:
        return load_settings(choice.path, env, **overrides)
    except ConfigError as e:
        found = " (./config.yaml, found in the current folder)" if choice.source == "./config.yaml" else ""
        raise Fail(f"config error{found}: {e}", 2) from None


def announce(choice: ConfigChoice, err: TextIO, prog: str) -> None:
    """Say on stderr which config a command found, when the user did not name one."""
    if not choice.chosen:
        print(f"{prog}: config: {choice.why()}", file=err)


def require_database(choice: ConfigChoice, settings: Settings) -> None:
    """A command about to open the SQLite file: refuse to create it where the user did not point."""
    if choice.chosen or settings.database:
        return
    path = settings.resolve_path(settings.storage_path)
    if path.exists():
        return
    raise Fail(
        f"no database at {path} (config: {choice.why()}). A flux7 server creates it on its first start; for "
        "another server's, pass --config FILE or set FLUX7_CONFIG (the README's server: config.example.yaml)",
        2,
    )


def local_url(settings: Settings) -> str:
    """Where this machine reaches a server of these settings."""
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"{'https' if settings.tls.cert_file else 'http'}://{host}:{settings.port}"


def _answering_id(settings: Settings, timeout: float) -> str | None:
    """The config id of the flux7 server on this config's address; None when none answers there."""
    try:
        response = httpx.get(f"{local_url(settings)}/health", timeout=timeout, trust_env=False, verify=False)
        body = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return str(body.get("config", "")) if isinstance(body, dict) else None


def _checkout_example() -> Path | None:
    """The example config of the checkout whose `.venv` runs this command (what scripts/serve serves)."""
    prefix = Path(sys.prefix)
    example = prefix.parent / "config.example.yaml"
    return example if prefix.name == ".venv" and example.is_file() else None


def the_servers_config(server_id: str, env: Mapping[str, str], cwd: Path) -> Path | None:
    """The config file, among the likely ones, whose id a server reports: FLUX7_CONFIG's, ./config.yaml,
    ./config.example.yaml and the example config of the checkout this command runs from."""
    candidates = (
        Path(env["FLUX7_CONFIG"]) if env.get("FLUX7_CONFIG") else None,
        cwd / LOCAL_CONFIG,
        cwd / "config.example.yaml",
        _checkout_example(),
    )
    for candidate in candidates:
        if candidate is not None and candidate.is_file():
            resolved = candidate.resolve()
            if config_id(Settings(config_path=str(resolved))) == server_id:
                return resolved
    return None


def _database_of(settings: Settings) -> str:
    return settings.database or str(settings.resolve_path(settings.storage_path).resolve())


def server_elsewhere(
    choice: ConfigChoice,
    settings: Settings,
    env: Mapping[str, str],
    err: TextIO,
    prog: str,
    *,
    cwd: Path | None = None,
    timeout: float = 1.0,
) -> None:
    """Before a command works on the database: does a flux7 server answer on this config's port for another
    config, and so (most likely) another database? Say so; refuse when the config was only found."""
    theirs = _answering_id(settings, timeout)
    if theirs is None or theirs == config_id(settings):
        return
    where = local_url(settings)
    path = the_servers_config(theirs, env, cwd or Path.cwd())
    if path is None:
        print(
            f"{prog}: note: the flux7 server at {where} runs another config than {choice.why()}; "
            "if this command is meant for that server, pass its --config",
            file=err,
        )
        return
    try:
        if _database_of(load_settings(path, env)) == _database_of(settings):
            return  # another config, the same database: what this command writes, that server reads
    except ConfigError:
        pass
    message = (
        f"the flux7 server at {where} runs {path}, whose data is elsewhere than this command's (config: "
        f"{choice.why()}); for that server pass --config {path} or export FLUX7_CONFIG={path}"
    )
    if choice.chosen:
        print(f"{prog}: note: {message}", file=err)
        return
    raise Fail(message, 2)
