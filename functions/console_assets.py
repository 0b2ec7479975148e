"""The console's built files at /console (docs/console.md, Serving).

The build writes a brotli and a gzip copy beside each compressible file (console-spa/vite.config.ts), so
nothing is compressed per request: the copy the client's Accept-Encoding prefers is sent, with
`Vary: Accept-Encoding`. Files under `assets/` have content hashes in their names and never change, so browsers
keep them a year without asking again; everything else (index.html) is revalidated on each load: an ETag and a
Last-Modified, and a conditional request that still matches is answered 304 without a body."""

from __future__ import annotations

import hashlib
import mimetypes
import re
from dataclasses import dataclass, field
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import Any

from litestar import Request, Response, get
from litestar.params import FromPath

from flux7.shared.errors import NotFound

__all__ = ["ConsoleFiles", "accepted", "console_routes"]

IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
# vite's output names: `<name>-<8 base64url characters>.<ext>` under assets/.
_HASHED = re.compile(r"^assets/[^/]+-[A-Za-z0-9_-]{8}\.[A-Za-z0-9]+$")
# Suffix of the precompressed copy, by content coding, in the order preferred when the client takes both.
_CODINGS = (("br", ".br"), ("gzip", ".gz"))
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}  # Litestar adds the charset


@dataclass
class _File:
    signature: tuple[int, int]  # the identity file's (mtime_ns, size) when read
    media_type: str
    cache_control: str
    last_modified: str
    modified: float
    paths: dict[str, Path] = field(default_factory=dict)  # content coding ("identity", "br", "gzip") -> its file
    etags: dict[str, str] = field(default_factory=dict)
    bodies: dict[str, bytes] = field(default_factory=dict)  # read on first use: most clients only ever ask for br

    def body(self, coding: str) -> bytes:
        found = self.bodies.get(coding)
        if found is None:
            found = self.bodies[coding] = self.paths[coding].read_bytes()
        return found


def accepted(accept_encoding: str) -> set[str]:
    """The content codings an Accept-Encoding header takes (q > 0; `*` stands for those not named). Identity is
    always the fallback: a client refusing it gets it anyway rather than a 406 for the console's own files."""
    taken: set[str] = set()
    named: set[str] = set()
    star = False
    for part in accept_encoding.split(","):
        name, _, params = part.partition(";")
        name = name.strip().lower()
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if name == "*":
            star = q > 0
        elif name:
            named.add(name)
            if q > 0:
                taken.add(name)
    if star:
        taken |= {coding for coding, _ in _CODINGS} - named
    return taken


def _matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 13.1.2: weak comparison, `*` matches any current representation."""
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or etag.removeprefix("W/") in {t.removeprefix("W/") for t in tags}


class ConsoleFiles:
    """The files of one `dist/` folder, read once and kept (with their compressed copies) until they change."""

    def __init__(self, dist: Path) -> None:
        self.dist = dist.resolve()
        self._files: dict[str, _File] = {}

    def _resolve(self, rel: str) -> Path | None:
        rel = rel.lstrip("/")
        if rel == "" or rel.endswith("/"):
            rel += "index.html"
        parts = rel.split("/")
        if any(p in ("", ".", "..") or p.startswith(".") or "\\" in p for p in parts):
            return None
        if rel.endswith((".br", ".gz")):  # representations of another file, not resources of their own
            return None
        path = self.dist.joinpath(*parts)
        return path if path.is_file() and path.resolve().is_relative_to(self.dist) else None

    def file(self, rel: str) -> tuple[str, _File] | None:
        path = self._resolve(rel)
        if path is None:
            return None
        key = path.relative_to(self.dist).as_posix()
        st = path.stat()
        signature = (st.st_mtime_ns, st.st_size)
        found = self._files.get(key)
        if found is None or found.signature != signature:
            found = self._read(key, path, signature, st.st_mtime)
            self._files[key] = found
        return key, found

    def _read(self, key: str, path: Path, signature: tuple[int, int], modified: float) -> _File:
        media_type = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        f = _File(
            signature=signature,
            media_type=media_type,
            cache_control=IMMUTABLE if _HASHED.match(key) else REVALIDATE,
            last_modified=formatdate(modified, usegmt=True),
            modified=int(modified),
        )
        f.paths["identity"] = path
        for coding, suffix in _CODINGS:
            copy = path.with_name(path.name + suffix)
            if copy.is_file():
                f.paths[coding] = copy
        with path.open("rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()[:20]
        # One strong validator per representation: the same file compressed another way is other bytes.
        f.etags = {coding: f'"{digest}{"" if coding == "identity" else "-" + coding}"' for coding in f.paths}
        return f

    def answer(self, rel: str, headers: Any) -> Response[bytes]:
        found = self.file(rel)
        if found is None:
            raise NotFound("no such console file")
        _, f = found
        taken = accepted(headers.get("accept-encoding", ""))
        coding = next((c for c, _ in _CODINGS if c in f.paths and c in taken), "identity")
        out = {"Cache-Control": f.cache_control, "ETag": f.etags[coding], "Last-Modified": f.last_modified}
        if len(f.paths) > 1:
            out["Vary"] = "Accept-Encoding"
        if coding != "identity":
            out["Content-Encoding"] = coding
        if self._not_modified(headers, f.etags[coding], f.modified):
            return Response(b"", status_code=304, headers=out, media_type=f.media_type)
        return Response(f.body(coding), headers=out, media_type=f.media_type)

    @staticmethod
    def _not_modified(headers: Any, etag: str, modified: float) -> bool:
        if_none_match = headers.get("if-none-match")
        if if_none_match is not None:  # RFC 9110 13.2.2: If-None-Match wins over If-Modified-Since
            return _matches(if_none_match, etag)
        since = headers.get("if-modified-since")
        if not since:
            return False
        try:
            return int(modified) <= parsedate_to_datetime(since).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False


def console_routes(dist: Path) -> list[Any]:
    """GET /console and /console/{path} over `dist` (HEAD answers as GET: functions/head.py)."""
    files = ConsoleFiles(dist)

    @get("/console", include_in_schema=False, sync_to_thread=False)
    def console_index(request: Request[Any, Any, Any]) -> Response[bytes]:
        return files.answer("", request.headers)

    @get("/console/{path:path}", include_in_schema=False, sync_to_thread=False)
    def console_file(request: Request[Any, Any, Any], path: FromPath[str]) -> Response[bytes]:
        return files.answer(path, request.headers)

    return [console_index, console_file]
