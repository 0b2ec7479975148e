"""OpenAPI 2.0/3.x specs as tools, forwarded to their HTTP backend (CONTRACT 1.7 "Forwarding")."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urljoin

import httpx
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import msgspec
import yarl

from flux7.shared.durations import format_span
from flux7.shared.errors import ConfigError
from flux7.shared.safe_yaml import load_yaml
from flux7.shared.settings import OpenApiSource, Settings
from flux7.shared.upstreams.base import CallContext, Param, Timings, ToolDef, UpstreamResult
from flux7.shared.upstreams.classify import classify
from flux7.shared.upstreams.mcp_http import HttpError, HttpPool, HttpTimeout, valid_headers

__all__ = ["OpenApiUpstream", "parse_spec", "tools_from_spec"]

log = logging.getLogger("flux7.upstreams.openapi")

_MAX_SPEC_BYTES = 32 * 1024 * 1024
_MAX_SPEC_DEPTH = 200  # schemas nest deeper than policies; PyYAML's recursion still has room to spare
_METHODS = ("get", "put", "post", "delete", "patch")  # the reference skips HEAD, OPTIONS and TRACE
_QUERY_METHODS = frozenset({"GET", "DELETE"})
_MAX_IDLE = 256  # keep-alive connections kept per backend between calls (more than the calls in flight at c=32)


def _snake(operation_id: str) -> str:
    # The reference's rule, kept for name compatibility: "_" before every capital but the first.
    out: list[str] = []
    for i, c in enumerate(operation_id):
        if "A" <= c <= "Z":
            if i > 0:
                out.append("_")
            out.append(c.lower())
        else:
            out.append(c)
    return "".join(out)


def _tool_name(method: str, path: str, op: dict[str, Any]) -> str:
    op_id = op.get("operationId")
    if isinstance(op_id, str) and op_id:
        return _snake(op_id)
    clean = path.replace("/", "_").replace("{", "").replace("}", "").replace("-", "_").strip("_")
    return f"{method.lower()}_{clean}"


def _str(node: dict[str, Any], key: str, default: str = "") -> str:
    value = node.get(key)
    return value if isinstance(value, str) else default


def _resolve(spec: dict[str, Any], node: Any, depth: int = 0) -> Any:
    """Follow a local `$ref` ("#/components/..."); remote refs are left as they are."""
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 16:
        ref: str = node["$ref"]
        if not ref.startswith("#/"):
            return node
        target: Any = spec
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                return node
            target = target[part]
        node, depth = target, depth + 1
    return node


def _schema_type(schema: Any, default: str = "string") -> str:
    if isinstance(schema, dict):
        t = schema.get("type")
        if isinstance(t, str):
            return t
        if isinstance(t, list):
            return next((x for x in t if isinstance(x, str) and x != "null"), default)
    return default


def _params(spec: dict[str, Any], path_item: dict[str, Any], op: dict[str, Any]) -> list[Param]:
    merged: dict[tuple[str, str], Param] = {}
    # Path-level parameters apply to every operation; an operation's own ones override them.
    for raw in [*(path_item.get("parameters") or []), *(op.get("parameters") or [])]:
        p = _resolve(spec, raw)
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not p["name"]:
            continue
        where = _str(p, "in", "query")
        if where == "body":  # OpenAPI 2 body parameter: its schema's properties are the body fields
            merged.update({(b.name, "body"): b for b in _body_params(spec, p.get("schema"))})
            continue
        ptype = _schema_type(_resolve(spec, p.get("schema")), _schema_type(p))
        merged[(p["name"], where)] = Param(name=p["name"], in_=where, type=ptype, required=p.get("required") is True)
    body = _resolve(spec, op.get("requestBody"))
    if isinstance(body, dict):
        content = body.get("content") if isinstance(body.get("content"), dict) else {}
        media: Any = (content.get("application/json") or next(iter(content.values()), {})) if content else {}
        schema = media.get("schema") if isinstance(media, dict) else None
        merged.update({(b.name, "body"): b for b in _body_params(spec, schema)})
    return list(merged.values())


def _body_params(spec: dict[str, Any], schema: Any) -> list[Param]:
    schema = _resolve(spec, schema)
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or not props:
        # Not an object with fields: one opaque "body" parameter, as the reference lists it.
        return [Param(name="body", in_="body", type=_schema_type(schema, "object"), required=True)]
    # A field the schema requires is required of the call: the params map is the body.
    needed = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
    return [
        Param(name=k, in_="body", type=_schema_type(_resolve(spec, v)), required=k in needed) for k, v in props.items()
    ]


def _base_url(spec: dict[str, Any], spec_url: str) -> str:
    servers = spec.get("servers")
    if isinstance(servers, list) and servers and isinstance(servers[0], dict):
        url = servers[0].get("url")
        if isinstance(url, str) and url:
            return urljoin(spec_url, url) if spec_url else url
    host = spec.get("host") if isinstance(spec.get("host"), str) else "localhost"
    schemes = spec.get("schemes")
    scheme = schemes[0] if isinstance(schemes, list) and schemes and isinstance(schemes[0], str) else "https"
    base_path = spec.get("basePath") if isinstance(spec.get("basePath"), str) else ""
    return f"{scheme}://{host}{base_path}"


def _input_schema(params: list[Param]) -> dict[str, Any]:
    # CONTRACT 1.14: local params get a shallow {type, description:"<p> parameter (<in>)"}.
    props = {p.name: {"type": p.type or "string", "description": f"{p.name} parameter ({p.in_})"} for p in params}
    schema: dict[str, Any] = {"type": "object", "properties": props}
    required = [p.name for p in params if p.required]
    if required:
        schema["required"] = required
    return schema


_MAX_SCHEMA_DEPTH = 32


def _inline(spec: dict[str, Any], node: Any, seen: tuple[str, ...] = (), depth: int = 0) -> Any:
    """A schema with its local `$ref`s inlined and OpenAPI's `nullable` / `x-nullable` spelled as JSON Schema
    types, so it stands alone as an MCP outputSchema. Raises ValueError for a recursive or remote reference."""
    if depth > _MAX_SCHEMA_DEPTH:
        raise ValueError("schema too deep")
    if isinstance(node, list):
        return [_inline(spec, item, seen, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if not ref.startswith("#/") or ref in seen:
            raise ValueError(f"reference {ref} cannot be inlined")
        target = _resolve(spec, {"$ref": ref})
        if isinstance(target, dict) and "$ref" in target:
            raise ValueError(f"reference {ref} does not resolve")
        return _inline(spec, target, (*seen, ref), depth + 1)
    out = {k: _inline(spec, v, seen, depth + 1) for k, v in node.items() if k not in ("nullable", "x-nullable")}
    if (node.get("nullable") is True or node.get("x-nullable") is True) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _output_schema(spec: dict[str, Any], op: dict[str, Any]) -> dict[str, Any] | None:
    """The operation's success response schema, when it is a JSON object schema that stands alone: the tool's
    output schema (MCP clients then get the result as structuredContent too). None otherwise."""
    responses = op.get("responses")
    if not isinstance(responses, dict):
        return None
    codes = [str(c) for c in responses if str(c).startswith("2")]
    if not codes:
        return None
    response = _resolve(
        spec, responses.get(min(codes)) or responses.get(int(min(codes)) if min(codes).isdigit() else "")
    )
    if not isinstance(response, dict):
        return None
    schema: Any = response.get("schema")  # OpenAPI 2
    content = response.get("content")
    if isinstance(content, dict):  # OpenAPI 3
        media = content.get("application/json") or next(
            (v for k, v in content.items() if isinstance(k, str) and k.endswith("+json")), None
        )
        schema = media.get("schema") if isinstance(media, dict) else None
    if schema is None:
        return None
    try:
        inlined = _inline(spec, schema)
        if not isinstance(inlined, dict) or inlined.get("type") != "object":
            return None
        jsonschema.validators.validator_for(inlined, default=jsonschema.Draft202012Validator).check_schema(inlined)
    except (ValueError, jsonschema.exceptions.SchemaError):
        return None
    return inlined


def parse_spec(text: str | bytes, origin: str) -> dict[str, Any]:
    """A spec document (JSON or YAML) as a mapping; ValueError naming `origin` otherwise."""
    try:
        spec = msgspec.json.decode(text)
    except msgspec.DecodeError:
        try:
            # Limits (shared/safe_yaml.py): a spec fetched from a URL must not take the server down.
            spec = load_yaml(text, origin, max_bytes=_MAX_SPEC_BYTES, max_depth=_MAX_SPEC_DEPTH)
        except ConfigError as e:
            raise ValueError(f"{origin}: not JSON or YAML: {e.key}: {e.fault.split(' in ')[0]}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("paths"), dict):
        raise ValueError(f"{origin}: no paths found in spec")
    return spec


def tools_from_spec(spec: dict[str, Any], backend_url: str, spec_url: str = "") -> list[ToolDef]:
    base = (backend_url or _base_url(spec, spec_url)).rstrip("/")
    tools: list[ToolDef] = []
    for path, item in spec["paths"].items():
        item = _resolve(spec, item)
        if not isinstance(path, str) or not isinstance(item, dict):
            continue
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            params = _params(spec, item, op)
            description = _str(op, "summary") or _str(op, "description")
            own = _str(op, "operationId")
            tools.append(
                ToolDef(
                    name=_tool_name(method, path, op),
                    description=description,
                    method=method.upper(),
                    path=path,
                    base_url=base,
                    params=params,
                    source="openapi",
                    classification=classify(own_name=own or path, params=params, method=method),
                    input_schema=_input_schema(params),
                    output_schema=_output_schema(spec, op),
                )
            )
    return tools


def _text(value: Any) -> str:
    """Go's %v for the scalars a URL carries: true/false, integers without a decimal point."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float | str):
        return str(value)
    return msgspec.json.encode(value).decode()


def _timed_out(error: str) -> UpstreamResult:
    return UpstreamResult(status_code=504, error=error, timed_out=True)


class OpenApiUpstream:
    """One `openapi:` entry. A spec file that cannot be read stops the start (a config fault); a spec URL that
    does not answer is retried in the background, and its tools appear when it does."""

    def __init__(
        self,
        cfg: OpenApiSource,
        settings: Settings,
        http: Callable[[], httpx.AsyncClient],
        timings: Timings,
        on_change: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.name = cfg.url or cfg.file
        self._settings = settings
        self._http = http
        self._timings = timings
        self._on_change = on_change
        self._tools: list[ToolDef] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._pools: dict[str, HttpPool] = {}  # by base URL
        self._configured: list[tuple[str, str]] | None = None
        self.error = ""
        self.connect_timeout, self.read_timeout = cfg.timeout.seconds(timings.connect_timeout, timings.http_timeout)

    def tools(self) -> list[ToolDef]:
        return self._tools

    def load_file(self) -> None:
        path = self._settings.resolve_path(self.cfg.file)
        where = self._settings.config_path or "(settings)"
        try:
            text = path.read_bytes()
        except OSError as e:
            raise ConfigError(where, "openapi.file", f"{path}: {e.strerror or e}") from None
        try:
            spec = parse_spec(text, str(path))
        except ValueError as e:
            raise ConfigError(where, "openapi.file", str(e)) from None
        self._tools = tools_from_spec(spec, self.cfg.backend_url)

    async def _fetch(self) -> None:
        resp = await self._http().get(self.cfg.url, timeout=self._timings.http_timeout)
        resp.raise_for_status()
        spec = parse_spec(resp.content, self.cfg.url)
        self._tools = tools_from_spec(spec, self.cfg.backend_url, spec_url=str(resp.url))
        self.error = ""
        self._on_change()

    async def start(self) -> None:
        if self.cfg.file:
            self.load_file()
            return
        try:
            await self._fetch()
        except (httpx.HTTPError, ValueError) as e:
            self.error = str(e) or e.__class__.__name__
            log.warning("openapi %s: %s; retrying in the background", self.cfg.url, self.error)
            self._task = asyncio.create_task(self._retry(), name=f"openapi-retry:{self.name}")

    async def _retry(self) -> None:
        wait = self._timings.retry_first
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), wait)
                return
            except TimeoutError:
                pass
            try:
                await self._fetch()
                log.info("openapi %s: loaded after retry", self.cfg.url)
                return
            except (httpx.HTTPError, ValueError) as e:
                self.error = str(e) or e.__class__.__name__
            wait = min(wait * 2, self._timings.retry_max)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            await pool.aclose()

    async def call(self, tool: ToolDef, arguments: dict[str, Any], ctx: CallContext) -> UpstreamResult:
        url = tool.base_url + tool.path
        used: set[str] = set()
        for key, value in arguments.items():
            placeholder = "{" + key + "}"
            if placeholder in url:
                url = url.replace(placeholder, quote(_text(value), safe=""), 1)
                used.add(key)
        body = b""
        if tool.method in _QUERY_METHODS:
            # Sorted like Go's url.Values.Encode; a list repeats its key (OpenAPI's form/explode default).
            query: list[tuple[str, str]] = []
            for key in sorted(arguments):
                if key in used:
                    continue
                value = arguments[key]
                items = value if isinstance(value, list) else [value]
                query.extend((key, _text(v)) for v in items)
            if query:  # path parameters are already escaped above
                url = str(yarl.URL(url, encoded=True).extend_query(query))
        else:
            body = msgspec.json.encode(arguments)
        connect, read = self.connect_timeout, self.read_timeout
        try:
            pool, configured = self._forwarder(tool.base_url)
            traceparent = ctx.traceparent or f"00-{ctx.trace_id}-{secrets.token_hex(8)}-01"
            own = [("Content-Type", "application/json"), ("X-Trace-Id", ctx.trace_id), ("Traceparent", traceparent)]
            head = pool.head(tool.method, url, [*configured, *own])
            # Redirects are not followed (one could hand the arguments to another origin). `read` bounds the
            # wait for the answer's head; connect + read bounds the whole call (a backend that trickles). A
            # small answer arrives with its head: no second timer for it.
            deadline = asyncio.get_running_loop().time() + connect + read
            resp = await pool.request(head, body, method=tool.method, read_timeout=read)
            try:
                if resp.buffered():
                    answer = await resp.read()
                else:
                    async with asyncio.timeout_at(deadline):
                        answer = await resp.read()
            finally:
                resp.close()
            status = resp.status
        except HttpTimeout:
            where = yarl.URL(url, encoded=True).origin()
            return _timed_out(f"upstream connect timed out after {format_span(connect)} ({where})")
        except TimeoutError:  # no answer in time, or not all of it
            return _timed_out(f"upstream timed out after {format_span(read)} ({tool.method} {tool.path})")
        except (HttpError, OSError, ValueError) as e:
            return UpstreamResult(status_code=502, error=f"backend error: {e or e.__class__.__name__}")
        result: Any
        try:
            result = msgspec.json.decode(answer)
        except msgspec.DecodeError:
            result = answer.decode("utf-8", errors="replace")
        return UpstreamResult(result=result, status_code=status)

    def _forwarder(self, base_url: str) -> tuple[HttpPool, list[tuple[str, str]]]:
        """The keep-alive pool that forwards calls to this base URL, and the configured headers (checked once).
        shared/upstreams/mcp_http.py's client, not aiohttp's or httpx's: a forwarded call is one small request,
        and their layers were the largest part of the mesh's CPU per call outside storage (docs/benchmarks.md)."""
        pool = self._pools.get(base_url)
        if pool is None:
            if self._configured is None:
                own = {"x-trace-id", "traceparent"}  # set per call
                self._configured = [(k, v) for k, v in valid_headers(self.cfg.headers) if k.lower() not in own]
            pool = HttpPool(base_url, connect_timeout=self.connect_timeout, max_idle=_MAX_IDLE)
            self._pools[base_url] = pool
        assert self._configured is not None
        return pool, self._configured
