"""A strict media-type parser (RFC 9110 8.3.1 and 5.6), as strict as Go's mime.ParseMediaType that Prometheus
uses: `type/subtype *( OWS ";" OWS name=value )`, tokens and quoted strings only, and a parameter named twice
is an error (case-insensitively). Returns (type/subtype, {name: value}) in lower case names."""

from __future__ import annotations

import re

__all__ = ["MediaTypeError", "parse_media_type"]

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t !#-\[\]-~\x80-\xff]|\\[\t !-~\x80-\xff])*"'
_HEAD = re.compile(rf"({_TOKEN})/({_TOKEN})")
_PARAM = re.compile(rf"[ \t]*;[ \t]*({_TOKEN})=({_TOKEN}|{_QUOTED})")


class MediaTypeError(ValueError):
    pass


def parse_media_type(value: str) -> tuple[str, dict[str, str]]:
    head = _HEAD.match(value)
    if head is None:
        raise MediaTypeError(f"no type/subtype in {value!r}")
    params: dict[str, str] = {}
    at = head.end()
    while at < len(value):
        m = _PARAM.match(value, at)
        if m is None:
            if value[at:].strip(" \t") == "":
                break
            raise MediaTypeError(f"bad parameter at {value[at:]!r}")
        name = m.group(1).lower()
        if name in params:
            raise MediaTypeError(f"duplicate parameter {name!r} in {value!r}")
        raw = m.group(2)
        params[name] = re.sub(r"\\(.)", r"\1", raw[1:-1]) if raw.startswith('"') else raw
        at = m.end()
    return f"{head.group(1)}/{head.group(2)}".lower(), params
