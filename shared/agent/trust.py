"""Workspace trust: a project's own settings are data until its user trusts the folder (docs/security.md).

A cloned repository's `.flux7/agent.toml` must not run code, send data elsewhere, read files outside the folder
or loosen the safety mode by being opened. Until the user trusts the folder, the agent applies only the project
settings that can do none of that (the model, its temperature and turns, context and shell limits, a stricter
approval mode, a system prompt file inside the folder) and ignores the rest, naming each on screen. Trust is
given once per folder, at the REPL's prompt or with `--trust`, and remembered in the user's own config as
Codex does:

    [projects."/home/me/src/app"]
    trust_level = "trusted"

The folder is the one holding the project's `.flux7/`, else the repository root, else the working directory,
keyed by its resolved path (exact match: trusting a folder does not trust the folders inside or above it)."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from flux7.shared.agent.safety import MODES

__all__ = ["SAFE_KEYS", "remember", "trusted_folders", "untrusted_reason"]

# Project keys applied in an untrusted folder: they change how the model answers, not what runs or where data goes.
SAFE_KEYS = frozenset(
    {
        *("model", "temperature", "max_turns", "context.window", "context.compact_at", "shell.timeout"),
        *("shell.output_limit", "llm_timeout", "prices"),
    }
)

_WHY = {
    "provider": "sends your prompts and code to another provider",
    "llm_url": "sends your prompts, code and API key to another server",
    "api_key_env": "sends an environment variable to the model's server",
    "mesh.url": "sends every call to another mesh",
    "mesh.agent_id": "changes who the mesh sees, and so its policy",
    "mesh.offline": "turns the mesh off",
    "sessions.dir": "writes the conversation outside the folder",
    "hooks": "runs commands",
    "mcp_servers": "runs commands or connects to servers",
    "web_fetch.allow": "opens web_fetch to more addresses",
    "permissions.allow": "answers the agent's questions with yes",
    "permissions.deny": "permission rules apply only from a trusted folder",
}


def untrusted_reason(key: str, value: Any, current: dict[str, Any], cwd: Path, root: Path) -> str:
    """Why an untrusted project may not set `key` to `value` ("" when it may). `current` holds the values of
    the layers below the project (defaults, the user's config)."""
    if key in SAFE_KEYS:
        return ""
    if key == "approval_mode":
        if value in MODES and MODES.index(value) > MODES.index(current["approval_mode"]):
            return "loosens the safety mode"
        return ""
    if key == "system_prompt_file":
        path = (cwd / os.path.expanduser(str(value))).resolve()
        return "" if path.is_relative_to(root.resolve()) else "reads a file outside the folder"
    if key.startswith("sandbox."):
        return "changes the sandbox"
    return _WHY.get(key, "not applied from an untrusted folder")


def trusted_folders(table: Any, where: str) -> set[str]:
    """The folders `[projects."<path>"] trust_level = "trusted"` names. ValueError says what is wrong."""
    if not isinstance(table, dict):
        raise ValueError(f'{where}: projects must be tables like [projects."/path"]')
    folders: set[str] = set()
    for folder, entry in table.items():
        if not isinstance(entry, dict) or set(entry) - {"trust_level"}:
            raise ValueError(f"{where}: projects.{json.dumps(folder)} takes only trust_level")
        if entry.get("trust_level") != "trusted":
            got = entry.get("trust_level")
            raise ValueError(f'{where}: projects.{json.dumps(folder)}: trust_level must be "trusted" (got {got!r})')
        folders.add(folder)
    return folders


def remember(user_file: Path, folder: Path) -> None:
    """Append the folder's trust to the user's config (created if needed); the rest of the file is kept as is."""
    user_file.parent.mkdir(parents=True, exist_ok=True)
    before = user_file.read_text(encoding="utf-8") if user_file.exists() else ""
    # json.dumps makes a valid TOML basic string (its escapes are TOML's).
    entry = f'[projects.{json.dumps(str(folder))}]\ntrust_level = "trusted"\n'
    separator = "" if not before or before.endswith("\n\n") else ("\n" if before.endswith("\n") else "\n\n")
    try:  # the file must stay valid TOML (an inline `projects = {...}` table cannot be extended)
        tomllib.loads(before + separator + entry)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{user_file}: cannot add the folder's trust ({e}); add this table by hand:\n{entry}") from e
    with user_file.open("a", encoding="utf-8") as f:
        f.write(separator + entry)
