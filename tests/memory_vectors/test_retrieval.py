from __future__ import annotations

from flux7.shared.memory.retrieval import (
    HybridWeights,
    date_phrases,
    hybrid_search,
    natural_query,
    neighbour_keys,
    rrf,
    speaker_of,
    stemmed_query,
    thread_of,
)
from flux7.shared.store.db import sqlite3

Ranked = list[tuple[str, float]]
FUSION_ONLY = HybridWeights(speaker=0.0, repeat_penalty=0.0)


class Dense:
    """Fixed cosine scores standing in for a VectorIndex restricted to the caller's filters."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    def search(self, query: str, k: int) -> Ranked:
        return sorted(self.scores.items(), key=lambda kv: -kv[1])[:k]

    def similarities(self, query: str, keys: list[str]) -> dict[str, float]:
        return {k: self.scores[k] for k in keys if k in self.scores}


def lexical_of(hits: Ranked) -> tuple[list[str], object]:
    seen: list[str] = []

    def lexical(match: str, n: int) -> Ranked:
        seen.append(match)
        return hits[:n]

    return seen, lexical


def test_natural_query_follows_the_contract() -> None:
    assert natural_query("What did Caroline research about adoption?") == "caroline* OR research* OR adoption*"
    assert natural_query("is it ok?") == "is it ok?"  # nothing left: the query is used unchanged
    many = " ".join(f"word{i:02d}" for i in range(20))
    assert natural_query(many).count(" OR ") == 11  # at most 12 terms


def test_stemmed_query_strips_suffixes_to_a_prefix() -> None:
    assert stemmed_query("When did Melanie go painting and camping?") == "melanie* OR paint* OR camp*"
    assert stemmed_query("activities studies") == "activit* OR stud*"
    assert stemmed_query("red bed") == "red OR bed"  # too short to strip


def test_date_phrases_read_the_forms_a_question_names_a_date_in() -> None:
    full = ['"31 july 2023"', '"2023 07 31"']
    assert date_phrases("What did Maria do on 31 July, 2023?") == full
    assert date_phrases("What happened on July 31, 2023?") == full
    assert date_phrases("the 31st of July 2023") == full
    assert date_phrases("entries of 2023-07-31") == full
    assert date_phrases("What did Tim learn in August 2023?") == ['"august 2023"']  # no day: month and year
    assert date_phrases("on 31 July, 2023 and in May 2024") == full  # a full date makes the month alone moot
    assert date_phrases("in 2023-13-01") == []  # not a date
    assert date_phrases("on 45 July 2023") == ['"july 2023"']  # no such day: the month and year stand
    assert date_phrases("What did Melanie paint?") == []


def test_stemmed_query_puts_named_dates_first_as_phrases() -> None:
    assert stemmed_query("What did Nate cook on 9 November, 2022?") == (
        '"9 november 2022" OR "2022 11 09" OR nate* OR cook* OR november* OR 2022*'
    )


def test_a_named_date_finds_the_memory_written_that_day_over_the_rest_of_the_month() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(key UNINDEXED, body)")
    rows = [(f"m.s{day}.t1", f"[{day} July 2023] Maria: volunteering at the shelter again") for day in range(1, 32)]
    conn.executemany("INSERT INTO t VALUES (?, ?)", rows)

    def lexical(match: str, n: int) -> Ranked:
        found = conn.execute("SELECT key, bm25(t) FROM t WHERE t MATCH ? ORDER BY 2 LIMIT ?", (match, n))
        return [(key, -score) for key, score in found]

    ranked = hybrid_search("Where did Maria volunteer on 17 July, 2023?", 3, lexical, None, FUSION_ONLY)
    assert ranked[0][0] == "m.s17.t1"
    assert ranked[0][1] > ranked[1][1]


def test_rrf_sums_reciprocal_ranks_with_weights() -> None:
    fused = rrf([["a", "b"], ["b", "c"]])
    assert [k for k, _ in fused] == ["b", "a", "c"]
    assert abs(fused[0][1] - (1 / 62 + 1 / 61)) < 1e-12
    weighted = rrf([["a", "b"], ["b", "c"]], weights=[1.0, 0.0])
    assert [k for k, _ in weighted][:2] == ["a", "b"]


def test_neighbour_keys_keep_zero_padding_and_stop_at_zero() -> None:
    assert neighbour_keys("conv-26.session_1.t005") == ["conv-26.session_1.t004", "conv-26.session_1.t006"]
    assert neighbour_keys("conv-26.session_1.t000") == ["conv-26.session_1.t001"]
    assert neighbour_keys("notes.t09", 2) == ["notes.t07", "notes.t08", "notes.t10", "notes.t11"]
    assert neighbour_keys("plain-key") == []
    assert thread_of("conv-26.session_1.t005") == "conv-26.session_1.t"
    assert thread_of("plain-key") is None


def test_a_reply_is_found_through_the_turn_it_answers() -> None:
    # s.t002 asks the question's words; s.t003 answers without them; x.t001 is a weak unrelated match.
    seen, lexical = lexical_of([("s.t002", 8.0), ("x.t001", 4.0)])
    dense = Dense({"s.t001": 0.10, "s.t002": 0.60, "s.t003": 0.35, "x.t001": 0.30, "x.t002": 0.05})
    keys = [k for k, _ in hybrid_search("favourite game", 3, lexical, dense, FUSION_ONLY)]  # type: ignore[arg-type]
    assert keys == ["s.t002", "s.t003", "x.t001"]
    assert seen == ["favourite* OR game*"]


def test_hybrid_search_returns_only_keys_the_retrievers_can_see() -> None:
    # t004 is a neighbour of a hit, but the dense side (the caller's filter) does not know it: never returned.
    _, lexical = lexical_of([("s.t003", 5.0)])
    dense = Dense({"s.t003": 0.5, "s.t002": 0.2})
    keys = {k for k, _ in hybrid_search("q", 10, lexical, dense)}  # type: ignore[arg-type]
    assert keys == {"s.t003", "s.t002"}


def test_without_dense_the_ranking_is_lexical_with_thread_context() -> None:
    _, lexical = lexical_of([("a.t001", 4.0), ("b.t001", 3.0), ("a.t002", 2.9)])
    results = hybrid_search("q", 3, lexical, None, FUSION_ONLY)  # type: ignore[arg-type]
    assert [k for k, _ in results] == ["a.t001", "a.t002", "b.t001"]  # a.t002 rides on its thread's best hit
    flat = hybrid_search("q", 3, lexical, None, HybridWeights(previous=0, following=0, thread=0, repeat_penalty=0))  # type: ignore[arg-type]
    assert [k for k, _ in flat] == ["a.t001", "b.t001", "a.t002"]
    assert hybrid_search("q", 0, lexical, None) == []  # type: ignore[arg-type]


def test_speaker_of_reads_a_transcript_line_with_or_without_a_date() -> None:
    assert speaker_of("[8 May 2023] Caroline: I went to a support group") == "caroline"
    assert speaker_of("Mary Ann: see you") == "mary ann"
    assert speaker_of("[8 May 2023] no speaker here") is None
    assert speaker_of("deploy: done") is None  # a lower-case label is not a name
    assert speaker_of("Caroline said: hi") is None  # three words before the colon: not a speaker tag


def test_what_the_named_speaker_said_outranks_what_was_said_to_them() -> None:
    values = {
        "c.s1.t001": "[1 May 2023] Caroline: Melanie, how is the pottery going?",
        "c.s2.t004": "[9 May 2023] Melanie: my pottery class is going great",
    }
    _, lexical = lexical_of([("c.s1.t001", 5.0), ("c.s2.t004", 4.0)])

    def texts(keys: list[str]) -> dict[str, str]:
        return {k: values[k] for k in keys if k in values}

    named = hybrid_search("What does Melanie do at pottery?", 2, lexical, None, texts=texts)  # type: ignore[arg-type]
    assert [k for k, _ in named] == ["c.s2.t004", "c.s1.t001"]
    unnamed = hybrid_search("pottery", 2, lexical, None, texts=texts)  # type: ignore[arg-type]
    assert [k for k, _ in unnamed] == ["c.s1.t001", "c.s2.t004"]


def test_the_head_is_spread_over_threads_and_the_tail_keeps_score_order() -> None:
    # Thread a holds the three best hits; b and c each hold one weaker hit.
    hits = [("a.t001", 10.0), ("a.t003", 9.5), ("a.t005", 9.0), ("b.t001", 7.5), ("c.t001", 6.0)]
    weights = HybridWeights(previous=0, following=0, thread=0, repeat_penalty=0.5, diversify=3)
    _, lexical = lexical_of(hits)
    keys = [k for k, _ in hybrid_search("q", 5, lexical, None, weights)]  # type: ignore[arg-type]
    assert keys == ["a.t001", "b.t001", "c.t001", "a.t003", "a.t005"]
    # A mild penalty lets a much stronger second hit of the same thread stay ahead of a weak other thread.
    mild = HybridWeights(previous=0, following=0, thread=0, repeat_penalty=0.1, diversify=3)
    keys = [k for k, _ in hybrid_search("q", 5, lexical, None, mild)]  # type: ignore[arg-type]
    assert keys == ["a.t001", "a.t003", "b.t001", "a.t005", "c.t001"]
    off = HybridWeights(previous=0, following=0, thread=0, repeat_penalty=0.0)
    assert [k for k, _ in hybrid_search("q", 5, lexical, None, off)] == [k for k, _ in hits]  # type: ignore[arg-type]


def test_keys_the_caller_may_not_see_are_never_ranked_even_as_neighbours() -> None:
    # The dense side scores s.t004 (a neighbour of the hit), but texts() says the caller cannot see it.
    _, lexical = lexical_of([("s.t003", 5.0), ("s.t005", 1.0)])
    dense = Dense({"s.t003": 0.5, "s.t004": 0.9, "s.t005": 0.1})

    def texts(keys: list[str]) -> dict[str, str]:
        return {k: "text" for k in keys if k != "s.t004"}

    keys = {k for k, _ in hybrid_search("q", 10, lexical, dense, texts=texts)}  # type: ignore[arg-type]
    assert keys == {"s.t003", "s.t005"}


def test_an_explicit_match_expression_replaces_the_stemmed_query() -> None:
    seen, lexical = lexical_of([("a", 1.0)])
    hybrid_search("painting", 1, lexical, None, match='"painting"')  # type: ignore[arg-type]
    assert seen == ['"painting"']
