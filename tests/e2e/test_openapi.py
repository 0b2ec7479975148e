"""The OpenAPI 3.1 document of the REST routes, checked by `openapi-spec-validator`, and fuzzed by schemathesis
against one real `flux7 serve` (granian on loopback, the pets backend behind it, memory and pins on), with and
without the admin token: no server error, no answer outside the document.

Server errors: any 5xx fails, except the ones the contract gives on purpose and the document declares:
502/504 from `/tool/{name}` (the upstream failed or timed out: the gateway's report of someone else's fault) and
501 where a feature is off. 503 (the audit trail cannot be written) is not excused: the trail here is a healthy
SQLite file, so a 503 would be a bug."""

from __future__ import annotations

import contextlib
import copy
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from openapi_spec_validator import OpenAPIV31SpecValidator
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from flux7.shared.json_depth import MAX_JSON_DEPTH
from tests.support.http import wait_until
from tests.support.mesh import pets_mesh_config
from tests.support.server import REPO, running_server
from tests.upstreams.servers.http_backend import running_backend

pytestmark = pytest.mark.served

ADMIN = {"Authorization": "Bearer adm1n"}
AGENT = {"Authorization": "Bearer agent:claude"}
DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels"

POLICY = """
name: agents
agent: "*"
rules:
  - tools: ["list_pets", "get_pet_by_id", "get_text", "get_boom"]
    action: allow
  - tools: ["delete_pet"]
    action: human_approval
  - tools: ["*"]
    action: deny
"""

# 5xx the contract answers on purpose (see the module docstring); anything else is a server error.
DELIBERATE = {("POST", "/tool/{name}"): {502, 504}}
FEATURE_OFF = 501

# The contract's REST routes (CONTRACT 1.6, 2.1): each must be in the document.
CONTRACT_OPERATIONS = {
    ("POST", "/tool/{name}"),
    ("POST", "/decide"),
    ("GET", "/tools"),
    ("GET", "/mcp-servers"),
    ("GET", "/health"),
    ("GET", "/version"),
    ("POST", "/mcp"),
    ("DELETE", "/mcp"),
    ("GET", "/traces"),
    ("GET", "/traces/verify"),
    ("GET", "/traces/{trace_id}/why"),
    ("GET", "/otel-traces"),
    ("GET", "/sessions"),
    ("GET", "/sessions/{session_id}"),
    ("GET", "/approvals"),
    ("GET", "/approvals/{approval_id}"),
    ("POST", "/approvals/{approval_id}/approve"),
    ("POST", "/approvals/{approval_id}/deny"),
    ("GET", "/approvals/precedents"),
    ("POST", "/approvals/precedents/forget"),
    ("GET", "/approvals/settings"),
    ("PUT", "/approvals/settings"),
    ("GET", "/grants"),
    ("POST", "/grants"),
    ("DELETE", "/grants/{grant_id}"),
    ("GET", "/policies"),
    ("PUT", "/policies/{agent}/tools/{tool}"),
    ("GET", "/policy-files"),
    ("GET", "/policy-files/{name}"),
    ("PUT", "/policy-files/{name}"),
    ("GET", "/tools/decisions"),
    ("GET", "/tools/pins"),
    ("POST", "/tools/pins/accept"),
    ("GET", "/halts"),
    ("POST", "/halts"),
    ("POST", "/halts/{halt_id}/resume"),
    ("GET", "/metrics"),
    ("GET", "/tokens"),
    ("POST", "/tokens"),
    ("DELETE", "/tokens/{ref}"),
    ("GET", "/.well-known/oauth-protected-resource"),
    ("POST", "/rpc"),
    ("GET", "/healthz"),
    ("POST", "/memory/snapshot_reminder"),
    ("GET", "/memory/chain"),
}
# Routes with their own answer shapes; every other route's 4xx/5xx JSON body is `{"error": "..."}`. OAuth's protocol
# endpoints answer OAuth errors (RFC 6749 section 5.2: `{"error": "<code>", "error_description": "..."}`).
OAUTH_PROTOCOL = {"/oauth/register", "/oauth/authorize", "/oauth/token", "/oauth/revoke"}
OWN_SHAPES = {"/tool/{name}", "/decide", "/mcp", "/rpc", *OAUTH_PROTOCOL}
# flux7 as the OAuth authorization server of /mcp: the protocol, the consent and the connections.
OAUTH_OPERATIONS = {
    ("GET", "/.well-known/oauth-authorization-server"),
    ("POST", "/oauth/register"),
    ("GET", "/oauth/authorize"),
    ("POST", "/oauth/token"),
    ("POST", "/oauth/revoke"),
    ("GET", "/oauth/requests/{request_id}"),
    ("POST", "/oauth/requests/{request_id}/approve"),
    ("POST", "/oauth/requests/{request_id}/deny"),
    ("GET", "/oauth/tokens"),
    ("DELETE", "/oauth/tokens/{ref}"),
}
ERROR_REF = "#/components/schemas/ErrorBody"


@dataclass
class Served:
    url: str
    doc: dict[str, Any]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, module_database_url: str) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("openapi")
    with running_backend() as backend:
        config = pets_mesh_config(
            tmp,
            backend,
            POLICY,
            approval_timeout=600,
            memory="{enabled: true, hybrid: false, token: m3m}",
            trace_file=True,
            extra="pin_tools: true" + (f"\ndatabase: {module_database_url}" if module_database_url else ""),
        )
        with running_server(config) as server:
            # One call waiting on a human for the whole run, so the approval routes answer a real approval
            # (the fuzzer may resolve it: a generated id can be a unique prefix of its id).
            waiting = threading.Thread(target=_blocked_call, args=(server.url,), daemon=True)
            waiting.start()
            wait_until(lambda: _pending(server.url), timeout=30)
            doc = httpx.get(f"{server.url}/schema/openapi.json", timeout=30, trust_env=False).json()
            yield Served(server.url, doc)


def _blocked_call(url: str) -> None:
    with contextlib.suppress(httpx.HTTPError):  # ends when the approval is resolved or the server stops
        httpx.post(f"{url}/tool/delete_pet", json={"params": {"petId": 7}}, headers=AGENT, timeout=700)


def _pending(url: str) -> bool:
    return bool(httpx.get(f"{url}/approvals", headers=ADMIN, trust_env=False).json())


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in {"get", "put", "post", "delete", "patch"}:
                yield method.upper(), path, op


def test_the_document_is_a_valid_openapi_3_1_document(served: Served) -> None:
    doc = served.doc
    assert doc["openapi"] == "3.1.0"
    OpenAPIV31SpecValidator(doc).validate()  # raises on any violation of the 3.1 schema and its rules
    as_yaml = httpx.get(f"{served.url}/schema/openapi.yaml", timeout=30, trust_env=False)
    assert as_yaml.status_code == 200 and yaml.safe_load(as_yaml.text) == doc


def test_every_rest_route_of_the_contract_is_documented(served: Served) -> None:
    documented = {(m, p) for m, p, _ in operations(served.doc)}
    assert documented >= CONTRACT_OPERATIONS, CONTRACT_OPERATIONS - documented
    assert documented >= OAUTH_OPERATIONS, OAUTH_OPERATIONS - documented
    # non-REST transports stay out: the console's files, the deprecated SSE stream, the docs themselves
    assert not {p for _, p in documented if p.startswith(("/console", "/schema", "/sse", "/messages"))}


def test_every_operation_states_its_bodies_errors_and_credential(served: Served) -> None:
    doc = served.doc
    schemes = doc["components"]["securitySchemes"]
    assert schemes["agent"] == schemes["agent"] | {"type": "http", "scheme": "bearer"}
    assert schemes["admin"] == schemes["admin"] | {"type": "http", "scheme": "bearer"}
    reads_body = {("POST", "/tool/{name}"), ("POST", "/decide"), ("POST", "/grants"), ("PUT", "/policy-files/{name}")}
    for method, path, op in operations(doc):
        where = f"{method} {path}"
        ok = [c for c in op["responses"] if c.startswith("2") or c in {"302", "303"}]  # a login answers a redirect
        assert ok, where
        for code, answer in op["responses"].items():
            if code in {"202", "204", "302", "303"}:
                continue
            assert answer.get("content"), f"{where} {code} has no body schema"
            if code[0] in "45" and path not in OWN_SHAPES and "application/json" in answer["content"]:
                assert answer["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}, f"{where} {code}"
        if (method, path) in reads_body:
            assert op["requestBody"]["content"]["application/json"]["schema"]["type"] == "object", where
        security = op.get("security")
        assert security, f"{where} states no security requirement"
        control = path.startswith(("/traces", "/otel", "/sessions", "/approvals", "/grants", "/halts", "/polic"))
        if control or path in {"/metrics", "/tokens", "/tools/decisions", "/tools/pins"}:
            assert security == [{"admin": []}], where
        if path.startswith(("/oauth/requests", "/oauth/tokens", "/oauth/clients")):  # the consent and connections
            assert security == [{"admin": []}], where
        if path in OAUTH_PROTOCOL:  # a client proves itself by what it sends: its registration, PKCE, tokens
            assert security == [{}], where
    assert doc["components"]["schemas"]["ErrorBody"]["required"] == ["error"]


def test_the_docs_page_loads_nothing_from_elsewhere(served: Served) -> None:
    page = httpx.get(f"{served.url}/schema", timeout=30, trust_env=False)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<script" not in page.text and "https://" not in page.text
    assert "openapi.json" in page.text and "/tool/{name}" in page.text


# --- the fuzz run ---


@dataclass
class Run:
    base: str
    headers: dict[str, str]
    cases: int = 0
    failures: list[str] = field(default_factory=list)


def _excused(method: str, path: str, status: int, op: dict[str, Any]) -> bool:
    if status == FEATURE_OFF and str(FEATURE_OFF) in op["responses"]:
        return True
    return status in DELIBERATE.get((method, path), set())


def _check(run: Run, case: Any, response: Any) -> None:
    run.cases += 1
    op = case.operation
    method, path = op.method.upper(), op.path
    raw = op.definition.raw
    where = f"{method} {path} -> {response.status_code}: {case.as_curl_command(base_url=run.base)}"
    if response.status_code >= 500 and not _excused(method, path, response.status_code, raw):
        run.failures.append(f"server error {where}\n{response.text[:300]}")
        return
    try:
        case.validate_response(response, checks=[response_schema_conformance, status_code_conformance])
    except Exception as e:  # schemathesis raises a group of check failures
        run.failures.append(f"{type(e).__name__} {where}\n{str(e)[:600]}")


def fuzz_operation(operation: Any, run: Run, mode: GenerationMode, budget: int, **fixed: Any) -> None:
    """`budget` generated cases of one operation (`fixed`: parts held constant, such as a real tool's name)."""

    @settings(
        max_examples=budget,
        derandomize=True,  # the same cases on every run
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode, **fixed))
    def one(case: Any) -> None:
        if run.headers:
            case.headers = {**(case.headers or {}), **run.headers}
        response = case.call(base_url=run.base, timeout=30)
        _check(run, case, response)

    try:
        one()
    except Exception as e:  # a mode with nothing to generate (no parameters to break)
        if "unsatisfiable" not in f"{type(e).__name__} {e}".lower():
            run.failures.append(f"{operation.method.upper()} {operation.path} {mode}: {e!r}"[:600])


def fuzz(schema: Any, run: Run, positive: int, negative: int) -> None:
    for result in schema.get_all_operations():
        operation = result.ok()
        fuzz_operation(operation, run, GenerationMode.POSITIVE, positive)
        fuzz_operation(operation, run, GenerationMode.NEGATIVE, negative)


@pytest.mark.timeout(600)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(served: Served) -> None:
    schema = schemathesis.openapi.from_url(f"{served.url}/schema/openapi.json")
    with_admin = Run(served.url, ADMIN)
    without = Run(served.url, {})
    fuzz(schema, with_admin, positive=36, negative=18)
    fuzz(schema, without, positive=14, negative=8)
    # Real tools with generated arguments, as an agent: the pipeline and the forwarding to the backend (allowed,
    # denied, a backend that fails) meet arbitrary JSON, unicode and headers.
    agent = Run(served.url, AGENT)
    tool_call = schema["/tool/{name}"]["POST"]
    for tool in ("list_pets", "get_pet_by_id", "create_pet", "get_boom", "get_text"):
        fuzz_operation(tool_call, agent, GenerationMode.POSITIVE, 40, path_parameters={"name": tool})
        fuzz_operation(tool_call, agent, GenerationMode.NEGATIVE, 10, path_parameters={"name": tool})
    failures = with_admin.failures + without.failures + agent.failures
    print(f"schemathesis: {with_admin.cases} cases with the admin token, {without.cases} without, {agent.cases} tools")
    assert not failures, f"{len(failures)} failures:\n" + "\n\n".join(failures[:15])
    assert with_admin.cases + without.cases >= 2000, (with_admin.cases, without.cases)
    assert agent.cases >= 200


# --- the explicit examples: JSON nested 100,000 deep on every JSON entry point, HEAD on every GET ---


def _documented(
    served: Served, method: str, path: str, response: httpx.Response, doc: dict[str, Any] | None = None
) -> None:
    """The answer is one the document gives for that operation (status and body schema)."""
    schema = schemathesis.openapi.from_dict(doc or served.doc)
    operation = schema[path][method]
    names = re.findall(r"{(\w+)}", path)
    case = operation.Case(path_parameters=dict(zip(names, names, strict=True)))
    case.validate_response(response, checks=[response_schema_conformance, status_code_conformance])


def test_the_checks_catch_an_answer_outside_the_document(served: Served) -> None:
    """What the fuzz run relies on: real answers checked against a document that gets them wrong fail."""
    health = httpx.get(f"{served.url}/health", trust_env=False)
    traces = httpx.get(f"{served.url}/traces", trust_env=False)  # no admin token: 401
    _documented(served, "GET", "/health", health)
    _documented(served, "GET", "/traces", traces)
    wrong_body = copy.deepcopy(served.doc)
    wrong_body["components"]["schemas"]["Health"]["required"] = ["missing"]
    with pytest.raises(FailureGroup):
        _documented(served, "GET", "/health", health, doc=wrong_body)
    wrong_status = copy.deepcopy(served.doc)
    del wrong_status["paths"]["/traces"]["get"]["responses"]["401"]
    with pytest.raises(FailureGroup):
        _documented(served, "GET", "/traces", traces, doc=wrong_status)


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["array", "object"])
def test_json_nested_100000_deep_is_a_documented_400_or_parse_error(served: Served, body: bytes) -> None:
    json_headers = {"Content-Type": "application/json"}
    tool = httpx.post(f"{served.url}/tool/name", content=body, headers={**AGENT, **json_headers})
    assert tool.status_code == 400 and tool.json()["error"] == f"invalid JSON body: {TOO_DEEP}"
    _documented(served, "POST", "/tool/{name}", tool)
    decide = httpx.post(f"{served.url}/decide", content=body, headers={**AGENT, **json_headers})
    assert (decide.status_code, decide.json()) == (400, {"error": f"invalid JSON body: {TOO_DEEP}"})
    _documented(served, "POST", "/decide", decide)
    rpc = httpx.post(f"{served.url}/rpc", content=body, headers={"Authorization": "Bearer m3m", **json_headers})
    assert rpc.status_code == 200 and rpc.json()["error"]["code"] == -32700
    assert TOO_DEEP in rpc.json()["error"]["message"]
    _documented(served, "POST", "/rpc", rpc)
    mcp_headers = {**AGENT, **json_headers, "Accept": "application/json, text/event-stream"}
    mcp = httpx.post(f"{served.url}/mcp", content=body, headers=mcp_headers)
    assert mcp.status_code == 400 and mcp.json()["error"]["code"] == -32700
    assert TOO_DEEP in mcp.json()["error"]["message"]
    _documented(served, "POST", "/mcp", mcp)


def test_every_documented_get_answers_head_as_get_without_a_body(served: Served) -> None:
    for method, path, _ in operations(served.doc):
        if method != "GET":
            continue
        url = served.url + path.replace("{", "").replace("}", "")
        get = httpx.get(url, headers=ADMIN, timeout=30, trust_env=False)
        head = httpx.head(url, headers=ADMIN, timeout=30, trust_env=False)
        assert head.status_code == get.status_code, path
        assert head.content == b"", path
        assert head.headers.get("content-type") == get.headers.get("content-type"), path
        _documented(served, "GET", path, get)
    assert json.loads(httpx.get(f"{served.url}/schema/openapi.json", trust_env=False).content) == served.doc
    assert httpx.head(f"{served.url}/schema/openapi.json", trust_env=False).status_code == 200


_DOCUMENT = """
import os, sys, tempfile
from litestar.testing import TestClient
from flux7.functions.app import create_app
from flux7.shared.mesh import Mesh
from flux7.shared.settings import load_settings
os.chdir(tempfile.mkdtemp())
with TestClient(create_app(Mesh(load_settings(None, env={}, storage_path="flux7.db")))) as client:
    sys.stdout.buffer.write(client.get("/schema/openapi.json").content)
"""


def test_the_document_is_the_same_bytes_in_every_process() -> None:
    """Workers and restarts serve one document: nothing in it may follow the order of a set, which changes with
    the process's hash seed (the two paths of the RFC 9728 route once did: seeds 5 and 7 swapped them)."""
    documents = {
        subprocess.run(
            [sys.executable, "-c", _DOCUMENT],
            env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
            capture_output=True,
            check=True,
        ).stdout
        for seed in ("0", "5", "7")
    }
    assert len(documents) == 1
    assert json.loads(documents.pop())["openapi"].startswith("3.1")
