"""The committed OpenAPI document of /governance/… is the one the routes produce (regenerate with
`python -m flux7.functions.governance_openapi > docs/openapi/governance.json`)."""

from __future__ import annotations

import json
from pathlib import Path

from flux7.functions import governance
from flux7.functions.governance_openapi import document

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi" / "governance.json"


def test_the_committed_document_matches_the_routes() -> None:
    assert json.loads(DOC.read_text()) == json.loads(json.dumps(document()))


def test_every_route_and_json_body_is_documented() -> None:
    doc = document()
    for handler in governance.ROUTES:
        for path in handler.paths:
            assert path.replace(":str", "") in doc["paths"], path
    replay = doc["paths"]["/governance/replay"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert replay == {"$ref": "#/components/schemas/ReplayBody"}
    assert set(doc["components"]["schemas"]["ReplayBody"]["properties"]) == {"files", "draft", "days"}
    assert doc["security"] == [{"admin": []}]
