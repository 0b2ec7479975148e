"""The notification outbox over HTTP (docs/approvals.md "When a delivery fails"): what is still owed to Slack, email
and the webhook, what was given up, and queueing a given-up delivery again once its receiver is fixed. Control
plane: viewers read, admins and owners retry."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, get, post
from litestar.params import FromPath, FromQuery

from flux7.functions.auth import actor_of, control_plane, mesh_of
from flux7.functions.openapi import ADMIN, responses
from flux7.shared.errors import BadRequest, NotFound
from flux7.shared.notify.outbox import LANES, DeliveryView
from flux7.shared.notify.service import Notifications

__all__ = ["ROUTES"]

_STATUSES = ("queued", "failed")


class Deliveries(msgspec.Struct, kw_only=True):
    lanes: list[str]  # the channels configured (webhook, slack, email); empty: notifications are off
    deliveries: list[DeliveryView]  # oldest first


def _notifications(request: Request[Any, Any, Any]) -> Notifications:
    notifications = mesh_of(request).notifications
    if notifications is None:
        raise NotFound("no notifications are configured (approval.notify_url, notify.slack, notify.email)")
    return notifications


@get(
    "/notifications/deliveries",
    guards=[control_plane],
    sync_to_thread=True,
    tags=["notifications"],
    security=ADMIN,
    response_description="The channels configured, and the deliveries still owed (queued) or given up (failed)",
    responses=responses({}, 400, 401),
)
def list_deliveries(
    request: Request[Any, Any, Any], status: FromQuery[str] = "", lane: FromQuery[str] = ""
) -> Deliveries:
    """`?status=failed` for what was given up, `?lane=slack` for one channel. With notifications off, no lanes
    and no deliveries."""
    if status and status not in _STATUSES:
        raise BadRequest(f"status is one of {', '.join(_STATUSES)}")
    if lane and lane not in LANES:
        raise BadRequest(f"lane is one of {', '.join(LANES)}")
    notifications = mesh_of(request).notifications
    if notifications is None:
        return Deliveries(lanes=[], deliveries=[])
    rows = notifications.outbox.rows(lane=lane or None, status=status or None)
    return Deliveries(lanes=list(notifications.lanes), deliveries=rows)


@post(
    "/notifications/deliveries/{seq:int}/retry",
    guards=[control_plane],
    status_code=200,
    sync_to_thread=True,
    tags=["notifications"],
    security=ADMIN,
    response_description="Queued again, due now, its attempts counted from zero",
    responses=responses({}, 400, 401, 403, 404),
)
def retry_delivery(request: Request[Any, Any, Any], seq: FromPath[int]) -> DeliveryView:
    """A given-up delivery queued again (after fixing the Slack token, the SMTP password, the receiver). It keeps
    its place: the lane delivers in order. Recorded as a `mesh.notify_retry` event."""
    notifications = _notifications(request)
    view = notifications.outbox.retry(seq)
    if view is None:
        raise NotFound(f"no failed delivery {seq}: only a given-up delivery is retried (queued ones are being tried)")
    mesh_of(request).events.record(
        tool="mesh.notify_retry",
        actor=actor_of(request),
        params={"seq": seq, "lane": view.lane, "kind": view.kind, "approval_id": view.approval_id},
        policy_rule="notify_retry",
    )
    notifications.kick(view.lane)
    return view


ROUTES = [list_deliveries, retry_delivery]
