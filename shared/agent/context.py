"""The context engine: how big the conversation is, and making it smaller before it overflows the model's window.

Counting is an estimate, four characters a token over everything sent (the mesh estimates the same way); the
providers' own counts come back in each turn's usage and are what `/usage` shows. Before each request, when the
count reaches `compact_at` of the window (`fit`), the engine makes the request fit, in this order, stopping as
soon as it does:

1. prunes large tool outputs the model has already read (of earlier prompts and of this one's earlier turns);
2. asks the model for a summary of everything before the current prompt (the task, decisions, files touched,
   open questions) and puts it in their place;
3. summarizes this prompt's own earlier turns into the prompt (one long prompt is compacted too), keeping its
   last turn, whose results the model has not read yet, whole;
4. shortens those newest tool outputs to their head and tail, saying what was cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from flux7.shared.agent.conversation import Message, ToolResult, ToolSpec
from flux7.shared.agent.llm import Chat, TextDelta

__all__ = ["SUMMARY_PROMPT", "Compaction", "ContextEngine", "estimate_tokens"]

SUMMARY_PROMPT = (
    "You compact a coding agent's conversation. Summarize the transcript you are given so the agent can go on "
    "without it. Keep: the user's task and constraints, decisions made and why, files read, created or changed "
    "(with what changed), commands run and their results that still matter, what was refused and why, and open "
    "questions or next steps. Be concise and factual; write it as notes, not as a conversation."
)
_PRUNE_OVER = 2000  # characters: a tool output larger than this is pruned from earlier prompts first
_PRUNED = "[output pruned to save context: {n} characters]"


def estimate_tokens(messages: Sequence[Message], system: str = "", tools: Sequence[ToolSpec] = ()) -> int:
    """Four characters a token over everything sent (a documented estimate, not a tokenizer)."""
    chars = len(system) + sum(len(json.dumps(t.parameters)) + len(t.description) + len(t.name) for t in tools)
    for m in messages:
        chars += len(m.text) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)
        chars += sum(len(r.content) for r in m.results)
    return chars // 4


@dataclass(frozen=True)
class Compaction:
    before: int  # estimated tokens before
    after: int
    pruned: int  # tool outputs pruned
    summarized: int  # messages replaced by the summary
    shortened: int = 0  # the newest tool outputs cut to their head and tail


class ContextEngine:
    def __init__(self, window: int = 128_000, compact_at: float = 0.8) -> None:
        self.window = window
        self.compact_at = compact_at

    @property
    def limit(self) -> int:
        return int(self.window * self.compact_at)

    def over(self, messages: Sequence[Message], system: str, tools: Sequence[ToolSpec]) -> bool:
        return estimate_tokens(messages, system, tools) >= self.limit

    async def compact(
        self,
        chat: Chat,
        messages: list[Message],
        keep_from: int,
        system: str,
        tools: Sequence[ToolSpec],
        *,
        force: bool = False,
    ) -> Compaction | None:
        """Shrink `messages[:keep_from]` in place (what comes from `keep_from` on, the current prompt, stays
        whole). None when there was nothing to do."""
        before = estimate_tokens(messages, system, tools)
        # Nothing before this prompt, or only an earlier summary and its acknowledgement: nothing to gain.
        if keep_from <= 0 or (not force and (before < self.limit or keep_from <= 2)):
            return None
        pruned = 0
        for m in messages[:keep_from]:
            if m.role != "tool":
                continue
            for i, r in enumerate(m.results):
                if len(r.content) > _PRUNE_OVER:
                    m.results[i] = ToolResult(r.call_id, _PRUNED.format(n=len(r.content)), r.is_error)
                    pruned += 1
        if not force and estimate_tokens(messages, system, tools) < self.limit:
            return Compaction(before, estimate_tokens(messages, system, tools), pruned, 0)
        summary = await self._summary(chat, messages[:keep_from])
        replaced = keep_from
        messages[:keep_from] = [
            Message("user", f"Summary of the conversation so far (it was compacted):\n\n{summary}"),
            Message("assistant", "Understood: I will go on from this summary."),
        ]
        return Compaction(before, estimate_tokens(messages, system, tools), pruned, replaced)

    async def fit(
        self, chat: Chat, messages: list[Message], start: int, system: str, tools: Sequence[ToolSpec]
    ) -> tuple[Compaction, int] | None:
        """Make the next request fit under the limit (see the module's docstring). `start` is where the current
        prompt is; returns what was done and where the prompt is now, or None when nothing could be done."""
        before = estimate_tokens(messages, system, tools)
        if before < self.limit:
            return None

        def size() -> int:
            return estimate_tokens(messages, system, tools)

        newest = len(messages) - 1 if messages and messages[-1].role == "tool" else len(messages)
        pruned = 0
        for m in messages[:newest]:  # 1. outputs the model has read already
            for i, r in enumerate(m.results):
                if len(r.content) > _PRUNE_OVER:
                    m.results[i] = ToolResult(r.call_id, _PRUNED.format(n=len(r.content)), r.is_error)
                    pruned += 1
        summarized = 0
        if size() >= self.limit and start > 2:  # 2. everything before this prompt
            summary = await self._summary(chat, messages[:start])
            summarized += start
            messages[:start] = [
                Message("user", f"Summary of the conversation so far (it was compacted):\n\n{summary}"),
                Message("assistant", "Understood: I will go on from this summary."),
            ]
            start = 2
        last_turn = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=start)
        if size() >= self.limit and last_turn > start + 1:  # 3. this prompt's earlier turns
            earlier = messages[start + 1 : last_turn]
            summary = await self._summary(chat, [messages[start], *earlier])
            summarized += len(earlier)
            prompt = messages[start]
            note = f"\n\n[Your work on this request so far, compacted to save context:]\n{summary}"
            messages[start:last_turn] = [Message("user", prompt.text + note)]
        shortened = 0
        if size() >= self.limit and messages and messages[-1].role == "tool":  # 4. the newest outputs
            results = messages[-1].results
            others = size() * 4 - sum(len(r.content) for r in results)
            room = max(400, (self.limit * 4 - others) // max(1, len(results)))
            for i, r in enumerate(results):
                if len(r.content) > room:
                    half = room // 2
                    cut = len(r.content) - 2 * half
                    text = f"{r.content[:half]}\n[... {cut:,} characters cut to fit the context window ...]\n"
                    results[i] = ToolResult(r.call_id, text + r.content[-half:], r.is_error)
                    shortened += 1
        if not (pruned or summarized or shortened):
            return None
        return Compaction(before, size(), pruned, summarized, shortened), start

    async def _summary(self, chat: Chat, old: Sequence[Message]) -> str:
        lines: list[str] = []
        for m in old:
            if m.text:
                lines.append(f"{m.role}: {m.text}")
            lines += [f"assistant called {c.name} {c.arguments}" for c in m.tool_calls]
            lines += [f"tool result{' (error)' if r.is_error else ''}: {r.content[:4000]}" for r in m.results]
        transcript = "\n".join(lines)
        text: list[str] = []
        async for piece in chat.stream(SUMMARY_PROMPT, [Message("user", transcript)], []):
            if isinstance(piece, TextDelta):
                text.append(piece.text)
        return "".join(text).strip() or "(the summary came back empty)"
