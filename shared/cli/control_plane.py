"""The mesh's control plane as the CLIs reach it (`mesh` / `flux7 approvals`, `flux7 governance`): the URL, the
admin token a local client finds (shared/auth/admin_token.py), and refusals that name the fix that works. The HTTP
is the mesh client's (shared/mesh_client.py)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from flux7.shared.auth.admin_token import FoundToken, find_admin_token
from flux7.shared.mesh_client import MeshClient, MeshError

__all__ = ["DEFAULT_URL", "Client", "MeshError", "connect", "refusal"]

DEFAULT_URL = "http://localhost:9090"


class Client(MeshClient):
    """The mesh client a command uses, and where its token came from (what refusal() names the fix by)."""

    def __init__(self, url: str, token: str = "", timeout: float = 30.0, found: FoundToken | None = None) -> None:
        super().__init__(url, token=token, timeout=timeout)
        self.found = found or FoundToken(token, "--token" if token else "")


def connect(url: str | None, env: Mapping[str, str], *, timeout: float = 30.0, cwd: Path | None = None) -> Client:
    """A client for `url` (else MESH_URL, else the local default) with the person's own token (FLUX7_TOKEN: their
    decisions are recorded as `user:<name>`), else the admin token a local client finds."""
    url = url or env.get("MESH_URL") or DEFAULT_URL
    if env.get("FLUX7_TOKEN"):
        return Client(url, env["FLUX7_TOKEN"], timeout=timeout)
    found = find_admin_token(url, env, cwd=cwd)
    return Client(url, found.value, timeout=timeout, found=found)


def _on_loopback(url: str) -> bool:
    from flux7.shared.auth.loopback import is_loopback_bind

    try:
        return is_loopback_bind(urllib.parse.urlsplit(url).hostname or "")
    except ValueError:
        return False


def _servers_config(client: Client, env: Mapping[str, str], cwd: Path) -> Path | None:
    from flux7.shared.cli.config_choice import the_servers_config

    try:
        with MeshClient(client.url, timeout=2.0) as anonymous:
            server_id = anonymous.health().get("config")
    except MeshError:
        return None
    return the_servers_config(server_id, env, cwd) if isinstance(server_id, str) else None


def _unauthorized_fix(client: Client, env: Mapping[str, str], cwd: Path) -> str:
    found = client.found
    if found.source in ("--token", "MESH_ADMIN_TOKEN"):
        return (
            f"the server refused {found.source}: give that server's admin token, or unset it so the token file of "
            "a server on this machine is read"
        )
    if not _on_loopback(client.url):
        return "set MESH_ADMIN_TOKEN to the server's admin token (a token file is read only for a local server)"
    theirs = _servers_config(client, env, cwd)
    if theirs is not None:
        return f"the server at {client.url} runs {theirs}: export FLUX7_CONFIG={theirs}"
    if found.source:
        return (
            f"the admin token in {found.source} is not that server's: set FLUX7_CONFIG to the config the server "
            "runs (scripts/serve runs config.example.yaml), or MESH_ADMIN_TOKEN to its token"
        )
    return (
        f"no admin token found (looked in {', '.join(found.looked)}): set FLUX7_CONFIG to the config the server "
        "runs (scripts/serve runs config.example.yaml), or MESH_ADMIN_TOKEN to its token"
    )


def refusal(e: MeshError, client: Client, env: Mapping[str, str], cwd: Path | None = None) -> str:
    """The one line a command prints for a refused or failed call, with the fix for a missing credential."""
    line = f"{e}" + (f" (HTTP {e.status})" if e.status else "")
    if e.status == 401:
        line += "; " + _unauthorized_fix(client, env, cwd or Path.cwd())
    elif e.status == 0 and client.url == DEFAULT_URL and not env.get("MESH_URL"):
        line += "; start it (scripts/serve, or flux7 serve), or set MESH_URL / --url to where it runs"
    return line
