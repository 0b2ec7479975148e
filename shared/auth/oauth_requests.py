"""Authorization requests (RFC 6749 section 4.1.1) waiting for a named human on the console's consent page: what
`/oauth/authorize` validated, the agent id proposed for the client, and the one decision a human makes on it."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, Literal

import msgspec

from flux7.shared.errors import Conflict, NotFound
from flux7.shared.store.db import Database

__all__ = ["ConsentRequest", "RequestStore"]

REQUEST_PREFIX = "orq_"
_FORGET_SECONDS = 86400.0  # decided or expired requests are kept this long, then dropped


RequestState = Literal["pending", "approved", "denied", "expired"]


class ConsentRequest(msgspec.Struct, frozen=True, kw_only=True):
    """An authorization request (RFC 6749 section 4.1.1) waiting for a human on the console's consent page."""

    id: str
    client_id: str
    issuer: str
    params: dict[str, str]  # the request's parameters, as validated at /oauth/authorize
    agent_id: str  # proposed from the client's name
    created_at: float
    expires_at: float
    decision: str = ""
    decided_by: str = ""
    decided_at: float | None = None

    def state(self, now: float | None = None) -> RequestState:
        if self.decision in ("approved", "denied"):
            return "approved" if self.decision == "approved" else "denied"
        return "expired" if self.expires_at <= (time.time() if now is None else now) else "pending"


def _request(row: Any) -> ConsentRequest:
    return ConsentRequest(
        id=row["id"],
        client_id=row["client_id"],
        issuer=row["issuer"],
        params=json.loads(row["params"]),
        agent_id=row["agent_id"],
        created_at=float(row["created_at"]),
        expires_at=float(row["expires_at"]),
        decision=row["decision"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
    )


class RequestStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- ---------------------------------------------------------

    def open_request(
        self, client_id: str, issuer: str, params: dict[str, str], agent_id: str, seconds: float
    ) -> ConsentRequest:
        now = time.time()
        request = ConsentRequest(
            id=REQUEST_PREFIX + secrets.token_hex(16),
            client_id=client_id,
            issuer=issuer,
            params=params,
            agent_id=agent_id,
            created_at=now,
            expires_at=now + seconds,
        )
        with self._db.write() as conn:
            conn.execute("DELETE FROM oauth_requests WHERE expires_at < ?", (now - _FORGET_SECONDS,))
            conn.execute(
                "INSERT INTO oauth_requests (id, client_id, issuer, params, agent_id, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (request.id, client_id, issuer, json.dumps(params), agent_id, now, request.expires_at),
            )
        return request

    def get_request(self, request_id: str) -> ConsentRequest:
        if not request_id.startswith(REQUEST_PREFIX) or len(request_id) > 64:
            raise NotFound(f"no authorization request {request_id}")
        row = self._db.query_one("SELECT * FROM oauth_requests WHERE id = ?", (request_id,))
        if row is None:
            raise NotFound(f"no authorization request {request_id}")
        return _request(row)

    def decide_request(self, request_id: str, decision: Literal["approved", "denied"], by: str) -> ConsentRequest:
        """Settle a pending request, once: 409 when it was decided, 404 when unknown, 410-like 409 when expired."""
        request = self.get_request(request_id)
        now = time.time()
        state = request.state(now)
        if state != "pending":
            raise Conflict(
                f"the authorization request is {state}" + (f" by {request.decided_by}" * bool(request.decided_by))
            )
        with self._db.write() as conn:
            done = conn.execute(
                "UPDATE oauth_requests SET decision = ?, decided_by = ?, decided_at = ? "
                "WHERE id = ? AND decision = '' AND expires_at > ?",
                (decision, by, now, request_id, now),
            ).rowcount
        if done != 1:
            raise Conflict("the authorization request was decided meanwhile")
        return msgspec.structs.replace(request, decision=decision, decided_by=by, decided_at=now)
