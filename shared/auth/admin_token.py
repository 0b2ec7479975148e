"""The control plane's admin token when none is configured: made once, kept in a 0600 file beside the database.

The server creates it on first start (`flux7 serve`, or the first worker) and reuses it on every restart; local
clients (`mesh`, sup7, `flux7 …`) read the same file so the control plane is never open without a credential.
`auth.open_loopback: true` keeps the older mode (no token, loopback callers trusted) for tests and demos."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from flux7.shared.errors import ConfigError
from flux7.shared.settings import Settings, choose_config, load_settings
from flux7.shared.store.private_files import private_dir

__all__ = [
    "FILE_NAME",
    "FoundToken",
    "cli_admin_token",
    "effective_admin_token",
    "find_admin_token",
    "load_or_create",
    "token_file",
]

FILE_NAME = "flux7-admin.token"


def token_file(settings: Settings) -> Path:
    """`auth.admin_token_file`, else `flux7-admin.token` in the data directory (the database's folder)."""
    if settings.auth.admin_token_file:
        return settings.resolve_path(settings.auth.admin_token_file)
    return settings.resolve_path(settings.storage_path).parent / FILE_NAME


def _read(path: Path) -> str:
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ConfigError(str(path), "auth.admin_token_file", "the admin token file is empty (delete it to renew)")
    return token


def load_or_create(path: Path) -> str:
    """The token in `path`, or a new one written there with mode 0600. Several workers may race on a first
    start: the file appears whole (written aside, then hard-linked into place) and one of them wins."""
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    private_dir(path.parent)
    token = secrets.token_urlsafe(32)
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another process got there first: theirs wins
            os.link(aside, path)
    finally:
        aside.unlink(missing_ok=True)
    return _read(path)


def effective_admin_token(settings: Settings) -> str:
    """The token the control plane requires: the configured one, none in open-loopback mode, else the file's."""
    if settings.auth.admin_token:
        return settings.auth.admin_token
    if settings.auth.open_loopback:
        return ""
    return load_or_create(token_file(settings))


def _is_loopback_url(url: str) -> bool:
    from flux7.shared.auth.loopback import is_loopback_bind

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return is_loopback_bind(host)


class FoundToken(NamedTuple):
    """The admin token a local client sends, and where it came from (what a refusal's message names)."""

    value: str
    source: str  # "--token", "MESH_ADMIN_TOKEN", "auth.admin_token of <config>", a file's path, or "" (none)
    looked: tuple[str, ...] = ()  # where it was looked for, when it was not found


def find_admin_token(url: str, env: Mapping[str, str], *, explicit: str = "", cwd: Path | None = None) -> FoundToken:
    """The admin token a local client sends to `url`: `explicit` (a flag or a config key), MESH_ADMIN_TOKEN, else
    the server's own when `url` is on loopback (never handed to a remote server): FLUX7_ADMIN_TOKEN_FILE, else the
    config every command finds (--config's fallbacks: FLUX7_CONFIG, ./config.yaml, the built-in defaults; its
    `auth.admin_token` or its token file), else ./flux7-admin.token (run in a server's data directory)."""
    if explicit:
        return FoundToken(explicit, "--token")
    if env.get("MESH_ADMIN_TOKEN"):
        return FoundToken(env["MESH_ADMIN_TOKEN"], "MESH_ADMIN_TOKEN")
    if not _is_loopback_url(url):
        return FoundToken("", "", ("MESH_ADMIN_TOKEN (the server is not on loopback)",))
    cwd = cwd or Path.cwd()
    candidates: list[Path] = []
    if env.get("FLUX7_ADMIN_TOKEN_FILE"):
        candidates.append(Path(env["FLUX7_ADMIN_TOKEN_FILE"]).expanduser())
    choice = choose_config(None, env, cwd)
    with contextlib.suppress(ConfigError):
        settings = load_settings(choice.path, env)
        if settings.auth.admin_token:  # the server's own config names its token: that is the one
            return FoundToken(settings.auth.admin_token, f"auth.admin_token of {choice.why()}")
        candidates.append(token_file(settings))
    candidates.append(cwd / FILE_NAME)
    for path in candidates:
        try:
            return FoundToken(_read(path), str(path))
        except (OSError, ConfigError):
            continue
    return FoundToken("", "", tuple(str(p) for p in candidates))


def cli_admin_token(url: str, env: Mapping[str, str], *, explicit: str = "", cwd: Path | None = None) -> str:
    """find_admin_token's value."""
    return find_admin_token(url, env, explicit=explicit, cwd=cwd).value
