"""A fake S3 on loopback, enough for Litestream 0.5: path-style ListObjectsV2, PutObject, GetObject (with Range),
HeadObject, DeleteObject and DeleteObjects, kept in memory. S3 itself is unreachable from tests; this is the real
HTTP API Litestream's AWS SDK client speaks, so the URL, endpoint and credential handling are exercised for real."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape


@dataclass
class FakeS3:
    url: str
    objects: dict[tuple[str, str], bytes] = field(default_factory=dict)
    authorizations: list[str] = field(default_factory=list)

    def replica_url(self, bucket: str, path: str) -> str:
        return f"s3://{bucket}/{path}?endpoint={self.url}&region=us-east-1&forcePathStyle=true"

    def keys(self, bucket: str) -> list[str]:
        return sorted(k for b, k in self.objects if b == bucket)


def _handler(s3: FakeS3) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _where(self) -> tuple[str, str, dict[str, list[str]]]:
            with lock:
                s3.authorizations.append(self.headers.get("authorization", ""))
            u = urlsplit(self.path)
            bucket, _, key = unquote(u.path).lstrip("/").partition("/")
            return bucket, key, parse_qs(u.query, keep_blank_values=True)

        def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("content-type", "application/xml")
            self.send_header("content-length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _body(self) -> bytes:
            n = int(self.headers.get("content-length") or 0)
            return self.rfile.read(n) if n else b""

        def do_GET(self) -> None:
            bucket, key, q = self._where()
            if not key:  # ListObjectsV2, one page
                prefix = q.get("prefix", [""])[0]
                after = q.get("start-after", [""])[0]
                with lock:
                    keys = sorted(k for b, k in s3.objects if b == bucket and k.startswith(prefix) and k > after)
                    sizes = {k: len(s3.objects[(bucket, k)]) for k in keys}
                items = "".join(
                    f"<Contents><Key>{escape(k)}</Key><Size>{sizes[k]}</Size>"
                    '<LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>"e"</ETag></Contents>'
                    for k in keys
                )
                body = (
                    f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>'
                    f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(keys)}</KeyCount><MaxKeys>1000</MaxKeys>"
                    f"<IsTruncated>false</IsTruncated>{items}</ListBucketResult>"
                )
                return self._send(200, body.encode())
            with lock:
                data = s3.objects.get((bucket, key))
            if data is None:
                return self._send(404, b"<Error><Code>NoSuchKey</Code><Message>not found</Message></Error>")
            m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("range") or "")
            if m:
                a, b = int(m.group(1)), int(m.group(2)) if m.group(2) else len(data) - 1
                return self._send(206, data[a : b + 1], {"content-range": f"bytes {a}-{b}/{len(data)}"})
            return self._send(200, data)

        def do_HEAD(self) -> None:
            bucket, key, _ = self._where()
            with lock:
                data = s3.objects.get((bucket, key)) if key else b""
            self._send(404 if data is None else 200)

        def do_PUT(self) -> None:
            bucket, key, _ = self._where()
            data = self._body()
            with lock:
                s3.objects[(bucket, key)] = data
            self._send(200, headers={"etag": f'"{hashlib.md5(data).hexdigest()}"'})

        def do_POST(self) -> None:
            bucket, _, q = self._where()
            if "delete" not in q:
                return self._send(400)
            keys = re.findall(r"<Key>(.*?)</Key>", self._body().decode())
            with lock:
                for k in keys:
                    s3.objects.pop((bucket, k), None)
            deleted = "".join(f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k in keys)
            self._send(200, f"<DeleteResult>{deleted}</DeleteResult>".encode())

        def do_DELETE(self) -> None:
            bucket, key, _ = self._where()
            with lock:
                s3.objects.pop((bucket, key), None)
            self._send(204)

    return Handler


@contextmanager
def running_s3() -> Iterator[FakeS3]:
    s3 = FakeS3(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(s3))
    s3.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield s3
    finally:
        server.shutdown()
        server.server_close()
