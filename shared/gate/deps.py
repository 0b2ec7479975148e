"""The collaborators the gate uses, typed and handed over once: the pipeline never sees the Mesh that builds them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flux7.shared.decisions.precedents import Precedents
    from flux7.shared.gate.approvals import ApprovalQueue
    from flux7.shared.gate.grants import GrantStore
    from flux7.shared.gate.halts import HaltRegistry
    from flux7.shared.gate.limits import RateLimiter
    from flux7.shared.gate.pins import PinStore
    from flux7.shared.gate.policy_store import PolicyStore
    from flux7.shared.governance.catalog import Catalog
    from flux7.shared.metrics import Metrics
    from flux7.shared.settings import Settings
    from flux7.shared.tracing import Tracer
    from flux7.shared.upstreams.registry import Registry

__all__ = ["GateDeps"]


@dataclass(frozen=True, slots=True)
class GateDeps:
    settings: Settings
    registry: Registry  # the tools and their upstreams
    policies: PolicyStore
    catalog: Catalog  # agents' lifecycle: a suspended or retired agent is refused
    halts: HaltRegistry  # emergency stops
    limits: RateLimiter  # rate limits and loop detection
    grants: GrantStore
    pins: PinStore  # tool pinning: a changed definition is a floor
    precedents: Precedents  # human approvals remembered in memory (level 1)
    approvals: ApprovalQueue
    tracer: Tracer
    metrics: Metrics
