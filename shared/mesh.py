"""The mesh's runtime: every component built once from Settings and shared by handlers and transports."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from flux7.shared.auth.identity import IdentityResolver
from flux7.shared.auth.oauth import OAuth
from flux7.shared.auth.sso import single_sign_on
from flux7.shared.auth.tokens import TokenStore
from flux7.shared.auth.users import UserStore
from flux7.shared.decisions.precedents import decision_memory
from flux7.shared.gate.approvals import ApprovalQueue
from flux7.shared.gate.audit import EventLog
from flux7.shared.gate.callbacks import Notifier
from flux7.shared.gate.deps import GateDeps
from flux7.shared.gate.grants import GrantStore
from flux7.shared.gate.halts import HaltRegistry
from flux7.shared.gate.limits import RateLimiter
from flux7.shared.gate.pins import PinStore
from flux7.shared.gate.pipeline import Pipeline
from flux7.shared.gate.policy_store import PolicyStore
from flux7.shared.gate.record import SettledRecord
from flux7.shared.globs import glob_match
from flux7.shared.governance.catalog import Catalog
from flux7.shared.governance.engine import Governance
from flux7.shared.governance.versions import Versions
from flux7.shared.mcp.server import McpServer
from flux7.shared.mcp.sessions import SessionStore
from flux7.shared.memory.service import memory_service_for
from flux7.shared.metrics import Metrics, UpstreamState
from flux7.shared.notify.service import notifications_for
from flux7.shared.outbound import OutboundGuard
from flux7.shared.settings import Settings
from flux7.shared.store.db import Database, database_for
from flux7.shared.tracing import Tracer
from flux7.shared.upstreams.base import Classification
from flux7.shared.upstreams.registry import Registry

__all__ = ["Health", "Mesh", "ToolDecision"]

log = logging.getLogger("flux7.mesh")


class Health(msgspec.Struct, kw_only=True):
    """GET /health (CONTRACT 1.6)."""

    status: str
    tools: int
    traces: dict[str, int]  # total, allowed, denied, human_approval, errors, estimated input and output tokens
    version: str
    config: str  # a hash of the config file's path: how a stdio relay recognises its daemon
    problems: list[str] | UnsetType = UNSET  # what is wrong, one sentence each (only when degraded)


class ToolDecision(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A GET /tools/decisions entry: what one tool gets for one agent, with empty arguments."""

    name: str
    source: str
    classification: Classification
    action: str
    rule: str
    conditional: list[dict[str, str]]  # the conditional rules that could decide it otherwise
    rule_index: int  # the deciding rule's index in its policy, -1 when none
    mcp_server: str = ""
    pin: str = ""  # pinned | new | changed, with pin_tools on
    source_file: str = ""


class Mesh:
    """Holds the components of one process. Stateless between requests: all shared state is in `db`."""

    def __init__(self, settings: Settings, *, db: Database | None = None) -> None:
        self.settings = settings
        self.db = db or database_for(settings)
        self.tokens = TokenStore(self.db)  # per-agent bearer tokens (flux7 token …)
        self.users = UserStore(self.db)  # named humans and their roles (flux7 user …)
        self.tracer = Tracer(settings, self.db)
        self.events = EventLog(self.tracer)  # control-plane events as mesh.* trace entries
        self.versions = Versions(self.db)  # every policy, catalog and tool definition version seen
        self.policies = PolicyStore(settings, self.db, on_loaded=self.versions.sync)
        # the OAuth authorization server of /mcp: connections a named human consented to (docs/managed-agents.md)
        self.oauth = OAuth(settings, self.db, self.events, policies_for=self._policies_for)
        self.identity = IdentityResolver(
            settings, self.tokens, self.users, self.oauth.connections if settings.oauth.enabled else None
        )
        self.sso = single_sign_on(settings, self.db, self.users)  # the console's single sign-on, None when off
        self.catalog = Catalog(settings, self.db, self.versions)
        self.registry = Registry(settings)
        self.metrics = Metrics(
            self.db,
            settings.metrics,
            upstreams=lambda: [UpstreamState(*state) for state in self.registry.upstream_states()],
            deliveries=lambda: self.notifications.delivery_counts() if self.notifications is not None else None,
        )
        # every URL fetched on a caller's behalf goes through this guard (docs/security.md, "Outbound requests")
        self.outbound = OutboundGuard(allow_networks=settings.outbound.allow_networks)
        self.approvals = ApprovalQueue(
            self.db,
            settings,
            events=self.events,
            notifier=Notifier(guard=self.outbound),
            policy_version=lambda: self.policies.current.version,
        )
        # Slack, email, escalation and the signed operator webhook (docs/approvals.md "Notifications"); None: off
        self.notifications = notifications_for(settings, self.db, self.approvals, self.users)
        self.grants = GrantStore(self.db, events=self.events)
        self.halts = HaltRegistry(self.db, self.grants, self.approvals, events=self.events)
        self.limits = RateLimiter(self.db, settings)
        self.pins = PinStore(self.db, enabled=settings.pin_tools, events=self.events, versions=self.versions)
        # the memory role in this process (CONTRACT 2), over the same database; None when off or remote
        self.memory = memory_service_for(settings, self.db)
        # decision memory and precedents (CONTRACT 1.16): every decision a fact, read tools auto-approved
        self.decisions, self.precedents = decision_memory(
            settings, self.db, self.approvals, self.metrics, self.registry, self.memory
        )
        self.pipeline = Pipeline(
            GateDeps(
                settings=settings,
                registry=self.registry,
                policies=self.policies,
                catalog=self.catalog,
                halts=self.halts,
                limits=self.limits,
                grants=self.grants,
                pins=self.pins,
                precedents=self.precedents,
                approvals=self.approvals,
                tracer=self.tracer,
                metrics=self.metrics,
            )
        )
        self.governance = Governance(self)
        self.mcp_sessions = SessionStore(self.db)
        self.mcp = McpServer(self)
        # a decided MCP request nobody waited on: its "pending" trace is revised with the decision
        self.approvals.add_listener(SettledRecord(self.tracer, self.mcp.virtual.claimable))
        self.extras: dict[str, Any] = {}

    def _policies_for(self, agent: str) -> list[dict[str, str]]:
        """The policies whose agent glob covers this agent, in the order they decide."""
        return [
            {"name": p.name, "agent": p.agent} for p in self.policies.current.policies if glob_match(p.agent, agent)
        ]

    @property
    def data_dir(self) -> Path:
        return Path(self.db.path).parent

    async def start(self) -> None:
        """Start background parts (upstream connections, exporters). Called once per worker at startup."""
        await self.registry.start()
        self.metrics.start()  # a worker's series are held in memory and written every metrics.FLUSH_SECONDS
        await self.tracer.start()
        self.decisions.start()  # deliver what the outbox still owes memory (a previous run, memory down)
        if self.notifications is not None:
            self.notifications.start()  # what the notification outbox still owes, and the escalation timer

    async def stop(self) -> None:
        """Stop background parts and flush what they hold."""
        await self.tracer.stop()
        await self.decisions.stop(5)  # finish the delivery under way (in process, it needs the db); the rest waits
        if self.notifications is not None:
            await asyncio.to_thread(self.notifications.stop, 5)  # the rest stays in the outbox for the next start
        await self.registry.stop()
        try:
            await self.metrics.stop()  # what it still holds
        except Exception as e:
            log.warning("metrics: held series lost at shutdown: %s", e)
        self.db.close()

    # -- views shared by several transports --------------------------------------------------------------

    def health(self, config: str) -> Health:
        """GET /health: `status` stays "ok" unless something keeps the mesh from working, then "degraded" with a
        `problems` sentence each (the SDKs' is_healthy() reads only `status`)."""
        from flux7.shared import __version__

        counts = self.tracer.counts()
        problems = []
        if self.db.write_blocked():
            problems.append(
                f"the database {self.db.label} is locked for writing by another program: every call that must "
                "be recorded waits, then fails with 503; end that program's transaction"
            )
        return Health(
            status="degraded" if problems else "ok",
            tools=len(self.registry.tools()),
            traces=counts,
            version=__version__,
            config=config,
            problems=problems or UNSET,
        )

    def tool_decisions(self, agent: str) -> list[ToolDecision]:
        """GET /tools/decisions: the effective action of every tool for one agent, with empty arguments."""
        current = self.policies.current
        pins = self.pins
        lifecycle = self.pipeline.decider.lifecycle_floor(agent)
        out: list[ToolDecision] = []
        for tool in self.registry.tools():
            # a suspended or retired agent is refused before any policy (the catalog's lifecycle floor)
            decision = lifecycle or self.pipeline.decider.evaluate(agent, tool.name, {}, tool)
            where = current.deciding_rule(agent, tool.name, {})
            policy = current.by_name.get(where[0]) if where else None
            out.append(
                ToolDecision(
                    name=tool.name,
                    source=tool.source,
                    classification=tool.classification,
                    action=decision.action,
                    rule=decision.rule,
                    conditional=current.conditional(agent, tool.name),
                    rule_index=where[1] if where else -1,
                    mcp_server=tool.mcp_server,
                    pin=pins.status_of(tool) or "",
                    source_file=policy.source_file if policy is not None else "",
                )
            )
        return out
