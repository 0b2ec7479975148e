"""Notifications of one process: what a queued or settled approval sets off, and the workers that deliver it.

- Queued (a submit hook, inside the approval's own transaction): the operator's webhook row, and the first route's
  Slack post and emails; an escalation row when that route has `escalate_after` and the call has a next route.
- Settled (a transaction hook, inside the resolution's transaction, timeouts and stops included): a Slack update
  for every approval that was posted, and its escalations dropped.
- Delivered by one thread per lane (webhook, slack, email) that claims the lane's head in the database, and one
  thread that claims due escalations there. All of it is re-derived from the database at start, so a restart
  loses nothing and two workers never do the same escalation twice."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec

from flux7.shared.auth.users import UserStore
from flux7.shared.decisions.facts import resolver_kind
from flux7.shared.durations import format_span
from flux7.shared.notify.keys import (
    LINK_KEY_FILE,
    WEBHOOK_SECRET_FILE,
    load_or_create_secret,
    new_link_key,
    new_webhook_secret,
)
from flux7.shared.notify.links import EmailLinks
from flux7.shared.notify.outbox import Lane, NotificationOutbox, OutboxItem
from flux7.shared.notify.routing import chain_for, recipients
from flux7.shared.notify.settings import Route
from flux7.shared.notify.webhooks import WebhookSigner, deliver_webhook
from flux7.shared.settings import Settings
from flux7.shared.store.db import Database

__all__ = ["Notifications", "notifications_for", "precedents_summary"]

log = logging.getLogger("flux7.notify")

POLL_SECONDS = 1.0  # how often an idle worker looks for rows another worker or process queued


def precedents_summary(history: list[Any]) -> str:
    """One line on the past decisions of a call's agent and tool, as this deployment's approvals table has them."""
    if not history:
        return "none: the first time this agent asks for this tool here"
    people = sum(
        1 for a in history if a.status == "approved" and resolver_kind(a.resolved_by, a.resolved_note) == "human"
    )
    approved = sum(1 for a in history if a.status == "approved")
    denied = sum(1 for a in history if a.status == "denied")
    timeouts = sum(1 for a in history if a.status == "timeout")
    last = history[0]
    return (
        f"{approved} approved ({people} by people), {denied} denied, {timeouts} timed out in the last {len(history)} "
        f"decisions of this agent and tool; last: {last.status} by {last.resolved_by}"
    )


class _Worker:
    """A daemon thread that runs `step` (True: it did something, go again at once) until stopped; `kick` wakes it."""

    def __init__(self, name: str, step: Callable[[], bool], next_due: Callable[[], float | None]) -> None:
        self.name = name
        self._step = step
        self._next_due = next_due
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def kick(self) -> None:
        with self._lock:
            if self._stopped.is_set():
                return
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=f"flux7-notify-{self.name}", daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                busy = self._step()
                failures = 0
            except Exception as e:
                if "closed" in str(e).lower():  # the store was closed under us (a test's teardown): nothing to do
                    return
                failures += 1
                log.exception("notification worker %s failed", self.name)
                busy = False
            if busy:
                continue
            wait = POLL_SECONDS * min(30, 2**failures) if failures else POLL_SECONDS
            with contextlib.suppress(Exception):
                due = self._next_due()
                if due is not None:
                    wait = min(wait, max(0.0, due - time.time()))
            self._wake.wait(wait)

    def stop(self, timeout: float) -> None:
        self._stopped.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)


class Notifications:
    def __init__(self, settings: Settings, db: Database, approvals: Any, users: UserStore) -> None:
        self._settings = settings
        self.config = settings.notify
        self._db = self.db = db
        self.approvals = approvals
        self.users = users
        self.outbox = NotificationOutbox(
            db, retry_max=self.config.retry_max_seconds, max_attempts=self.config.max_attempts
        )
        data_dir = Path(db.path).resolve().parent
        in_memory = db.path == ":memory:"  # no data directory: secrets of this process's own
        self.webhook_url = settings.approval.notify_url
        self.signer: WebhookSigner | None = None
        if self.webhook_url:
            secret = settings.approval.notify_secret or (
                new_webhook_secret()
                if in_memory
                else load_or_create_secret(data_dir / WEBHOOK_SECRET_FILE, webhook=True)
            )
            self.signer = WebhookSigner(secret)
        self.links: EmailLinks | None = None
        if self.config.email is not None:
            key = self.config.link_secret or (
                new_link_key() if in_memory else load_or_create_secret(data_dir / LINK_KEY_FILE)
            )
            self.links = EmailLinks(key.encode(), db)
        self.slack: Any = None  # SlackClient, built on first use (the SDK is imported only when Slack is on)
        self.interactions: Any = None
        if self.config.slack is not None:
            from flux7.shared.notify.slack import SlackClient, SlackInteractions

            self.slack = SlackClient(self.config.slack)
            self.interactions = SlackInteractions(self.config.slack, self.slack, users, approvals, self._on_vote)
        self._http: httpx.Client | None = None
        lanes: list[Lane] = []
        if self.webhook_url:
            lanes.append("webhook")
        if self.config.slack is not None:
            lanes.append("slack")
        if self.config.email is not None:
            lanes.append("email")
        self.lanes: tuple[Lane, ...] = tuple(lanes)
        self._workers: dict[str, _Worker] = {
            lane: _Worker(lane, self._stepper(lane), self._due(lane)) for lane in lanes
        }
        if any(r.escalate_after for r in self.config.routes):
            self._workers["escalations"] = _Worker("escalations", self._escalate_step, self._next_escalation)
        approvals.add_submit_hook(self._on_submit)
        approvals.add_submit_listener(lambda _a: self.kick())
        approvals.add_transaction_hook(self._on_settled)
        approvals.add_listener(lambda _a: self.kick("slack"))

    def delivery_counts(self) -> dict[tuple[str, str], int]:
        """Rows held per (lane, status), every configured lane's both statuses present (0 when empty)."""
        counts: dict[tuple[str, str], int] = {
            (lane, status): 0 for lane in self.lanes for status in ("queued", "failed")
        }
        counts.update(self.outbox.counts())
        return counts

    # -- the worker threads ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Deliver what the database still owes (a previous run, a receiver that was down), and time escalations."""
        self.kick()

    def kick(self, only: str = "") -> None:
        for name, worker in self._workers.items():
            if not only or name == only:
                worker.kick()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the workers, waiting at most `timeout` in all; what they did not send stays in the outbox."""
        deadline = time.monotonic() + timeout
        for worker in self._workers.values():
            worker.stop(max(0.0, deadline - time.monotonic()))
        if self._http is not None:
            self._http.close()

    def _stepper(self, lane: Lane) -> Callable[[], bool]:
        def step() -> bool:
            due = self.outbox.next_due(lane)  # a read first: an idle lane never takes the write lock
            item = self.outbox.claim(lane) if due is not None and due <= time.time() else None
            if item is None:
                # An approval nobody waits on times out only when someone looks (ApprovalQueue.sweep): Slack's
                # lane looks, so a message left with its buttons says "timed out" soon after the deadline.
                return lane == "slack" and bool(self.approvals.sweep())
            try:
                error, permanent = self._deliver(item)
            except Exception as e:  # a bug or an unexpected fault: the row is retried like any failure
                log.exception("notification %s (%s) failed", item.seq, item.kind)
                error, permanent = f"{e.__class__.__name__}: {e}", False
            if not error:
                self.outbox.delivered(item)
            elif self.outbox.failed(item, error, permanent=permanent):
                log.warning("notification %s (%s) failed, will retry: %s", item.seq, item.kind, error)
            else:
                log.error("notification %s (%s) given up: %s", item.seq, item.kind, error)
            return True

        return step

    def _due(self, lane: Lane) -> Callable[[], float | None]:
        return lambda: self.outbox.next_due(lane)

    # -- what a queued or settled approval sets off ------------------------------------------------------------

    def _on_submit(self, conn: Any, approval: Any) -> None:
        if self.webhook_url:
            body = msgspec.json.encode(self.approvals.event_body(approval, "pending")).decode()
            self.outbox.enqueue(
                conn, "webhook", "webhook", approval.id, {"id": f"msg_{approval.id}_pending", "body": body}
            )
        chain = self.chain(approval)
        if chain:
            self._tell_route(conn, approval, chain, 0, approval.created_ts)

    def chain(self, approval: Any) -> list[Route]:
        return chain_for(self.config, approval.tool, approval.agent_id, approval.policy_rule)

    def _tell_route(self, conn: Any, approval: Any, chain: list[Route], step: int, since: float) -> None:
        """Queue route `step`'s Slack post and emails, and the escalation to the next route when it has one."""
        route = chain[step]
        escalated = ""
        if step > 0:
            before = chain[step - 1]
            escalated = (
                f"nobody decided within {format_span(before.escalate_seconds)} "
                f"(route {before.name or step}); now asking route {route.name or step + 1}"
            )
        if route.slack and self.config.slack is not None:
            self.outbox.enqueue(
                conn, "slack", "slack.post", approval.id, {"channel": route.slack, "escalated_from": escalated}
            )
        if route.email and self.config.email is not None:
            for address in recipients(route, approval, self.users.list()):
                self.outbox.enqueue(conn, "email", "email", approval.id, {"to": address, "escalated_from": escalated})
        if step + 1 < len(chain) and route.escalate_seconds > 0:
            due = since + route.escalate_seconds
            if due < approval.expires_ts:
                conn.execute(
                    "INSERT INTO notify_escalations (approval_id, step, due_at) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (approval.id, step + 1, due),
                )
            else:
                log.info("approval %s expires before route %s would escalate it", approval.id, route.name or step + 1)

    def _on_settled(self, conn: Any, resolved: list[Any]) -> None:
        for approval in resolved:
            conn.execute("DELETE FROM notify_escalations WHERE approval_id = ? AND claimed_at IS NULL", (approval.id,))
            if self.config.slack is None:
                continue
            posted = conn.execute(
                "SELECT 1 FROM notify_slack_messages WHERE approval_id = ? UNION ALL "
                "SELECT 1 FROM notify_outbox WHERE approval_id = ? AND kind = 'slack.post' LIMIT 1",
                (approval.id, approval.id),
            ).fetchone()
            if posted is not None:
                self.outbox.enqueue(conn, "slack", "slack.update", approval.id, {})

    def _on_vote(self, approval: Any) -> None:
        """A four-eyes vote that did not settle the approval: its messages show who approved so far."""
        self.outbox.add("slack", "slack.update", approval.id, {})
        self.kick("slack")

    # -- escalation ------------------------------------------------------------------------------------------

    def _next_escalation(self) -> float | None:
        row = self._db.query_one("SELECT min(due_at) FROM notify_escalations WHERE claimed_at IS NULL")
        return float(row[0]) if row is not None and row[0] is not None else None

    def _escalate_step(self) -> bool:
        """Claim one due escalation and queue its route; True when there was one."""
        now = time.time()
        row = self._db.query_one(
            "SELECT approval_id, step FROM notify_escalations WHERE claimed_at IS NULL AND due_at <= ? "
            "ORDER BY due_at LIMIT 1",
            (now,),
        )
        if row is None:
            return False
        approval_id, step = str(row[0]), int(row[1])
        try:
            approval = self.approvals.get(approval_id)
        except Exception:
            approval = None
        with self._db.write() as conn:
            claimed = conn.execute(
                "UPDATE notify_escalations SET claimed_at = ? "
                "WHERE approval_id = ? AND step = ? AND claimed_at IS NULL RETURNING due_at",
                (now, approval_id, step),
            ).fetchone()
            if claimed is None or approval is None:
                return True  # another worker took it, or the approval is gone
            status = conn.execute("SELECT status FROM approvals WHERE id = ?", (approval_id,)).fetchone()
            chain = self.chain(approval)
            if status is None or status[0] != "pending" or step >= len(chain):
                return True
            self._tell_route(conn, approval, chain, step, float(claimed[0]))
        log.info("approval %s escalated to route %s", approval_id, chain[step].name or step + 1)
        self.kick("slack")
        self.kick("email")
        return True

    # -- delivery --------------------------------------------------------------------------------------------

    def base_url(self) -> str:
        if self.config.public_url:
            return self.config.public_url.rstrip("/")
        if self._settings.auth.resource_url:
            return self._settings.auth.resource_url.rstrip("/")
        host = self._settings.host if self._settings.host not in ("0.0.0.0", "::", "") else "localhost"
        scheme = "https" if self._settings.tls.cert_file else "http"
        return f"{scheme}://{host}:{self._settings.port}"

    def console_url(self, approval_id: str, decision: str = "") -> str:
        return f"{self.base_url()}/console/#/approvals/{approval_id}" + (f"?decision={decision}" if decision else "")

    def _deliver(self, item: OutboxItem) -> tuple[str, bool]:
        """Send one row: ("", _) when done, else (why not, whether retrying is pointless)."""
        if item.kind == "webhook":
            return self._deliver_webhook(item), False
        from flux7.shared.notify.delivery import deliver_email, deliver_slack

        if item.kind.startswith("slack."):
            return deliver_slack(self, item)
        if item.kind == "email":
            return deliver_email(self, item)
        return f"unknown notification kind {item.kind!r}", True

    def _deliver_webhook(self, item: OutboxItem) -> str:
        if not self.webhook_url or self.signer is None:
            return ""  # the webhook was removed from the config: nothing to send
        if self._http is None:
            self._http = httpx.Client(timeout=10.0, follow_redirects=False)
        return deliver_webhook(
            self._http, self.webhook_url, self.signer, str(item.payload["id"]), str(item.payload["body"]).encode()
        )


def notifications_for(settings: Settings, db: Database, approvals: Any, users: UserStore) -> Notifications | None:
    """The process's notifications, or None when nothing is configured (no webhook, no Slack, no email)."""
    if not settings.approval.notify_url and not settings.notify.enabled:
        return None
    return Notifications(settings, db, approvals, users)
