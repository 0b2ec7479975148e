"""A small real HTTP backend on loopback with its OpenAPI 3 spec, for tests of every suite.

In a test: `with running_backend() as backend:` gives `backend.url` and `backend.spec()`; `backend.requests`
records what arrived (method, path, query, headers, body). As a process:
`python -m tests.upstreams.servers.http_backend --port N` (the spec is at GET /openapi.json).

Operations (tool names in brackets): GET /pets [list_pets], POST /pets [create_pet], GET /pets/{petId}
[get_pet_by_id], DELETE /pets/{petId} [delete_pet], GET /text [get_text], GET /boom [get_boom, answers 500],
PUT /notes/{noteId} [put_notes_noteId, no operationId], GET /echo-headers [echo_headers]. Off the spec,
GET /hang answers only once `backend.hold` is set (30 s at most): an upstream that hangs mid-call.

Declared success responses: listPets and getPetById answer what their object schemas say (MCP clients get
structuredContent); deletePet's schema says `deleted` is a string while the backend answers a number, a spec
that lies about its backend.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PETS = {"1": {"id": 1, "name": "Rex"}, "2": {"id": 2, "name": "Tom"}}


PET = {
    "type": "object",
    "required": ["id", "name"],
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "tag": {"type": "string", "nullable": True}},
}
PET_LIST = {
    "type": "object",
    "properties": {
        "pets": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}},
        "query": {"type": "object"},
    },
}
DELETED = {"type": "object", "required": ["deleted"], "properties": {"deleted": {"type": "string"}}}


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def spec(base_url: str = "") -> dict[str, Any]:
    pet_id = {"name": "petId", "in": "path", "required": True, "schema": {"type": "string"}}
    doc: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": {"title": "pets", "version": "1.0"},
        "paths": {
            "/pets": {
                "get": {
                    "operationId": "listPets",
                    "summary": "List pets",
                    "responses": {"200": {"description": "pets", "content": _json_schema(PET_LIST)}},
                    "parameters": [
                        {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                        {"name": "tag", "in": "query", "schema": {"type": "string"}},
                    ],
                },
                "post": {
                    "operationId": "createPet",
                    "summary": "Create a pet",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NewPet"}}},
                    },
                },
            },
            "/pets/{petId}": {
                "parameters": [pet_id],
                "get": {
                    "operationId": "getPetById",
                    "description": "One pet by id",
                    "responses": {
                        "200": {"$ref": "#/components/responses/OnePet"},
                        "404": {"description": "no such pet"},
                    },
                },
                "delete": {
                    "operationId": "deletePet",
                    "summary": "Delete a pet",
                    "responses": {"200": {"description": "deleted", "content": _json_schema(DELETED)}},
                },
            },
            "/text": {"get": {"operationId": "getText", "summary": "Plain text"}},
            "/boom": {"get": {"operationId": "getBoom", "summary": "Always fails"}},
            "/notes/{noteId}": {
                "put": {
                    "summary": "Replace a note",
                    "parameters": [{"name": "noteId", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "requestBody": {
                        "content": {"application/json": {"schema": {"type": "object", "properties": {"text": {}}}}}
                    },
                }
            },
            "/echo-headers": {"get": {"operationId": "echo_headers", "summary": "The trace headers it got"}},
        },
        "components": {
            "responses": {
                "OnePet": {"description": "a pet", "content": _json_schema({"$ref": "#/components/schemas/Pet"})}
            },
            "schemas": {
                "Pet": PET,
                "NewPet": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                },
            },
        },
    }
    if base_url:
        doc["servers"] = [{"url": base_url}]
    return doc


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Backend:
    url: str
    requests: list[Seen] = field(default_factory=list)
    hold: threading.Event = field(default_factory=threading.Event)

    def spec(self, with_server: bool = False) -> dict[str, Any]:
        return spec(self.url if with_server else "")


def _handler(backend: Backend) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like a real backend
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _answer(self, status: int, payload: Any, ctype: str = "application/json") -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _handle(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            backend.requests.append(
                Seen(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body)
            )
            route = (self.command, parts.path)
            if parts.path == "/openapi.json" and self.command == "GET":
                return self._answer(200, spec(backend.url))
            if route == ("GET", "/pets"):
                return self._answer(200, {"pets": list(PETS.values()), "query": parse_qs(parts.query)})
            if route == ("POST", "/pets"):
                return self._answer(201, {"created": body})
            if self.command in ("GET", "DELETE") and parts.path.startswith("/pets/"):
                pet = PETS.get(parts.path.removeprefix("/pets/"))
                if pet is None:
                    return self._answer(404, {"error": "no such pet", "path": parts.path})
                return self._answer(200, pet if self.command == "GET" else {"deleted": pet["id"]})
            if route == ("GET", "/text"):
                return self._answer(200, b"hello, plain text", "text/plain")
            if route == ("GET", "/boom"):
                return self._answer(500, {"error": "boom"})
            if self.command == "PUT" and parts.path.startswith("/notes/"):
                return self._answer(200, {"path": parts.path, "body": body})
            if route == ("GET", "/hang"):
                backend.hold.wait(30)
                return self._answer(200, {"released": backend.hold.is_set()})
            if route == ("GET", "/echo-headers"):
                h = self.headers
                return self._answer(200, {"x_trace_id": h.get("X-Trace-Id"), "traceparent": h.get("Traceparent")})
            return self._answer(404, {"error": "not found"})

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

    return Handler


@contextmanager
def running_backend(port: int = 0) -> Iterator[Backend]:
    backend = Backend(url="")
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(backend))
    server.daemon_threads = True
    backend.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield backend
    finally:
        backend.hold.set()  # a handler still hanging lets go, so the shutdown does not wait 30 s
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8080)
    port = parser.parse_args().port
    with running_backend(port) as backend:
        print(backend.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
