"""An ASGI scope's headers as the dict the hot paths (functions/hotpath.py, functions/mcp_hotpath.py) hand on:
lower-case names, latin-1 text, the first of repeated headers (as Litestar's Headers.get answers)."""

from __future__ import annotations

from typing import Any

__all__ = ["header_dict"]

# The decoded, lower-cased text of the header names seen: a governed call sends the same few names every time,
# and a lookup is one step where decode-then-lower is two function calls per header (issue 19). Bounded: the
# names are the client's to choose.
_NAMES: dict[bytes, str] = {}
_NAMES_MAX = 512


def header_dict(raw: Any) -> dict[str, str]:
    names = _NAMES
    headers: dict[str, str] = {}
    for key, value in raw:
        try:
            name = names[key]
        except KeyError:
            name = key.decode("latin-1").lower()
            if len(names) >= _NAMES_MAX:
                names.clear()
            names[bytes(key)] = name
        if name not in headers:
            headers[name] = value.decode("latin-1")
    return headers
