"""format_timestamp and parse_timestamp remember the last second they saw (shared/tracing/entry.py): the answers
must be those of the plain computation, whatever order the instants come in."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta

from flux7.shared.tracing import TraceEntry, format_timestamp, parse_timestamp
from flux7.shared.tracing.entry import normalised

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9})\d*)?([Zz]|[+-]\d{2}:\d{2})$")


def plain_format(ns: int) -> str:
    seconds, frac = divmod(ns, 1_000_000_000)
    base = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{frac:09d}".rstrip("0") + "Z" if frac else base + "Z"


def plain_parse(text: str) -> int | None:
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    try:
        dt = datetime(year, month, day, hour, minute, min(second, 59), tzinfo=UTC)
    except ValueError:
        return None
    tz = m.group(8)
    offset = 0
    if tz not in ("Z", "z"):
        offset = (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return ((dt - _EPOCH) // timedelta(seconds=1) - offset) * 1_000_000_000 + int((m.group(7) or "0").ljust(9, "0"))


def test_formatting_matches_the_plain_computation_in_any_order() -> None:
    rng = random.Random(19)
    base = 1_700_000_000 * 1_000_000_000
    instants = [base + rng.randrange(0, 3 * 1_000_000_000) for _ in range(300)]  # mostly the same few seconds
    instants += [rng.randrange(0, 4_000_000_000) * 1_000_000_000 + rng.randrange(10**9) for _ in range(300)]
    instants += [base, base + 1, base + 999_999_999, base + 1_000_000_000, 0]
    rng.shuffle(instants)
    for ns in instants + sorted(instants):
        assert format_timestamp(ns) == plain_format(ns)
        assert parse_timestamp(format_timestamp(ns)) == ns


def test_parsing_matches_the_plain_computation_for_offsets_and_bad_dates() -> None:
    texts = [
        "2023-11-14T22:13:20Z",
        "2023-11-14T22:13:20.5Z",
        "2023-11-14T22:13:20.5+02:00",  # the same second text, another offset: another instant
        "2023-11-14T22:13:20.5-05:30",
        "2023-11-14t22:13:20z",
        "2023-11-14 22:13:20.123456789123Z",
        "2023-11-14T22:13:60Z",  # a leap second counts as :59
        "2023-02-30T00:00:00Z",  # no such day
        "2023-02-30T00:00:00.1Z",
        "2023-02-28T00:00:00.1Z",
        "  2023-11-14T22:13:20Z  ",
        "not a time",
        "2023-11-14T22:13:20",
    ]
    for text in texts + texts[::-1]:
        assert parse_timestamp(text) == plain_parse(text), text


def plain_normalised_time(text: str) -> tuple[str, int | None]:
    """What normalise did before its shortcut for canonical text: parse, then write back in Go's form."""
    ns = plain_parse(text) if text else None
    return (plain_format(ns), ns) if ns is not None else ("", None)


def test_normalise_keeps_canonical_text_and_rewrites_everything_else_as_the_plain_computation() -> None:
    # normalised() skips parsing and re-formatting for text already in format_timestamp's form (the hot path's
    # every line); any other text must come out as parse-then-format made it, with the same nanoseconds.
    rng = random.Random(7)
    base = 1_700_000_000 * 1_000_000_000
    canonical = [format_timestamp(base + rng.randrange(0, 5 * 10**9)) for _ in range(200)]
    canonical += [format_timestamp(base), format_timestamp(base + 100_000_000), format_timestamp(base + 1)]
    odd = [
        "2023-11-14T22:13:20.50Z",  # a trailing zero
        "2023-11-14T22:13:20.Z",
        "2023-11-14T22:13:20.1234567891Z",  # past nanoseconds
        "2023-11-14t22:13:20.5Z",
        "2023-11-14 22:13:20.5Z",
        "2023-11-14T22:13:20.5z",
        "2023-11-14T22:13:20.5+02:00",
        "2023-11-14T22:13:60Z",  # a leap second
        "2023-11-14T22:13:60.5Z",
        "2023-02-30T00:00:00.1Z",  # no such day
        "2023-13-01T00:00:00Z",
        " 2023-11-14T22:13:20.5Z",
        "2023-11-14T22:13:20.5Z ",
        "2023-11-14T22:13:20.\u0661Z",  # an Arabic-Indic digit
        "\u0662023-11-14T22:13:20.5Z",
        "0999-01-01T00:00:00.5Z",
        "2023-11-14T22:13:20.+1Z",
        "2023-11-14T22:13:2",
        "not a time at all, Z",
    ]
    for text in canonical + odd:
        entry, ns = normalised(TraceEntry(trace_id="t", timestamp=text))
        want_text, want_ns = plain_normalised_time(text)
        if want_ns is None:  # not a time: the time of recording, in Go's form
            assert parse_timestamp(entry.timestamp) == ns, text
            assert entry.timestamp == plain_format(ns), text
        else:
            assert (entry.timestamp, ns) == (want_text, want_ns), text
        if text in canonical:
            assert entry.timestamp is text  # kept as it came
