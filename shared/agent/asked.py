"""Calls the agent asked the mesh about (`/decide`) and has not yet reported on, kept as small files, so that a
call released after the agent died (killed, interrupted, the machine stopped) does not read in the mesh's trail as
an approved call that ran.

Before `/decide`, the agent writes `<sessions>/asked/<trace_id>.json` (it names the trace itself, `X-Trace-Id`);
it renames it `<trace_id>.running` before the tool runs and removes it once the outcome is reported (or the mesh
said no): one small write, a rename and an unlink per call. Whatever is left when the agent starts, resumes, is
interrupted or exits is reported with `POST /decide/{trace_id}/outcome`: `not run: the agent stopped` (or
`not run: interrupted by the user`), or, for a call the agent died while running, `outcome unknown: the agent
stopped while it ran`. A call the mesh still holds for approval cannot take an outcome yet (409): its file stays
for the next time, for at most a week."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from flux7.shared.agent.mesh_tools import MeshTools

__all__ = ["NOT_RUN", "STOPPED_RUNNING", "AskedCalls"]

NOT_RUN = "not run: the agent stopped"
STOPPED_RUNNING = "outcome unknown: the agent stopped while it ran"
_KEEP_SECONDS = 7 * 24 * 3600


class AskedCalls:
    def __init__(self, folder: Path, mesh_url: str) -> None:
        self.folder = folder
        self.mesh_url = mesh_url.rstrip("/")
        self._made = False

    def _path(self, trace_id: str, state: str = "asked") -> Path:
        return self.folder / f"{trace_id}.{'running' if state == 'running' else 'json'}"

    def _write(self, path: Path, entry: dict[str, Any]) -> None:
        try:
            if not self._made:
                self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._made = True
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(entry))
        except OSError:
            pass  # best effort: the call is still governed, only a later correction of its trace is lost

    def asked(self, trace_id: str, *, tool: str, agent_id: str, session_id: str, state: str = "asked") -> None:
        """Before `/decide` (state `asked`); `running` once the mesh allowed it, before the tool runs."""
        if state == "running" and self._path(trace_id).exists():
            with contextlib.suppress(OSError):
                os.replace(self._path(trace_id), self._path(trace_id, "running"))
                return
        entry = {"trace_id": trace_id, "tool": tool, "agent_id": agent_id, "session_id": session_id}
        self._write(self._path(trace_id, state), {**entry, "mesh_url": self.mesh_url, "at": time.time()})

    def abandoned(self, trace_id: str, why: str) -> None:
        """The call will not run (the user interrupted it): the reason its outcome will give."""
        path = self._path(trace_id)
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        self._write(path, {**entry, "why": why})

    def done(self, trace_id: str) -> None:
        for state in ("running", "asked"):
            with contextlib.suppress(OSError):
                self._path(trace_id, state).unlink()

    def left(self, agent_id: str) -> list[dict[str, Any]]:
        """The entries of this mesh and this agent (and its sub-agents), oldest first."""
        found: list[dict[str, Any]] = []
        if not self.folder.is_dir():
            return found
        for path in [*self.folder.glob("*.json"), *self.folder.glob("*.running")]:
            try:
                entry = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            entry["state"] = "running" if path.suffix == ".running" else "asked"
            same_agent = entry.get("agent_id") == agent_id or str(entry.get("agent_id", "")).startswith(agent_id + "/")
            if entry.get("mesh_url") == self.mesh_url and same_agent:
                found.append(entry)
        return sorted(found, key=lambda e: e.get("at", 0))

    async def settle(self, mesh: MeshTools, only: set[str] | None = None) -> list[str]:
        """Report every call left (or those of `only`) as not run; the trace ids the mesh took."""
        taken: list[str] = []
        for entry in self.left(mesh.agent_id.split("/")[0]):
            trace_id = str(entry["trace_id"])
            if only is not None and trace_id not in only:
                continue
            running = entry.get("state") == "running"
            why = STOPPED_RUNNING if running else str(entry.get("why") or NOT_RUN)
            status, said = await mesh.report_status(trace_id, ok=False, error=why, agent_id=str(entry["agent_id"]))
            if status == 200:
                taken.append(trace_id)
            held = status == 409 and "not allowed to run" in said  # still pending (or denied): try again later
            if status == 200 or (status and not held) or time.time() - float(entry.get("at", 0)) > _KEEP_SECONDS:
                self.done(trace_id)
        return taken
