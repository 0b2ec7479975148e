"""The governance engine on the control plane (docs/governance.md): the agent catalog and its lifecycle,
scores, findings and verdicts, the dependency graph and impact, versions and diffs, drafts and policy replay."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post, put
from litestar.params import FromPath, FromQuery

from flux7.functions.auth import actor_of, control_plane, mesh_of
from flux7.functions.openapi import ADMIN, BODY, json_body, ok, responses
from flux7.functions.responses import json_response
from flux7.shared.errors import BadRequest
from flux7.shared.json_depth import decode

# Every governance route is control plane and answers JSON (docs/governance.md has the shapes).
_READ: dict[str, Any] = {
    "guards": [control_plane],
    "tags": ["governance"],
    "security": ADMIN,
    "responses": responses({200: ok(Any, "JSON (docs/governance.md)")}, 400, 401, 404, 501),
}
_WRITE: dict[str, Any] = {
    "guards": [control_plane],
    "tags": ["governance"],
    "security": ADMIN,
    "operation_class": json_body(dict[str, Any]),
    "responses": responses({200: ok(Any, "JSON (docs/governance.md)")}, *BODY, 401, 403, 404, 409, 501, 503),
}

__all__ = ["ROUTES"]


async def _body(request: Request[Any, Any, Any], kind: type[Any]) -> Any:
    raw = await request.body()
    try:
        return decode(raw or b"{}", type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BadRequest(f"invalid JSON body: {e}") from None


def _by(request: Request[Any, Any, Any], given: str) -> str:
    return actor_of(request, given or request.headers.get("x-flux7-by", ""))


def _gov(request: Request[Any, Any, Any]) -> Any:
    return mesh_of(request).governance


def _event(request: Request[Any, Any, Any], tool: str, by: str, params: Any, rule: str) -> None:
    mesh_of(request).events.record(tool=tool, actor=by, params=params, policy_rule=rule)


# -- catalog -----------------------------------------------------------------------------------------------------


@get("/governance/catalog", **_READ)
async def catalog(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Declared agents with their lifecycle state, and agents seen in traces but never declared (flagged)."""
    return json_response(await asyncio.to_thread(_gov(request).catalog))


@get("/governance/catalog/files", **_READ)
async def catalog_files(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(mesh_of(request).catalog.files())


@get("/governance/catalog/files/{name:str}", **_READ)
async def catalog_file(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    return json_response(mesh_of(request).catalog.read_file(name))


class CatalogFileBody(msgspec.Struct):
    text: str
    by: str = ""


@put("/governance/catalog/files/{name:str}", **_WRITE)
async def write_catalog_file(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    """Write one catalog file (`{"text": "<yaml>"}`): validated, written, reloaded, versioned."""
    body = await _body(request, CatalogFileBody)
    by = _by(request, body.by)
    result = await asyncio.to_thread(mesh_of(request).catalog.write_file, name, body.text, by=by)
    _event(request, "mesh.catalog_edit", by, {"file": name}, "catalog_edit")
    return json_response(result)


@delete("/governance/catalog/files/{name:str}", **_WRITE, status_code=200)
async def delete_catalog_file(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    by = _by(request, "")
    result = await asyncio.to_thread(mesh_of(request).catalog.delete_file, name, by=by)
    _event(request, "mesh.catalog_edit", by, {"file": name, "deleted": True}, "catalog_edit")
    return json_response(result)


class LifecycleBody(msgspec.Struct):
    state: str
    reason: str = ""
    by: str = ""


@post("/governance/catalog/{entry:str}/lifecycle", **_WRITE, status_code=200)
async def transition(request: Request[Any, Any, Any], entry: FromPath[str]) -> Response[bytes]:
    """Move an entry through proposed -> active -> suspended -> retired (who, when and why recorded)."""
    body = await _body(request, LifecycleBody)
    by = _by(request, body.by)
    result = mesh_of(request).catalog.transition(entry, body.state, by=by, reason=body.reason)
    _event(request, "mesh.agent_lifecycle", by, result, f"lifecycle:{body.state}")
    return json_response(result)


@get("/governance/catalog/{entry:str}/lifecycle", **_READ)
async def lifecycle(request: Request[Any, Any, Any], entry: FromPath[str]) -> Response[bytes]:
    cat = mesh_of(request).catalog
    found = cat.entry(entry)
    return json_response({"id": found.id, "state": cat.state_of(found), "history": cat.history(found.id)})


# -- scores, findings, verdicts ------------------------------------------------------------------------------------


@post("/governance/evaluate", **_WRITE, status_code=200)
async def evaluate(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Fold in new traces and score every agent now (reads do this on their own every refresh_seconds)."""
    return json_response(await asyncio.to_thread(_gov(request).evaluate))


@get("/governance/scores", **_READ)
async def scores(request: Request[Any, Any, Any]) -> Response[bytes]:
    gov = _gov(request)
    await asyncio.to_thread(gov.refresh)
    return json_response(gov.scores())


@get("/governance/agents", **_READ)
async def agents(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Every agent: declared by an exact entry, covered by a glob entry, or discovered in the trace, with its
    entry, lifecycle state and latest verdict and scores (docs/governance.md)."""
    gov = _gov(request)
    await asyncio.to_thread(gov.refresh)
    return json_response(await asyncio.to_thread(gov.roster))


@get("/governance/agents/{agent:str}", **_READ)
async def agent(
    request: Request[Any, Any, Any], agent: FromPath[str], history: FromQuery[int] = 100
) -> Response[bytes]:
    """One agent: catalog entry, lifecycle, scores over time, findings with their evidence trace ids."""
    gov = _gov(request)
    await asyncio.to_thread(gov.refresh)
    return json_response(gov.agent(agent, max(1, min(history, 1000))))


@get("/governance/findings", **_READ)
async def findings(request: Request[Any, Any, Any], severity: FromQuery[str] = "") -> Response[bytes]:
    gov = _gov(request)
    await asyncio.to_thread(gov.refresh)
    return json_response(gov.findings(severity))


@get("/governance/verdicts", **_READ)
async def verdicts(request: Request[Any, Any, Any]) -> Response[bytes]:
    gov = _gov(request)
    await asyncio.to_thread(gov.refresh)
    return json_response(gov.verdicts())


# -- graph and impact --------------------------------------------------------------------------------------------


@get("/governance/graph", **_READ)
async def graph(request: Request[Any, Any, Any], days: FromQuery[int] = 30) -> Response[bytes]:
    if not 1 <= days <= 365:
        raise BadRequest("days is between 1 and 365")
    built = await asyncio.to_thread(lambda: _gov(request).graph(days).build())
    return json_response(built)


@get("/governance/impact", **_READ)
async def impact(
    request: Request[Any, Any, Any], kind: FromQuery[str] = "", name: FromQuery[str] = "", days: FromQuery[int] = 30
) -> Response[bytes]:
    """What breaks if upstream X goes away, tool Y changes or agent Z is suspended (?kind=&name=&days=)."""
    if not name:
        raise BadRequest("name is required")
    return json_response(await asyncio.to_thread(_gov(request).impact, kind, name, days))


# -- versions and diffs ------------------------------------------------------------------------------------------


@get("/governance/versions", **_READ)
async def versions(request: Request[Any, Any, Any], kind: FromQuery[str] = "policy") -> Response[bytes]:
    if kind not in ("policy", "catalog", "tool"):
        raise BadRequest("kind is policy, catalog or tool")
    return json_response(mesh_of(request).versions.names(kind))


@get("/governance/versions/{kind:str}/{name:str}", **_READ)
async def version_history(request: Request[Any, Any, Any], kind: FromPath[str], name: FromPath[str]) -> Response[bytes]:
    if kind not in ("policy", "catalog", "tool"):
        raise BadRequest("kind is policy, catalog or tool")
    return json_response(mesh_of(request).versions.history(kind, name))


@get("/governance/diff", **_READ)
async def diff(
    request: Request[Any, Any, Any],
    kind: FromQuery[str] = "",
    name: FromQuery[str] = "",
    old: FromQuery[int | None] = None,
    new: FromQuery[int | None] = None,
) -> Response[bytes]:
    """Classified changes between two versions (?kind=policy|catalog|tool&name=&old=&new=; default: newest two)."""
    if not name:
        raise BadRequest("name is required")
    return json_response(await asyncio.to_thread(_gov(request).diff, kind, name, old, new))


@get("/governance/pins/{tool:str}/diff", **_READ)
async def pin_diff(request: Request[Any, Any, Any], tool: FromPath[str]) -> Response[bytes]:
    """A pinned tool against its current definition: the exact diff of a changed (rug-pulled) definition."""
    return json_response(await asyncio.to_thread(_gov(request).pin_diff, tool))


# -- drafts and replay -------------------------------------------------------------------------------------------


class DraftBody(msgspec.Struct):
    files: dict[str, str | None]
    by: str = ""


@get("/governance/drafts", **_READ)
async def drafts(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(_gov(request).drafts())


@put("/governance/drafts/{name:str}", **_WRITE)
async def save_draft(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    """A proposed policy set: `{"files": {"<file>.yaml": "<text>" | null}}` over the files in force."""
    body = await _body(request, DraftBody)
    by = _by(request, body.by)
    result = await asyncio.to_thread(_gov(request).save_draft, name, body.files, by)
    _event(request, "mesh.policy_draft", by, {"draft": name, "files": sorted(body.files)}, "policy_draft")
    return json_response(result)


@get("/governance/drafts/{name:str}", **_READ)
async def get_draft(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    return json_response(_gov(request).draft(name))


class ApplyBody(msgspec.Struct):
    by: str = ""


@post("/governance/drafts/{name:str}/apply", **_WRITE, status_code=200)
async def apply_draft(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    body = await _body(request, ApplyBody)
    by = _by(request, body.by)
    result = await asyncio.to_thread(_gov(request).apply_draft, name, by)
    _event(request, "mesh.policy_edit", by, {"draft": name}, "policy_edit")
    return json_response(result)


class ReplayBody(msgspec.Struct):
    files: dict[str, str | None] = {}
    draft: str = ""
    days: float = 7


@post("/governance/replay", **_WRITE, status_code=200)
async def replay(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Re-decide the last `days` of traced calls with a proposed set; every decision that would change."""
    body = await _body(request, ReplayBody)
    gov = _gov(request)
    return json_response(
        await asyncio.to_thread(lambda: gov.replay(files=body.files, draft=body.draft, days=body.days))
    )


# The JSON bodies each route reads (bodies are decoded by hand, so Litestar's schema does not see them):
# functions/governance_openapi.py puts them into the OpenAPI document.
BODIES: dict[tuple[str, str], type[msgspec.Struct]] = {
    ("put", "/governance/catalog/files/{name}"): CatalogFileBody,
    ("post", "/governance/catalog/{entry}/lifecycle"): LifecycleBody,
    ("put", "/governance/drafts/{name}"): DraftBody,
    ("post", "/governance/drafts/{name}/apply"): ApplyBody,
    ("post", "/governance/replay"): ReplayBody,
}

ROUTES = [
    catalog,
    catalog_files,
    catalog_file,
    write_catalog_file,
    delete_catalog_file,
    transition,
    lifecycle,
    evaluate,
    scores,
    agents,
    agent,
    findings,
    verdicts,
    graph,
    impact,
    versions,
    version_history,
    diff,
    pin_diff,
    drafts,
    save_draft,
    get_draft,
    apply_draft,
    replay,
]
