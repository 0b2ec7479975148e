"""Tool pinning (`pin_tools`, CONTRACT 1.3 floors): the fingerprint of each upstream MCP tool's definition is
accepted once; a tool never accepted is floored to deny (`pin:new`), one whose definition changed since to
human_approval (`pin:changed`), until an operator accepts it. This stops a server from slipping a new tool or
a rewritten description (tool poisoning) past the policy.

Pins are SQLite rows, so an accept on one worker holds on all of them at once. Only MCP tools are pinned: CLI
tools and OpenAPI operations come from the operator's own configuration.

The fingerprint covers a tool's title and outputSchema when it declares them (tools/list passes them on: docs/mcp.md).
Pins written before that hash the older subset; such a pin still holds for the definition it was accepted on,
and is rewritten to the full fingerprint the first time it is checked, so from then on a changed title or
output schema flags the tool like any other change."""

from __future__ import annotations

import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET, UnsetType

from flux7.shared.errors import BadRequest
from flux7.shared.gate.audit import EventLog, rfc3339
from flux7.shared.gate.policy import Decision
from flux7.shared.store.db import Database
from flux7.shared.upstreams.base import ToolDef

if TYPE_CHECKING:
    from flux7.shared.governance.versions import Versions

__all__ = ["PinStore", "PinView", "fingerprint", "observe_tool"]


def fingerprint(tool: ToolDef) -> str:
    return hashlib.sha256(tool.fingerprint_text().encode()).hexdigest()


def observe_tool(versions: Versions | None, tool: ToolDef, current: str = "") -> None:
    """Keep the definition as a version for the diff engine (shared/governance/versions.py), once per
    fingerprint per process: a version's sha256 is the pin fingerprint, so a pin mismatch finds its text."""
    if versions is None:
        return
    current = current or fingerprint(tool)
    if current in versions.observed:
        return
    try:
        versions.record("tool", tool.name, tool.fingerprint_text(), by="observed")
        versions.observed.add(current)
    except Exception:  # a version not kept never changes a pin's status
        logging.getLogger("flux7.pins").exception("tool version of %s not recorded", tool.name)


def legacy_fingerprint(tool: ToolDef) -> str:
    return hashlib.sha256(tool.legacy_fingerprint_text().encode()).hexdigest()


def pinnable(tool: ToolDef) -> bool:
    return tool.source == "mcp"


class PinView(msgspec.Struct, kw_only=True):
    """A GET /tools/pins entry (CONTRACT 1.6): the pinned description and time only for a tool that has a pin."""

    tool: str
    server: str
    status: str  # pinned | new | changed
    pinned_description: str | UnsetType = UNSET
    current_description: str
    pinned_at: str | UnsetType = UNSET
    fingerprint: str


class PinStore:
    def __init__(
        self, db: Database, *, enabled: bool, events: EventLog | None = None, versions: Versions | None = None
    ) -> None:
        self._db = db
        self.enabled = enabled
        self._events = events or EventLog()
        self._versions = versions  # where each definition seen is kept for the diff engine

    def _pinned(self, name: str) -> Any | None:
        return self._db.query_one("SELECT * FROM tool_pins WHERE tool = ?", (name,))

    def _status(self, tool: ToolDef, row: Any | None, current: str) -> str:
        if row is None:
            return "new"
        if row["fingerprint"] == current:
            return "pinned"
        if row["fingerprint"] == legacy_fingerprint(tool):
            # Accepted before title/outputSchema counted, and unchanged in what was hashed then: take the
            # full definition as the accepted one (compare-and-set, so concurrent workers agree).
            self._db.execute(
                "UPDATE tool_pins SET fingerprint = ? WHERE tool = ? AND fingerprint = ?",
                (current, tool.name, row["fingerprint"]),
            )
            return "pinned"
        return "changed"

    def status_of(self, tool: ToolDef) -> str | None:
        """pinned | new | changed; None when pinning is off or the tool is not an upstream MCP tool."""
        if not self.enabled or not pinnable(tool):
            return None
        current = fingerprint(tool)
        observe_tool(self._versions, tool, current)
        return self._status(tool, self._pinned(tool.name), current)

    def floor_for(self, tool: ToolDef) -> Decision | None:
        status = self.status_of(tool)
        if status == "new":
            return Decision("deny", "pin:new", f"tool {tool.name} is new and not yet accepted (pin_tools)")
        if status == "changed":
            return Decision(
                "human_approval", "pin:changed", f"tool {tool.name} changed since it was accepted (pin_tools)"
            )
        return None

    def view(self, tools: list[ToolDef]) -> list[PinView]:
        """GET /tools/pins: every upstream MCP tool with its status, the ones waiting for an accept first."""
        items: list[PinView] = []
        for tool in tools:
            if not pinnable(tool):
                continue
            row = self._pinned(tool.name)
            current = fingerprint(tool)
            observe_tool(self._versions, tool, current)
            items.append(
                PinView(
                    tool=tool.name,
                    server=tool.mcp_server,
                    status=self._status(tool, row, current),
                    pinned_description=row["description"] if row is not None else UNSET,
                    current_description=tool.description,
                    pinned_at=rfc3339(row["pinned_at"]) if row is not None else UNSET,
                    fingerprint=current,
                )
            )
        return sorted(items, key=lambda i: i.status == "pinned")  # stable: registry order within each kind

    def accept(self, tools: list[ToolDef], *, names: list[str], server: str, by: str) -> list[str]:
        """Pin the current definitions of the named tools, or of one server's tools, or (neither given) of
        every tool waiting for an accept. Returns the names whose pin changed. Unknown names are refused whole."""
        offered = {t.name: t for t in tools if pinnable(t)}
        if names:
            unknown = [n for n in names if n not in offered]
            if unknown:
                raise BadRequest(f"unknown tool(s): {', '.join(unknown)}")
            chosen = [offered[n] for n in names]
        elif server:
            chosen = [t for t in offered.values() if t.mcp_server == server]
            if not chosen:
                raise BadRequest(f"no tools from server {server!r}")
        else:
            chosen = list(offered.values())
        now = time.time()
        accepted: list[str] = []
        for tool in chosen:
            observe_tool(self._versions, tool)
        with self._db.write() as conn:
            for tool in chosen:
                current = fingerprint(tool)
                row = conn.execute("SELECT fingerprint FROM tool_pins WHERE tool = ?", (tool.name,)).fetchone()
                if row is not None and row[0] == current:
                    continue
                conn.execute(
                    "INSERT INTO tool_pins (tool, server, fingerprint, description, pinned_at, pinned_by) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tool) DO UPDATE SET server = excluded.server, "
                    "fingerprint = excluded.fingerprint, description = excluded.description, "
                    "pinned_at = excluded.pinned_at, pinned_by = excluded.pinned_by",
                    (tool.name, tool.mcp_server, current, tool.description, now, by),
                )
                accepted.append(tool.name)
        if accepted:
            self._events.record(
                tool="mesh.pin_accept",
                actor=by,
                params={"tools": accepted, "server": server},
                policy_rule="pin:accept",
            )
        return accepted
