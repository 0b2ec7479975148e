"""Runtime overrides of the approval settings (GET/PUT /approvals/settings, CONTRACT 1.6).

The config file gives the defaults; an override lives in SQLite, so it is in force on every worker at once and
survives a restart. Nothing here edits the config file."""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from flux7.shared.errors import BadRequest
from flux7.shared.settings import Settings
from flux7.shared.store.db import Database

__all__ = ["EDITABLE", "ApprovalPolicy", "ApprovalSettingsStore"]

_PREFIX = "approvals."


class ApprovalPolicy(msgspec.Struct, frozen=True, kw_only=True):
    timeout_seconds: float
    wait_seconds: float
    auto_approve: bool
    min_approvals: int
    auto_approve_writes: bool


EDITABLE = ApprovalPolicy.__struct_fields__


def _check(key: str, value: Any) -> Any:
    """The value as stored, or BadRequest naming the key."""
    if key in ("auto_approve", "auto_approve_writes"):
        if not isinstance(value, bool):
            raise BadRequest(f"{key} must be a boolean")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{key} must be a number")
    if key == "min_approvals":
        if value != int(value) or value < 1:
            raise BadRequest("min_approvals must be an integer >= 1")
        return int(value)
    if key == "timeout_seconds" and not 0 < value <= 86400 * 7:
        raise BadRequest("timeout_seconds must be > 0 and at most 7 days")
    if key == "wait_seconds" and not 0 <= value <= 3600:
        raise BadRequest("wait_seconds must be between 0 and 3600")
    return float(value)


class ApprovalSettingsStore:
    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings

    def configured(self) -> ApprovalPolicy:
        s = self._settings
        return ApprovalPolicy(
            timeout_seconds=float(s.approval.timeout_seconds),
            wait_seconds=float(s.approval.wait_seconds),
            auto_approve=s.auto_approve_enabled,
            min_approvals=s.supervisor.min_approvals,
            auto_approve_writes=s.supervisor.auto_approve_writes,
        )

    def overrides(self) -> dict[str, Any]:
        rows = self._db.query("SELECT key, value FROM settings_overrides WHERE key LIKE 'approvals.%'")
        out: dict[str, Any] = {}
        for key, value in rows:
            name = str(key)[len(_PREFIX) :]
            if name in EDITABLE:
                out[name] = json.loads(value)
        return out

    def effective(self) -> ApprovalPolicy:
        # One small read per use rather than a cache: a PUT on any worker is in force on the next call.
        overrides = self.overrides()
        if not overrides:
            return self.configured()
        return msgspec.structs.replace(self.configured(), **overrides)

    def update(self, changes: dict[str, Any], *, by: str) -> list[str]:
        """Validate every key first (all or nothing), then store the ones that differ. Returns their names."""
        unknown = sorted(set(changes) - set(EDITABLE))
        if unknown:
            raise BadRequest(f"unknown setting(s): {', '.join(unknown)}; editable: {', '.join(EDITABLE)}")
        checked = {k: _check(k, v) for k, v in changes.items() if v is not None}
        current = msgspec.structs.asdict(self.effective())
        changed = [k for k in EDITABLE if k in checked and checked[k] != current[k]]
        if changed:
            now = time.time()
            with self._db.write() as conn:
                for key in changed:
                    conn.execute(
                        "INSERT INTO settings_overrides (key, value, updated_at, updated_by) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value, "
                        "updated_at = excluded.updated_at, updated_by = excluded.updated_by",
                        (_PREFIX + key, json.dumps(checked[key]), now, by),
                    )
        return changed
