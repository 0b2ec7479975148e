"""The OpenAPI 3.1 document of the REST routes, from Litestar's own generator (GET /schema/openapi.json).

Handlers return their wire Structs (functions/schemas.py), so Litestar describes a route's success answer from its
return type. What it cannot see is stated per route with the helpers here: `responses(...)` gives the other statuses
a route answers with their Structs (the one error body `{"error": "..."}` for 4xx/5xx, `errors(...)`), and the
success answer of a route whose handler returns a `Response[bytes]` (an answer shared with a fast path, or a dict
the core makes); `json_body(...)` gives the request body a handler decodes itself; the security requirement says
which credential the route reads. Nothing here changes what a route accepts or answers."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from litestar import Request
from litestar._openapi.schema_generation import SchemaCreator
from litestar._openapi.schema_generation.plugins import openapi_schema_plugins
from litestar.enums import MediaType, ParamType
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin, YamlRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
    Tag,
)
from litestar.typing import FieldDefinition

from flux7.functions.errors import ErrorBody
from flux7.shared import __version__

__all__ = [
    "ADMIN",
    "AGENT",
    "BODY",
    "CALL_HEADERS",
    "PUBLIC",
    "errors",
    "header",
    "json_body",
    "ok",
    "openapi_config",
    "operation",
    "responses",
    "text_responses",
]

# Security requirements. The data plane reads an optional bearer (anonymous is a caller unless
# `require_authentication`); the control plane needs the admin token (or a loopback peer when none is set).
AGENT: list[dict[str, list[str]]] = [{"agent": []}, {}]
ADMIN: list[dict[str, list[str]]] = [{"admin": []}]
PUBLIC: list[dict[str, list[str]]] = [{}]

_WHY = {
    400: "Bad request: invalid JSON, a field of the wrong type, or JSON nested deeper than the limit",
    401: "Authentication required or refused",
    403: "Forbidden (a policy denial, a halt, a refused approval, an origin not allowed)",
    404: "Not found",
    405: "Method not allowed",
    408: "The approval timed out",
    409: "Conflict with the current state",
    413: "Request body too large",
    415: "Unsupported media type: a JSON route needs `Content-Type: application/json`",
    422: "The command exited non-zero",
    429: "Rate limited",
    500: "Internal error",
    501: "The feature is off in this configuration",
    502: "The upstream failed",
    503: "Unavailable: the audit trail (or another required store) cannot be written",
    504: "The upstream timed out",
}

# What a body-reading JSON route may always answer besides its own statuses (413: the body limit, 415: the
# content-type check, 503: the audit trail cannot be written).
BODY = (400, 413, 415)


def ok(container: Any, description: str = "OK", media_type: str = MediaType.JSON) -> ResponseSpec:
    return ResponseSpec(
        data_container=container, description=description, media_type=media_type, generate_examples=False
    )


def errors(*codes: int) -> dict[int, ResponseSpec]:
    """The error body for each status in `codes`."""
    return {code: ResponseSpec(ErrorBody, generate_examples=False, description=_WHY[code]) for code in codes}


def responses(success: dict[int, ResponseSpec], *codes: int) -> dict[int, ResponseSpec]:
    return {**success, **errors(*codes)}


def text_responses(*codes: int) -> dict[int, ResponseSpec]:
    """Statuses answered in plain text (mem7's `unauthorized`, `404 page not found`, `method not allowed`)."""
    return {
        code: ResponseSpec(str, generate_examples=False, description=_WHY[code], media_type=MediaType.TEXT)
        for code in codes
    }


_creator = SchemaCreator(plugins=openapi_schema_plugins)


def _inline(container: Any) -> Schema:
    """A request body's schema by Litestar's generator, inlined (request Structs are flat)."""
    made = _creator.for_field_definition(FieldDefinition.from_annotation(container))
    return _creator.schema_registry.from_reference(made).schema if isinstance(made, Reference) else made


def header(name: str, description: str) -> Parameter:
    """An optional request header a handler reads itself."""
    return Parameter(
        name=name, param_in=ParamType.HEADER, schema=Schema(type=OpenAPIType.STRING), description=description
    )


# The headers a governed call reads (CONTRACT 1.5).
CALL_HEADERS = (
    header("X-Session-Id", "The agent's session (nothing is generated when absent)"),
    header("Traceparent", "W3C trace context: the call joins the caller's trace"),
    header("X-Trace-Id", "The caller's trace id (when no Traceparent)"),
)


def json_body(
    container: Any,
    *,
    required: bool = False,
    description: str = "",
    other: dict[str, Schema] | None = None,
    headers: tuple[Parameter, ...] = (),
) -> type[Operation]:
    """An Operation class that carries this request body (the handler reads its body itself) and the request
    headers it reads."""
    content = {MediaType.JSON.value: OpenAPIMediaType(schema=_inline(container))}
    for media, schema in (other or {}).items():
        content[media] = OpenAPIMediaType(schema=schema)
    body = RequestBody(content=content, required=required, description=description or None)
    return operation(body=body, headers=headers)


def operation(
    *, body: RequestBody | None = None, headers: tuple[Parameter, ...] = (), drop: tuple[str, ...] = ()
) -> type[Operation]:
    """An Operation class that adds a request body and headers, and drops statuses Litestar infers from the
    handler's declared status that the route never answers."""

    @dataclass
    class Described(Operation):
        def __post_init__(self) -> None:
            if body is not None:
                self.request_body = body
            if headers:
                self.parameters = [*(self.parameters or []), *headers]
            for status in drop:
                if self.responses:
                    self.responses.pop(status, None)

    return Described


class DocsPage(OpenAPIRenderPlugin):
    """/schema: the operations as plain HTML, rendered here. Every UI Litestar ships (Swagger, Redoc, Scalar,
    RapiDoc, Stoplight) loads its JavaScript from a CDN at run time; this page loads nothing."""

    def __init__(self) -> None:
        super().__init__(path="/docs")

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        rows = []
        for path, item in openapi_schema.get("paths", {}).items():
            for method, op in item.items():
                if not isinstance(op, dict) or "responses" not in op:
                    continue
                codes = ", ".join(sorted(op["responses"]))
                rows.append(
                    f"<tr><td><code>{html.escape(method.upper())}</code></td><td><code>{html.escape(path)}</code>"
                    f"</td><td>{html.escape(op.get('summary', ''))}</td><td>{html.escape(codes)}</td></tr>"
                )
        info = openapi_schema.get("info", {})
        title = html.escape(f"{info.get('title', '')} {info.get('version', '')}")
        page = (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<h1>{title} REST API</h1><p>The full document: <a href='openapi.json'>openapi.json</a>, "
            f"<a href='openapi.yaml'>openapi.yaml</a> (OpenAPI {html.escape(openapi_schema.get('openapi', ''))})."
            "</p><table border='1' cellpadding='4'><tr><th>method</th><th>path</th><th>summary</th>"
            f"<th>statuses</th></tr>{''.join(rows)}</table></body></html>"
        )
        return page.encode()


_SECURITY = {
    "agent": SecurityScheme(
        type="http",
        scheme="bearer",
        description="The calling agent: a per-agent token, a JWT (agent from its claim) or, where claims are "
        "believed, `agent:<id>`. Optional unless `require_authentication` is set.",
    ),
    "admin": SecurityScheme(
        type="http",
        scheme="bearer",
        description="The admin token (`auth.admin_token`) for control-plane routes; with none set, only loopback "
        "peers are admitted.",
    ),
    "memory": SecurityScheme(
        type="http",
        scheme="bearer",
        description="Memory's token (`memory.token`) for the memory routes; the admin token and a verified agent "
        "(its own token or JWT, as that agent) are accepted too. With no memory token set and claims believed, "
        "none is needed.",
    ),
}

_TAGS = ["data plane", "traces", "approvals", "grants", "halts", "policies", "tokens", "oauth", "memory", "meta"]


def openapi_config() -> OpenAPIConfig:
    """A fresh config per app (Litestar keeps per-app state on it)."""
    return OpenAPIConfig(
        title="flux7",
        version=__version__,
        description="The governed tool gateway (mesh), its control plane and the memory routes. Errors answer "
        '`{"error": "<why>"}` unless a route says otherwise.',
        path="/schema",
        render_plugins=[DocsPage(), JsonRenderPlugin(), YamlRenderPlugin()],
        components=Components(security_schemes=_SECURITY),  # type: ignore[arg-type]
        tags=[Tag(name=t) for t in _TAGS],
        use_handler_docstrings=True,
        create_examples=False,
    )
