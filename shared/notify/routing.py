"""Which people hear of a pending approval, and in what order.

A call's routes are the configured routes that match it (tool, agent and policy rule globs), in config order; with
none matching, the default route (`notify.slack.channel`, `notify.email.to`). The first is told when the call is
queued; a route with `escalate_after` hands over to the next one when nobody has decided by then. In a route's
`email`, `approvers` stands for the users who may decide the call and have an email address: approvers whose
scope covers it, else (none such) the admins and owners; never the user the agent acts for."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flux7.shared.auth.users import User
from flux7.shared.globs import glob_match
from flux7.shared.notify.settings import APPROVERS, NotifySettings, Route

__all__ = ["chain_for", "recipients"]


def _matches(globs: tuple[str, ...], value: str) -> bool:
    return any(glob_match(g, value) for g in globs)


def chain_for(settings: NotifySettings, tool: str, agent: str, policy_rule: str) -> list[Route]:
    """The routes of one call, first to last."""
    chain = [
        r
        for r in settings.routes
        if _matches(r.tools, tool) and _matches(r.agents, agent) and _matches(r.policies, policy_rule)
    ]
    if chain:
        return chain
    default = Route(
        name="default",
        slack=settings.slack.channel if settings.slack is not None else "",
        email=settings.email.to if settings.email is not None else (),
    )
    return [default] if default.slack or default.email else []


def recipients(route: Route, approval: Any, users: Iterable[User]) -> list[str]:
    """The addresses a route mails for this approval, each once, in the order given."""
    out: list[str] = []
    for entry in route.email:
        if entry == APPROVERS:
            out.extend(_approvers(approval, list(users)))
        else:
            out.append(entry)
    seen: set[str] = set()
    unique = []
    for address in out:
        if address.lower() not in seen:
            seen.add(address.lower())
            unique.append(address)
    return unique


def _approvers(approval: Any, users: list[User]) -> list[str]:
    def may(u: User) -> bool:
        return bool(u.email) and u.name != approval.requester_user and u.may_decide(approval.tool, approval.agent_id)

    scoped = [u.email for u in users if u.role == "approver" and may(u)]
    return scoped or [u.email for u in users if u.role in ("owner", "admin") and may(u)]
