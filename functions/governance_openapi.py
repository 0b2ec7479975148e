"""The OpenAPI document of `/governance/…` (docs/openapi/governance.json): Litestar's schema of the routes, with
the JSON bodies they decode by hand added from their msgspec Structs. The server itself serves no OpenAPI
(functions/app.py); tests/governance/test_openapi.py keeps the committed document equal to this one.

    python -m flux7.functions.governance_openapi > docs/openapi/governance.json"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi import OpenAPIConfig

from flux7.functions import governance

__all__ = ["document"]


def document() -> dict[str, Any]:
    app = Litestar(
        route_handlers=governance.ROUTES,
        openapi_config=OpenAPIConfig(
            title="flux7 governance",
            version="1",  # the API's version, not flux7's: a release does not change this document
            description="The governance engine on the control plane (docs/governance.md). Every route needs "
            "the admin token (Authorization: Bearer <token>).",
        ),
    )
    schema: dict[str, Any] = app.openapi_schema.to_schema()
    structs = list(dict.fromkeys(governance.BODIES.values()))
    refs, components = msgspec.json.schema_components(structs, ref_template="#/components/schemas/{name}")
    schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
    for (method, path), struct in governance.BODIES.items():
        operation = schema["paths"][path][method]
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": refs[structs.index(struct)]}},
        }
    schema["security"] = [{"admin": []}]
    schema["components"]["securitySchemes"] = {"admin": {"type": "http", "scheme": "bearer"}}
    return schema


def main() -> None:
    print(json.dumps(document(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
