"""The console's files at /console (functions/console_assets.py) and the conditional GETs of the lists a console
tab polls (functions/conditional.py), in process over the committed console-spa/dist."""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from flux7.functions.console_assets import ConsoleFiles, accepted
from tests.functions.conftest import ADMIN, AGENT
from tests.support.server import REPO

DIST = REPO / "console-spa" / "dist"
IMMUTABLE = "public, max-age=31536000, immutable"


def assets() -> list[str]:
    index = (DIST / "index.html").read_text()
    return re.findall(r'(?:src|href)="\./(assets/[^"]+)"', index)


def test_the_build_writes_a_gzip_and_a_brotli_copy_of_each_text_asset() -> None:
    texts = [p for p in (DIST / "assets").iterdir() if p.suffix in (".js", ".css")]
    assert len(texts) >= 3  # the entry chunk, the stylesheet, cytoscape's chunk
    plain_total = gz_total = 0
    for p in texts:
        gz, br = p.with_name(p.name + ".gz"), p.with_name(p.name + ".br")
        assert gzip.decompress(gz.read_bytes()) == p.read_bytes(), p.name
        assert 0 < len(br.read_bytes()) < len(gz.read_bytes()) < p.stat().st_size, p.name
        plain_total, gz_total = plain_total + p.stat().st_size, gz_total + len(gz.read_bytes())
    # a small lazy chunk compresses ~2.5x, the big ones ~3.5x: the whole build at least 3x
    assert gz_total < plain_total / 3, (gz_total, plain_total)


def test_hashed_assets_are_sent_compressed_as_the_client_asks_and_cached_for_a_year(client: TestClient[Any]) -> None:
    for name in assets():
        plain = (DIST / name).read_bytes()
        for accept, coding, suffix in (
            ("gzip, deflate, br, zstd", "br", ".br"),
            ("gzip", "gzip", ".gz"),
            ("", None, ""),
        ):
            r = client.get(f"/console/{name}", headers={"Accept-Encoding": accept})
            assert r.status_code == 200, (name, accept)
            assert r.headers.get("content-encoding") == coding, (name, accept)
            assert r.headers["cache-control"] == IMMUTABLE and r.headers["vary"] == "Accept-Encoding"
            assert r.headers["etag"] and r.headers["last-modified"]
            # httpx decodes gzip itself; brotli it cannot (no brotli module here), so the raw bytes are compared
            wire = r.content if coding != "br" else r.read()
            expected = plain if coding != "br" else (DIST / (name + suffix)).read_bytes()
            assert wire == expected, (name, accept)
        assert (
            int(client.get(f"/console/{name}", headers={"Accept-Encoding": "br"}).headers["content-length"])
            < len(plain) / 3
        )
    # q=0 refuses a coding; `*` takes the ones not named
    assert (
        accepted("br;q=0, gzip") == {"gzip"} and accepted("*") == {"br", "gzip"} and accepted("br;q=0, *") == {"gzip"}
    )
    assert accepted("identity") == {"identity"} and accepted("gzip;q=0.5, br;q=1.0") == {"gzip", "br"}


def test_index_html_is_revalidated_and_a_matching_conditional_request_is_a_304(client: TestClient[Any]) -> None:
    first = client.get("/console/", headers={"Accept-Encoding": "gzip, br"})
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/html")
    assert first.headers["cache-control"] == "no-cache"
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    assert first.content == (DIST / "index.html").read_bytes()
    for headers in ({"If-None-Match": etag}, {"If-None-Match": f'"other", W/{etag}'}, {"If-Modified-Since": modified}):
        again = client.get("/console/", headers=headers)
        assert again.status_code == 304 and again.content == b"", headers
        assert again.headers["etag"] == etag and again.headers["cache-control"] == "no-cache"
    # a validator of another version gets the file; If-None-Match wins over If-Modified-Since
    changed = client.get("/console/", headers={"If-None-Match": '"stale"', "If-Modified-Since": modified})
    assert changed.status_code == 200 and changed.content == first.content
    assert client.get("/console/index.html", headers={"If-None-Match": etag}).status_code == 304
    assert client.get("/console").status_code == 200  # index.html sends a /console visitor on to /console/
    # an asset revalidates too (a browser asks only after a year, or on a forced reload)
    asset = client.get(f"/console/{assets()[0]}", headers={"Accept-Encoding": "br"})
    tag = asset.headers["etag"]
    assert (
        client.get(f"/console/{assets()[0]}", headers={"Accept-Encoding": "br", "If-None-Match": tag}).status_code
        == 304
    )
    # the same file compressed another way is another representation with its own validator
    plain_tag = client.get(f"/console/{assets()[0]}").headers["etag"]
    assert plain_tag != tag and client.get(f"/console/{assets()[0]}", headers={"If-None-Match": tag}).status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/console/nope.js",
        "/console/assets/",
        "/console/.hidden",
        "/console/assets/../../pyproject.toml",
        "/console/%2e%2e/x",
    ],
)
def test_nothing_outside_the_built_files_is_served(client: TestClient[Any], path: str) -> None:
    assert client.get(path).status_code == 404


def test_compressed_copies_are_not_resources_of_their_own(tmp_path: Path) -> None:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<!doctype html>")
    (tmp_path / "assets" / "app-abcdEF12.js").write_text("x" * 4000)
    (tmp_path / "assets" / "app-abcdEF12.js.gz").write_bytes(gzip.compress(b"x" * 4000))
    files = ConsoleFiles(tmp_path)
    assert files.file("assets/app-abcdEF12.js.gz") is None and files.file("../index.html") is None
    found = files.file("assets/app-abcdEF12.js")
    assert found is not None and set(found[1].paths) == {"identity", "gzip"}
    assert found[1].bodies == {}  # nothing is held before someone asks for it
    assert found[1].body("gzip") == (tmp_path / "assets" / "app-abcdEF12.js.gz").read_bytes()
    # a rebuilt file is read again (the server keeps files only as long as they do not change)
    (tmp_path / "index.html").write_text("<!doctype html><title>new</title>")
    new = files.file("")
    assert new is not None and new[1].body("identity").endswith(b"<title>new</title>")


def test_the_polled_lists_answer_304_while_they_do_not_change(client: TestClient[Any]) -> None:
    for path, query in (
        ("/health", {}),
        ("/approvals", {"status": "pending"}),
        ("/traces", {"limit": "100"}),
        ("/halts", {}),
    ):
        first = client.get(path, params=query, headers=ADMIN)
        assert first.status_code == 200, path
        etag = first.headers["etag"]
        assert first.headers["cache-control"] == "no-cache, private", path
        again = client.get(path, params=query, headers={**ADMIN, "If-None-Match": etag})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag, path
        assert "content-length" not in again.headers or again.headers["content-length"] == "0"
    # a new call changes the traces, so the old validator gets the new list
    etag = client.get("/traces", params={"limit": "100"}, headers=ADMIN).headers["etag"]
    assert client.post("/tool/list_pets", json={"params": {}}, headers=AGENT).status_code == 200
    fresh = client.get("/traces", params={"limit": "100"}, headers={**ADMIN, "If-None-Match": etag})
    assert fresh.status_code == 200 and fresh.headers["etag"] != etag and fresh.json()[0]["tool"] == "list_pets"
    # the credential is still checked first: a validator does not open the list to a wrong token
    refused = client.get("/traces", headers={"Authorization": "Bearer wrong", "If-None-Match": fresh.headers["etag"]})
    assert refused.status_code == 401 and "etag" not in refused.headers
    # HEAD answers as GET, validator included
    head = client.head("/traces", params={"limit": "100"}, headers=ADMIN)
    assert head.status_code == 200 and head.headers["etag"] == fresh.headers["etag"] and head.content == b""
