"""The moments mem7 writes and reads: RFC3339 UTC to the second, and the dates the SDK sends."""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["parse_moment", "parse_rfc3339", "rfc3339"]

_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


def rfc3339(epoch: int) -> str:
    """Go's time.RFC3339 in UTC: `2006-01-02T15:04:05Z`."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> int | None:
    """Epoch seconds (fraction truncated, as Go formats it) of an RFC3339 time; None when it is not one."""
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    zone = m.group(8)
    offset = 0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    return int(moment.timestamp()) - offset


def parse_moment(text: str) -> int | None:
    """A date (midnight UTC) or an RFC3339 time, the forms the SDK sends for valid_*/as_of."""
    m = _DATE.match(text.strip())
    if m:
        try:
            return int(datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=UTC).timestamp())
        except ValueError:
            return None
    return parse_rfc3339(text)
