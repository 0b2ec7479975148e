"""Ranking for memory search, as pure functions over what the index and the vector store return.

API (the memory core's search calls these; nothing here touches SQLite or a model):

- `natural_query(text) -> str`: CONTRACT 2.3 natural mode, an FTS5 `a OR b* OR ...` expression.
- `rrf(rankings, k=60, weights=None) -> [(key, score)]`: reciprocal rank fusion, best first.
- `neighbour_keys(key, radius) -> [key]`: the keys at +-radius in a `<prefix><digits>` sequence
  (`conv-26.session_1.t005` -> `...t004`, `...t006`), same zero padding.
- `thread_of(key) -> str | None`: the sequence prefix a key belongs to (`conv-26.session_1.t`), or None.
- `stemmed_query(text) -> str`: natural mode with light suffix stripping (`painting` -> `paint*`), plus
  `date_phrases(text)`: the dates the text names as FTS5 phrases (`"31 july 2023"`, `"2023 07 31"`).
- `speaker_of(text) -> str | None`: the speaker of a transcript line (`[8 May 2023] Caroline: ...`), lower-cased.
- `hybrid_search(query, limit, lexical, dense, weights=HybridWeights(), *, match=None, texts=None) -> [(key, score)]`:
  the improved hybrid ranking (score fusion, speaker match, neighbour expansion, thread aggregation, a
  session-spread head). `lexical(match, n)` runs an FTS5 MATCH expression and returns up to n `(key, score)`,
  higher better; `dense` has `search(query, k)` and `similarities(query, keys)` (VectorIndex, restricted to the
  caller's filters); `texts(keys)` returns the text of each key the caller may see.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "STOP_WORDS",
    "DenseSearch",
    "HybridWeights",
    "date_phrases",
    "hybrid_search",
    "natural_query",
    "neighbour_keys",
    "rrf",
    "speaker_of",
    "stemmed_query",
    "thread_of",
]

Ranked = list[tuple[str, float]]
Lexical = Callable[[str, int], Ranked]
Texts = Callable[[list[str]], Mapping[str, str]]

_STOP_WORDS_TEXT = """
a about above after again against all am an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours out over own same she should so some such than that the their theirs them then there these they this
those through to too under until up very was we were what when where which while who whom why will with would you
your yours
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_KEY_SEQUENCE = re.compile(r"^(.*\.[a-zA-Z]+)(\d+)$")
_WORD = re.compile(r"[a-z0-9]+")
# A transcript line: an optional `[date]` prefix, then one or two capitalised words and a colon.
_SPEAKER = re.compile(r"^(?:\[[^\]\n]{1,40}\]\s*)?([A-Z][\w'-]*(?: [A-Z][\w'-]*)?):\s")


class DenseSearch(Protocol):
    def search(self, query: str, k: int) -> Ranked: ...

    def similarities(self, query: str, keys: list[str]) -> dict[str, float]: ...


def natural_query(text: str) -> str:
    """CONTRACT 2.3 natural mode: stop words and short tokens out, `word*` for 4+ letters, at most 12, OR-joined."""
    tokens: list[str] = []
    for token in _WORD.findall(text.lower()):
        if token in STOP_WORDS or len(token) < 3 or token in tokens:
            continue
        tokens.append(token)
    if not tokens:
        return text
    return " OR ".join(t + "*" if len(t) >= 4 else t for t in tokens[:12])


def rrf(rankings: Sequence[Sequence[str]], k: int = 60, weights: Sequence[float] | None = None) -> Ranked:
    """Reciprocal rank fusion: sum of weight / (k + rank) over the rankings a key appears in, best first."""
    scores: dict[str, float] = defaultdict(float)
    for i, ranking in enumerate(rankings):
        w = 1.0 if weights is None else weights[i]
        for rank, key in enumerate(ranking, start=1):
            scores[key] += w / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def thread_of(key: str) -> str | None:
    m = _KEY_SEQUENCE.match(key)
    return m.group(1) if m else None


def neighbour_keys(key: str, radius: int = 1) -> list[str]:
    m = _KEY_SEQUENCE.match(key)
    if not m or radius <= 0:
        return []
    prefix, digits = m.group(1), m.group(2)
    n = int(digits)
    return [f"{prefix}{n + d:0{len(digits)}d}" for d in range(-radius, radius + 1) if d != 0 and n + d >= 0]


@dataclass(frozen=True)
class HybridWeights:
    """How `hybrid_search` mixes its signals; the defaults are the ones docs/design/retrieval.md measures."""

    lexical: float = 0.7  # share of the BM25 score (scaled to the best hit); the rest is the cosine's
    previous: float = 0.3  # a memory inherits this share of the score of the one before it in its thread
    following: float = 0.1  # ... and of the one after it
    thread: float = 0.5  # plus this share of the best score in its thread
    speaker: float = 0.5  # own score x (1 + this) when the memory's speaker is named in the query
    diversify: int = 5  # the first positions are picked session-aware ...
    repeat_penalty: float = 0.2  # ... each earlier pick from the same thread costs this share of the best score
    candidates: int = 100  # how deep each retriever is read
    # A memory that only the cosine found must reach this similarity to be a result at all, so a query about
    # nothing in memory finds nothing (docs/design/retrieval.md, "Relevance floor"; tuned for the local MiniLM).
    min_similarity: float = 0.0


_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_ORDINAL = r"(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?({_MONTHS}),?\s+(\d{{4}})\b")
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTHS})\s+(\d{{1,2}}){_ORDINAL},?\s*(\d{{4}})\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b({_MONTHS}),?\s+(\d{{4}})\b")
_MONTH_NAMES = _MONTHS.split("|")


def date_phrases(text: str) -> list[str]:
    """FTS5 phrases for the dates a question names, as memories write them.

    `on 31 July, 2023`, `July 31, 2023`, `31st of July 2023` and `2023-07-31` each give `"31 july 2023"` and
    `"2023 07 31"`; a month and year alone (`in November 2022`) give `"november 2022"`. Natural mode drops
    tokens under three characters, so without this the day of a date is lost and every memory of that month
    matches equally.
    """
    lowered = text.lower()
    days: list[tuple[int, int, int]] = []
    for day, month, year in _DAY_MONTH_YEAR.findall(lowered):
        days.append((int(year), _MONTH_NAMES.index(month) + 1, int(day)))
    for month, day, year in _MONTH_DAY_YEAR.findall(lowered):
        days.append((int(year), _MONTH_NAMES.index(month) + 1, int(day)))
    for year, month, day in _ISO_DATE.findall(lowered):
        if 1 <= int(month) <= 12:
            days.append((int(year), int(month), int(day)))
    phrases: list[str] = []
    for year, month, day in dict.fromkeys(days):
        if 1 <= day <= 31:
            phrases += [f'"{day} {_MONTH_NAMES[month - 1]} {year}"', f'"{year} {month:02d} {day:02d}"']
    if not phrases:
        phrases = [f'"{month} {year}"' for month, year in dict.fromkeys(_MONTH_YEAR.findall(lowered))]
    return phrases


def stemmed_query(text: str, max_terms: int = 12) -> str:
    """Natural mode with light suffix stripping, so `painting` also finds `painted` and `paints` (`paint*`),
    and the dates the text names as phrases (`date_phrases`)."""
    phrases = date_phrases(text)
    terms: list[str] = []
    for token in _WORD.findall(text.lower()):
        if token in STOP_WORDS or len(token) < 3:
            continue
        term = _stem(token)
        if term not in terms:
            terms.append(term)
    if not terms and not phrases:
        return text
    return " OR ".join(phrases + [t + "*" if len(t) >= 4 else t for t in terms[:max_terms]])


def _stem(token: str) -> str:
    for suffix in ("ies", "ing", "ed", "es", "s", "ly"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 4:
            return token[: -len(suffix)]
    return token


def speaker_of(text: str) -> str | None:
    """The speaker of a transcript line, `[8 May 2023] Caroline: ...` or `Caroline: ...`, lower-cased; else None."""
    m = _SPEAKER.match(text)
    return m.group(1).lower() if m else None


def hybrid_search(
    query: str,
    limit: int,
    lexical: Lexical,
    dense: DenseSearch | None,
    weights: HybridWeights = HybridWeights(),
    *,
    match: str | None = None,
    texts: Texts | None = None,
) -> Ranked:
    """BM25 and cosine fused by score, smoothed along each key's thread, boosted by the thread's best hit,
    with the first `weights.diversify` positions spread over threads.

    1. Candidates: the top `weights.candidates` of each retriever (BM25 on `match`, by default
       `stemmed_query(query)`; cosine on the query text).
    2. Own score: `lexical * bm25 / best_bm25 + (1 - lexical) * cosine` min-max scaled over the cosine top list,
       times `1 + speaker` when the memory is a transcript line whose speaker the query names (a question
       about Melanie is answered by what Melanie said, not by what was said to her).
    3. Neighbour expansion: the keys at +-1 in a thread join the candidates (their cosine is looked up), and every
       key adds `previous` / `following` times its neighbours' own scores: a reply often holds the answer to
       the turn before it, and neither matches the question alone.
    4. Thread aggregation: each key adds `thread` times the best smoothed score in its thread.
    5. Session-aware head: the first `diversify` positions are picked greedily by score (scaled to the best)
       minus `repeat_penalty` per earlier pick from the same thread, so a question whose evidence spans
       sessions sees each of them; the positions after keep the best remaining keys in score order.
    `texts(keys)` gives the text of each key the caller may see (keys it leaves out are never ranked, which
    keeps the caller's filters for neighbour keys too); without it, keys come only from what the retrievers
    return and there is no speaker signal. Without `dense`, the same steps run on BM25 alone.
    The scores returned are the fused scores of step 4; the order is step 5's.
    """
    if limit <= 0:
        return []
    lex = lexical(stemmed_query(query) if match is None else match, weights.candidates)
    best_lex = max((s for _, s in lex), default=0.0)
    lex_score = {k: s / best_lex for k, s in lex} if best_lex > 0 else {}
    share = weights.lexical if dense is not None else 1.0
    cosines: dict[str, float] = {}
    if dense is not None:
        cosines = dict(dense.search(query, weights.candidates))
    hi = max(cosines.values(), default=0.0)
    lo = min(cosines.values(), default=0.0)
    floor = weights.min_similarity
    known = set(lex_score) | {k for k, c in cosines.items() if c >= floor}
    around: dict[str, list[str]] = {}  # each key's +-1 neighbours, parsed once

    def near(key: str) -> list[str]:
        found = around.get(key)
        if found is None:
            found = around[key] = neighbour_keys(key)
        return found

    # The neighbours join the candidates; their own neighbours (a second ring) are not read: on the LoCoMo
    # split they changed no result, and at 100k entries they were half of the per-query work.
    ring1 = {n for k in known for n in near(k)} - known
    if dense is not None and ring1:
        cosines.update(dense.similarities(query, sorted(ring1)))
    present = set(lex_score) | set(cosines)  # keys that exist and pass the caller's filters
    named: dict[str, bool] = {}
    if texts is not None:
        values = texts(sorted(present))
        present &= set(values)
        words = set(_WORD.findall(query.lower()))
        for key in present:
            who = speaker_of(values[key])
            named[key] = who is not None and set(_WORD.findall(who)) <= words

    def own(key: str) -> float:
        cos = cosines.get(key)
        scaled = 0.0 if cos is None else (1.0 if hi <= lo else max(0.0, (cos - lo) / (hi - lo)))
        score = share * lex_score.get(key, 0.0) + (1.0 - share) * scaled
        return score * (1.0 + weights.speaker) if named.get(key) else score

    base = {k: own(k) for k in present}
    candidates = (known | ring1) & present
    smoothed: dict[str, float] = {}
    for key in candidates:
        score = base[key]
        pair = near(key)
        if len(pair) == 2:
            score += weights.previous * base.get(pair[0], 0.0) + weights.following * base.get(pair[1], 0.0)
        elif len(pair) == 1:  # the first of a thread (number 0) has only a following key
            score += weights.following * base.get(pair[0], 0.0)
        smoothed[key] = score
    threads = {key: thread_of(key) for key in smoothed}
    best_in_thread: dict[str, float] = defaultdict(float)
    for key, score in smoothed.items():
        thread = threads[key]
        if thread is not None:
            best_in_thread[thread] = max(best_in_thread[thread], score)
    final = {k: s + weights.thread * best_in_thread.get(threads[k] or "", 0.0) for k, s in smoothed.items()}
    ranked = sorted(final.items(), key=lambda kv: (-kv[1], kv[0]))
    return _spread_head(ranked, limit, weights.diversify, weights.repeat_penalty)


def _spread_head(ranked: Ranked, limit: int, head: int, penalty: float) -> Ranked:
    """Greedy MMR over threads for the first `head` positions; the rest in score order."""
    head = min(head, limit, len(ranked))
    if head <= 1 or penalty <= 0 or ranked[0][1] <= 0:
        return ranked[:limit]
    top = ranked[0][1]
    rest = list(ranked)
    picked: Ranked = []
    seen: dict[str, int] = defaultdict(int)
    while len(picked) < head:
        best_i, best_value = 0, float("-inf")
        for i, (key, score) in enumerate(rest):
            if score / top <= best_value:  # sorted by score: nothing further on can beat it
                break
            value = score / top - penalty * seen[thread_of(key) or key]
            if value > best_value:
                best_i, best_value = i, value
        key, score = rest.pop(best_i)
        picked.append((key, score))
        seen[thread_of(key) or key] += 1
    return picked + rest[: limit - head]
