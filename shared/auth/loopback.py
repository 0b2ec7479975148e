"""Whether an address is this machine's: what the open-loopback trust mode and the bind checks ask."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback", "is_loopback_bind"]


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def is_loopback_bind(host: str) -> bool:
    return host == "localhost" or is_loopback(host)
