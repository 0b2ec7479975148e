"""Wire vocabulary: message decoding, version negotiation, the stateless envelope, and the result texts."""

from __future__ import annotations

import json

import pytest

from flux7.shared.mcp import texts
from flux7.shared.mcp.messages import (
    McpError,
    decode_header_value,
    decode_message,
    encode_header_value,
    modern_envelope,
    negotiate_handshake,
)


def test_decode_tells_requests_notifications_and_responses_apart() -> None:
    assert decode_message(b'{"jsonrpc":"2.0","id":null,"method":"ping"}').has_id  # a null id is still a request
    assert decode_message(b'{"jsonrpc":"2.0","method":"notifications/initialized"}').is_notification
    assert decode_message(b'{"jsonrpc":"2.0","id":3,"result":{}}').is_response
    for bad, code in [(b"{", -32700), (b"[]", -32600), (b'{"id":1}', -32600), (b'{"id":true,"method":"x"}', -32600)]:
        with pytest.raises(McpError) as err:
            decode_message(bad)
        assert err.value.code == code


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        (None, "2024-11-05"),
        ("2026-07-28", "2025-11-25"),
        ("bogus", "2025-11-25"),
    ],
)
def test_handshake_negotiation_echoes_known_revisions(asked: str | None, answered: str) -> None:
    assert negotiate_handshake(asked) == answered


def test_header_values_round_trip_through_the_base64_sentinel() -> None:
    for value in ["echo.echo", "naïve tool", " padded ", "=?base64?eA==?="]:
        assert decode_header_value(encode_header_value(value)) == value
    assert encode_header_value("plain.name") == "plain.name"
    assert decode_header_value("=?base64?not base64?=") is None


def test_the_stateless_envelope_checks_meta_then_headers_then_version() -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    msg = decode_message(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a.b","_meta":'
        + json.dumps(meta).encode()
        + b"}}"
    )
    good = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "a.b"}
    assert modern_envelope(msg, good).protocol_version == "2026-07-28"
    assert modern_envelope(msg, None).protocol_version == "2026-07-28"  # stdio has no headers
    with pytest.raises(McpError) as err:
        modern_envelope(msg, {**good, "mcp-name": "=?base64?" + "YS5j" + "?="})  # "a.c"
    assert err.value.code == -32020


def test_go_indent_matches_json_marshal_indent() -> None:
    value = {"b": 1.0, "a": ["x<y", {"d": True, "c": None}], "e": 2.5, "f": "é&\u2028"}
    assert texts.go_indent(value) == (
        '{\n  "a": [\n    "x\\u003cy",\n    {\n      "c": null,\n      "d": true\n    }\n  ],\n'
        '  "b": 1,\n  "e": 2.5,\n  "f": "é\\u0026\\u2028"\n}'
    )


def test_approval_texts_are_exact() -> None:
    assert texts.approval_denied("bob", "fs.write", "0123456789abcdef") == (
        "Approval denied by bob for fs.write (id: 01234567): do not retry this call."
    )
    required = texts.approval_required("0123456789abcdef", "fs.write", 300)
    assert required.splitlines()[0] == "Approval required (id: 01234567) for fs.write, valid 300s."
    assert "mesh approve 01234567" in required and "POST /approvals/0123456789abcdef/approve" in required
    assert required.endswith("call fs.write again with the same arguments.")
