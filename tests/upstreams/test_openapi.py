from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from flux7.shared.errors import ConfigError
from flux7.shared.upstreams import CallContext, Registry

from .conftest import FAST, TRACE_ID, TRACEPARENT, settings
from .servers.http_backend import Backend, running_backend
from .servers.launch import eventually, free_port


@contextmanager
def serving(body: bytes) -> Iterator[str]:
    """A loopback HTTP server answering every GET with `body`: its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/yaml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/openapi.yaml"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def backend() -> Iterator[Backend]:
    with running_backend() as b:
        yield b


@pytest.fixture
def spec_file(tmp_path: Path, backend: Backend) -> Path:
    path = tmp_path / "pets.json"
    path.write_text(json.dumps(backend.spec()))
    return path


@pytest.fixture
async def pets(registry_of: Any, spec_file: Path, backend: Backend) -> Registry:
    reg: Registry = await registry_of(openapi=[{"file": str(spec_file), "backend_url": backend.url}])
    return reg


def test_operations_are_named_snake_case_operation_id_or_method_and_path(pets: Registry) -> None:
    names = [t.name for t in pets.tools()]
    assert names == [
        "list_pets",
        "create_pet",
        "get_pet_by_id",
        "delete_pet",
        "get_text",
        "get_boom",
        "put_notes_noteId",
        "echo_headers",
    ]
    tool = pets.lookup("get_pet_by_id")
    assert tool is not None
    assert (tool.method, tool.path, tool.source, tool.description) == (
        "GET",
        "/pets/{petId}",
        "openapi",
        "One pet by id",
    )


def test_params_come_from_path_level_query_and_referenced_body_schema(pets: Registry) -> None:
    def params(name: str) -> list[tuple[str, str, str, bool]]:
        tool = pets.lookup(name)
        assert tool is not None
        return [(p.name, p.in_, p.type, p.required) for p in tool.params]

    assert params("list_pets") == [("limit", "query", "integer", False), ("tag", "query", "string", False)]
    assert params("get_pet_by_id") == [("petId", "path", "string", True)]
    assert params("create_pet") == [("name", "body", "string", True), ("age", "body", "integer", False)]
    assert params("get_text") == []


def test_input_schema_and_tools_view_follow_the_contract(pets: Registry) -> None:
    tool = pets.lookup("create_pet")
    assert tool is not None
    assert tool.input_schema == {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "name parameter (body)"},
            "age": {"type": "integer", "description": "age parameter (body)"},
        },
        "required": ["name"],
    }
    view = msgspec.to_builtins(tool.view())
    assert list(view) == [
        "name",
        "description",
        "method",
        "path",
        "base_url",
        "params",
        "source",
        "classification",
    ]
    assert view["params"][0] == {"name": "name", "in": "body", "type": "string", "required": True}
    empty = pets.lookup("get_text")
    assert empty is not None and "params" not in msgspec.to_builtins(empty.view())


def test_http_method_drives_the_classification(pets: Registry) -> None:
    get, post = pets.lookup("list_pets"), pets.lookup("create_pet")
    assert get is not None and post is not None
    assert (get.classification.access, get.classification.family) == ("read", "named")
    assert "HTTP GET" in get.classification.reasons
    assert post.classification.access == "write"
    assert "HTTP POST" in post.classification.reasons


async def test_get_sends_the_other_params_as_query_and_fills_the_path_escaped(
    pets: Registry, backend: Backend, ctx: CallContext
) -> None:
    tool = pets.lookup("get_pet_by_id")
    assert tool is not None
    res = await pets.call(tool, {"petId": "a b/c", "verbose": True}, ctx)
    assert res.status_code == 404 and res.error == ""
    seen = backend.requests[-1]
    assert seen.path == "/pets/a%20b%2Fc"
    assert seen.query == {"verbose": ["true"]}
    ok = await pets.call(tool, {"petId": "1"}, ctx)
    assert (ok.status_code, ok.result) == (200, {"id": 1, "name": "Rex"})


async def test_list_values_repeat_their_query_key(pets: Registry, backend: Backend, ctx: CallContext) -> None:
    tool = pets.lookup("list_pets")
    assert tool is not None
    res = await pets.call(tool, {"limit": 2, "tag": ["a", "b"]}, ctx)
    assert res.status_code == 200
    assert res.result["query"] == {"limit": ["2"], "tag": ["a", "b"]}


async def test_post_and_put_send_the_whole_params_map_as_a_json_body(
    pets: Registry, backend: Backend, ctx: CallContext
) -> None:
    create = pets.lookup("create_pet")
    assert create is not None
    res = await pets.call(create, {"name": "Fido", "age": 3}, ctx)
    assert (res.status_code, res.result) == (201, {"created": {"name": "Fido", "age": 3}})
    assert backend.requests[-1].headers["Content-Type"] == "application/json"
    put = pets.lookup("put_notes_noteId")
    assert put is not None
    res = await pets.call(put, {"noteId": "n1", "text": "hi"}, ctx)
    assert res.result == {"path": "/notes/n1", "body": {"noteId": "n1", "text": "hi"}}


async def test_trace_headers_reach_the_backend(pets: Registry, ctx: CallContext) -> None:
    tool = pets.lookup("echo_headers")
    assert tool is not None
    res = await pets.call(tool, {}, ctx)
    assert res.result == {"x_trace_id": TRACE_ID, "traceparent": TRACEPARENT}


async def test_a_non_json_response_becomes_a_string(pets: Registry, ctx: CallContext) -> None:
    tool = pets.lookup("get_text")
    assert tool is not None
    res = await pets.call(tool, {}, ctx)
    assert (res.status_code, res.result, res.error) == (200, "hello, plain text", "")


async def test_a_backend_500_is_propagated_as_its_status_with_the_body(pets: Registry, ctx: CallContext) -> None:
    tool = pets.lookup("get_boom")
    assert tool is not None
    res = await pets.call(tool, {}, ctx)
    assert (res.status_code, res.result, res.error) == (500, {"error": "boom"}, "")


async def test_an_unreachable_backend_is_a_502_with_the_error_text(
    registry_of: Any, spec_file: Path, ctx: CallContext
) -> None:
    reg: Registry = await registry_of(
        openapi=[{"file": str(spec_file), "backend_url": f"http://127.0.0.1:{free_port()}"}]
    )
    tool = reg.lookup("list_pets")
    assert tool is not None
    res = await reg.call(tool, {}, ctx)
    assert res.status_code == 502
    assert res.error.startswith("backend error: ")


async def test_a_spec_url_gives_tools_and_its_servers_entry_the_base_url(
    registry_of: Any, backend: Backend, ctx: CallContext
) -> None:
    reg: Registry = await registry_of(openapi=[{"url": f"{backend.url}/openapi.json"}])
    tool = reg.lookup("list_pets")
    assert tool is not None and tool.base_url == backend.url
    res = await reg.call(tool, {"limit": 1}, ctx)
    assert res.status_code == 200


async def test_a_spec_url_down_at_start_is_retried_and_its_tools_then_appear(registry_of: Any) -> None:
    port = free_port()
    reg: Registry = await registry_of(openapi=[{"url": f"http://127.0.0.1:{port}/openapi.json"}])
    changes: list[int] = []
    reg.add_listener(lambda: changes.append(len(reg.tools())))
    assert reg.tools() == []
    with running_backend(port):
        await eventually(lambda: reg.lookup("list_pets"), what="tools from the retried spec URL")
    assert changes and changes[-1] == 8


def test_a_spec_file_that_cannot_be_read_or_parsed_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"openapi\.file"):
        Registry(settings(openapi=[{"file": str(tmp_path / "missing.json")}]), timings=FAST)
    bad = tmp_path / "bad.yaml"
    bad.write_text("openapi: 3.0.0\ninfo: {}\n")
    with pytest.raises(ConfigError, match="no paths found"):
        Registry(settings(openapi=[{"file": str(bad)}]), timings=FAST)


async def test_a_spec_url_serving_yaml_nested_50000_deep_is_an_error_not_a_crash(registry_of: Any) -> None:
    deep = b"openapi: 3.0.0\npaths: {}\nx: " + b"[" * 50_000 + b"]" * 50_000 + b"\n"
    with serving(deep) as url:
        reg: Registry = await registry_of(openapi=[{"url": url}])
        source = reg.openapi[0]
        assert reg.tools() == [] and "(depth): nested deeper than 200 levels" in source.error, source.error


def test_a_spec_file_nested_too_deep_is_a_config_error(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_bytes(b"openapi: 3.0.0\npaths: " + b"{a: " * 50_000 + b"}" * 50_000 + b"\n")
    with pytest.raises(ConfigError, match=r"\(depth\): nested deeper than 200 levels"):
        Registry(settings(openapi=[{"file": str(deep)}]), timings=FAST)


def test_a_yaml_swagger_2_spec_is_read_with_its_host_as_base_url(tmp_path: Path) -> None:
    path = tmp_path / "v2.yaml"
    path.write_text(
        "swagger: '2.0'\nhost: api.example.test\nbasePath: /v1\nschemes: [http]\n"
        "paths:\n  /items/{id}:\n    delete:\n      parameters:\n"
        "        - {name: id, in: path, required: true, type: integer}\n"
        "  /items:\n    post:\n      operationId: addItem\n      parameters:\n"
        "        - name: item\n          in: body\n          schema:\n            type: object\n"
        "            required: [title]\n            properties: {title: {type: string}}\n"
    )
    reg = Registry(settings(openapi=[{"file": str(path)}]), timings=FAST)
    delete = reg.lookup("delete_items_id")
    assert delete is not None and delete.base_url == "http://api.example.test/v1"
    assert [(p.name, p.in_, p.type) for p in delete.params] == [("id", "path", "integer")]
    add = reg.lookup("add_item")
    assert add is not None and [(p.name, p.required) for p in add.params] == [("title", True)]
