"""The markdown workspace (CONTRACT 2.4) and the chain's canonical text (2.5)."""

from __future__ import annotations

import hashlib

import pytest

from flux7.shared.memory.chain import canonical, go_quote, seal
from flux7.shared.memory.service import MemoryService
from flux7.shared.memory.workspace import Entry, escape_body, format_entry, parse_entries, unescape_body

from .conftest import call

NOW = 1_790_000_000


def test_a_store_entry_is_written_in_the_contract_layout(service: MemoryService) -> None:
    meta = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    service.call_tool(
        "memory_store", {"key": "k", "value": "body", "tags": ["a", "b"], "agent": "x", "ttl": 60}, meta=meta
    )
    call(service, "memory_forget", key="k")
    call(service, "memory_forget", tags=["a", "b"])
    text = (service.store.workspace / "memory" / "2026-09-21.md").read_text()
    first, second, third = [e.hash for e in service.store.entries()]
    assert text == (
        "\n## k\n\n```mem7\nop: store\nagent: x\ntrace: 4bf92f3577b34da6a3ce929d0e0e4736\ntags: a, b\nttl: 60\n"
        f"created: 2026-09-21T14:13:20Z\nupdated: 2026-09-21T14:13:20Z\nhash: {first}\n```\n\nbody\n\n---\n"
        "\n## k\n\n```mem7\nop: delete\ndeleted: 2026-09-21T14:13:20Z\n"
        f"prev: {first}\nhash: {second}\n```\n\n---\n"
        "\n## [delete-tags: a, b]\n\n```mem7\nop: delete_tags\ntags: a, b\ndeleted: 2026-09-21T14:13:20Z\n"
        f"prev: {second}\nhash: {third}\n```\n\n---\n"
    )


@pytest.mark.parametrize(
    "value",
    ["---", "```mem7", "```", "  ---  ", "\\---", "\\\\```", "a\n---\nb", "x\n\\  ---\ny", "\\foo", "ok"],
)
def test_body_escaping_is_reversible_and_never_reads_as_structure(value: str) -> None:
    escaped = escape_body(value)
    assert unescape_body(escaped) == value
    entry = Entry(op="store", entity="k", created=NOW, updated=NOW, body=value)
    (parsed,) = parse_entries(format_entry(entry).encode()).entries
    assert parsed.body == escaped
    assert parsed.value == value


def test_values_round_trip_through_the_file_into_the_index(service: MemoryService) -> None:
    value = "line one\n---\n```mem7\nop: delete\n```\nünïcödé \u2028 end"
    call(service, "memory_store", key="tricky", value=value)
    assert call(service, "memory_recall", key="tricky").startswith(f"## tricky\n{value}\n")
    service.rescan()
    assert call(service, "memory_recall", key="tricky").startswith(f"## tricky\n{value}\n")


def test_the_parser_tolerates_hand_edits() -> None:
    data = (
        b"notes before the first entry\n"
        b"## spaced key  \r\n"
        b"\r\n"
        b"```mem7\r\n"
        b"op : store\r\n"
        b"tags:  a ,, b ,\r\n"
        b"colour: blue\r\n"
        b"ttl: 12abc\r\n"
        b"created: 2026-09-21T16:13:20+02:00\r\n"
        b"updated: not a time\r\n"
        b"```\r\n"
        b"\r\n"
        b"body with CRLF\r\n"
        b"\r\n"
        b"   ---   \r\n"
        b"## torn\n\n```mem7\nop: store\n"
    )
    parsed = parse_entries(data, "memory/x.md")
    (e,) = parsed.entries
    assert (e.entity, e.op, e.tags, e.ttl, e.created, e.updated) == ("spaced key", "store", ["a", "b"], 12, NOW, None)
    assert (e.body, e.line, e.start, e.file) == ("body with CRLF", 2, 0, "memory/x.md")
    assert parsed.torn and data[parsed.rest :].startswith(b"## torn")


def test_go_strconv_quote() -> None:
    assert go_quote("plain") == '"plain"'
    assert go_quote('q"b\\') == '"q\\"b\\\\"'
    assert go_quote("\a\b\f\n\r\t\v") == '"\\a\\b\\f\\n\\r\\t\\v"'
    assert go_quote("\x00\x1b\x7f") == '"\\x00\\x1b\\x7f"'
    assert go_quote("é日本😀") == '"é日本😀"'  # printable non-ASCII stays raw
    assert go_quote("\u0085\u00a0\u200b\u2028\ufeff") == '"\\u0085\\u00a0\\u200b\\u2028\\ufeff"'
    assert go_quote("\U000e0001") == '"\\U000e0001"'
    assert go_quote(b"a\xffb".decode("utf-8", "surrogateescape")) == '"a\\xffb"'


def test_canonical_text_and_seal_are_fixed() -> None:
    e = Entry(op="store", entity="k", agent="a", tags=["x", "y"], ttl=5, created=NOW, updated=NOW, body="v\n\tw")
    text = canonical(e, "ab")
    assert text == (
        'v="mem7-chain-v1"\nprev="ab"\nop="store"\nentity="k"\npredicate=""\nagent="a"\ntrace=""\n'
        'tags="x,y"\nttl="5"\ncreated="2026-09-21T14:13:20Z"\nupdated="2026-09-21T14:13:20Z"\ndeleted=""\n'
        'body="v\\n\\tw"\n'
    )
    assert seal(b"", e, "ab") == hashlib.sha256(text.encode()).hexdigest()
    assert seal(b"key", e, "ab") != seal(b"", e, "ab")
    bitemporal = Entry(op="store", entity="k", created=NOW, updated=NOW, valid_from=NOW - 86400)
    assert canonical(bitemporal, "").endswith('body=""\nvalid_from="2026-09-20T14:13:20Z"\n')
