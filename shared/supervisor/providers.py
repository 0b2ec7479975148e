"""LLM evaluators for sup7: Ollama, the Anthropic Messages API, OpenAI-compatible chat completions, and the
Claude Code callback (a connected MCP session's verdict, see callback.py).

Every HTTP provider gets the same prompt and must answer `DECISION: <APPROVE|DENY|ESCALATE> | CONFIDENCE: <0-1> |
REASONING: …`. Any failure - network, HTTP status, timeout, a reply that does not match - is None, and None
escalates. The callback is a provider that answers with a verdict or times out (None). Several providers form a
chain: the first that answers decides; one that keeps failing is skipped for a while (a circuit breaker), so a dead
endpoint - or a session nobody is watching - does not add its timeout to every approval."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from flux7.shared.openai_compat import openai_path
from flux7.shared.supervisor.config import ProviderConfig

if TYPE_CHECKING:
    from flux7.shared.supervisor.callback import VerdictDesk

__all__ = ["ProviderChain", "Verdict", "build_prompt", "parse_reply"]

log = logging.getLogger("flux7.sup7")

_REPLY = re.compile(
    r"DECISION:\s*(APPROVE|DENY|ESCALATE)\s*\|\s*CONFIDENCE:\s*([0-9]*\.?[0-9]+)\s*\|\s*REASONING:\s*(.+)",
    re.IGNORECASE,
)

_DEFAULT_URLS = {
    "ollama": "http://localhost:11434",
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
}


@dataclass(frozen=True)
class Verdict:
    action: str  # approve | deny | escalate
    confidence: float
    reasoning: str
    source: str = ""


def parse_reply(text: str) -> Verdict | None:
    """The first line that matches the reply format; None when none does or the confidence is outside 0..1."""
    for line in text.splitlines():
        m = _REPLY.search(line)
        if m is None:
            continue
        confidence = float(m.group(2))
        if not 0.0 <= confidence <= 1.0:
            return None
        return Verdict(m.group(1).lower(), confidence, m.group(3).strip())
    return None


def build_prompt(context: dict[str, Any]) -> str:
    shown = {
        "tool": context.get("tool"),
        "agent_id": context.get("agent_id"),
        "params": context.get("params"),
        "policy_rule": context.get("policy_rule"),
        "injection_risk": context.get("injection_risk", False),
        "recent_traces": (context.get("recent_traces") or [])[:5],
        "active_grants": context.get("active_grants") or [],
    }
    return (
        "Evaluate this pending approval request:\n\n```json\n"
        + json.dumps(shown, indent=2, default=str, ensure_ascii=False)
        + "\n```"
    )


class _Provider:
    """One endpoint. `ask` returns the model's text or raises; the chain turns a raise into a failure."""

    def __init__(self, config: ProviderConfig, system_prompt: str) -> None:
        self.config = config
        self.name = config.provider
        self.system_prompt = system_prompt
        self.base = (config.url or _DEFAULT_URLS[config.provider]).rstrip("/")
        self._client = httpx.AsyncClient(timeout=config.timeout)

    async def ask(self, prompt: str) -> str:
        raise NotImplementedError

    async def judge(self, context: dict[str, Any], prompt: str) -> Verdict | None:
        """The verdict, None for a reply that cannot be read; raises on a network or HTTP failure."""
        return parse_reply(await self.ask(prompt))

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        resp = await self._client.post(url, json=body, headers=headers or {})
        if resp.status_code != 200:
            raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
        return resp.json()

    async def aclose(self) -> None:
        await self._client.aclose()


class _Ollama(_Provider):
    async def ask(self, prompt: str) -> str:
        data = await self._post(
            f"{self.base}/api/generate",
            {"model": self.config.model, "prompt": prompt, "system": self.system_prompt, "stream": False},
        )
        return str(data["response"])


class _Anthropic(_Provider):
    async def ask(self, prompt: str) -> str:
        headers = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
        if self.config.api_key:
            headers["x-api-key"] = self.config.api_key
        data = await self._post(
            f"{self.base}/v1/messages",
            {
                "model": self.config.model,
                "max_tokens": 256,
                "system": self.system_prompt,
                "messages": [{"role": "user", "content": prompt}],
            },
            headers,
        )
        return "".join(str(block.get("text", "")) for block in data["content"] if block.get("type") == "text")


class _OpenAI(_Provider):
    async def ask(self, prompt: str) -> str:
        url = self.base + openai_path(self.base, "chat/completions")
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        data = await self._post(
            url,
            {
                "model": self.config.model,
                "messages": [
                    {"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": prompt},
                ],
                "temperature": 0,
            },
            headers,
        )
        return str(data["choices"][0]["message"]["content"])


class _ClaudeCode(_Provider):
    """A connected session's verdict through sup7's MCP tools; no HTTP of its own."""

    def __init__(self, config: ProviderConfig, desk: VerdictDesk) -> None:
        self.config = config
        self.name = config.provider
        self.base = "mcp:sup7_pending"
        self.desk = desk

    async def judge(self, context: dict[str, Any], prompt: str) -> Verdict | None:
        verdict = await self.desk.ask(context, list(context.get("rule_trail") or []))
        if verdict is None:
            raise TimeoutError(f"no verdict within {self.desk.timeout:g}s")
        return verdict

    async def aclose(self) -> None:
        return None


def _idle_detail(p: _Provider) -> str:
    if isinstance(p, _ClaudeCode):
        return f"{len(p.desk.pending())} waiting for a verdict"
    return p.config.model


_KINDS: dict[str, type[_Provider]] = {"ollama": _Ollama, "anthropic": _Anthropic, "openai": _OpenAI}
# HTTP requests in flight to LLM endpoints at once; callback waits are not bounded by it (they cost nothing).
_HTTP_SLOTS = 10


class ProviderChain:
    """Providers tried in order; the first answer (escalate included) decides. None when all fail."""

    def __init__(
        self,
        configs: Sequence[ProviderConfig],
        system_prompt: str,
        *,
        failures: int = 3,
        cooldown: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        desk: VerdictDesk | None = None,
    ) -> None:
        self._providers: list[_Provider] = []
        for c in configs:
            if c.provider == "claude-code":
                if desk is None:
                    raise ValueError("the claude-code provider needs sup7's MCP server (mcp_server.enabled)")
                self._providers.append(_ClaudeCode(c, desk))
            else:
                self._providers.append(_KINDS[c.provider](c, system_prompt))
        self._http_slots = asyncio.Semaphore(_HTTP_SLOTS)
        self._max_failures = max(1, failures)
        self._cooldown = cooldown
        self._clock = clock
        self._failures = [0] * len(self._providers)
        self._open_until = [0.0] * len(self._providers)
        self._detail = [""] * len(self._providers)

    def __bool__(self) -> bool:
        return bool(self._providers)

    @property
    def mode(self) -> str:
        return "chain" if len(self._providers) > 1 else "single"

    async def evaluate(self, context: dict[str, Any]) -> Verdict | None:
        return (await self.evaluate_explained(context))[0]

    async def evaluate_explained(self, context: dict[str, Any]) -> tuple[Verdict | None, str]:
        """The first verdict, or None and what went wrong with each provider ("ollama failed, claude-code ...")."""
        prompt = build_prompt(context)
        passed: list[str] = []
        for i, provider in enumerate(self._providers):
            now = self._clock()
            if self._open_until[i] > now:
                passed.append(f"{provider.name} skipped")
                continue
            verdict: Verdict | None = None
            failure = "failed"
            try:
                if isinstance(provider, _ClaudeCode):
                    verdict = await provider.judge(context, prompt)
                else:
                    async with self._http_slots:
                        verdict = await provider.judge(context, prompt)
                if verdict is None:
                    self._detail[i] = "unreadable reply"
            except Exception as e:
                self._detail[i] = f"{e.__class__.__name__}: {e}"[:200]
                if isinstance(provider, _ClaudeCode) and isinstance(e, TimeoutError):
                    failure = f"gave no verdict within {provider.desk.timeout:g}s"
                log.warning("provider %s failed: %s", provider.name, self._detail[i])
            if verdict is None:
                self._failures[i] += 1
                if self._failures[i] >= self._max_failures:
                    self._open_until[i] = now + self._cooldown
                    self._failures[i] = 0
                passed.append(f"{provider.name} {failure}")
                continue
            self._failures[i] = 0
            self._detail[i] = ""
            label = f"[{provider.name}" + (f", {', '.join(passed)}" if passed else "") + "] "
            return Verdict(verdict.action, verdict.confidence, label + verdict.reasoning, provider.name), ""
        if passed:
            log.warning("every provider failed: %s", ", ".join(passed))
        return None, ", ".join(passed)

    def status(self) -> list[dict[str, Any]]:
        now = self._clock()
        out: list[dict[str, Any]] = []
        for i, p in enumerate(self._providers):
            skipped_for = max(0.0, self._open_until[i] - now)
            state = "skipped" if skipped_for > 0 else ("failing" if self._failures[i] else "ok")
            out.append(
                {
                    "name": p.name,
                    "state": state,
                    "consecutive_failures": self._failures[i],
                    "skipped_for_s": round(skipped_for),
                    "detail": self._detail[i] or _idle_detail(p),
                }
            )
        return out

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"provider": p.name, "model": "" if isinstance(p, _ClaudeCode) else p.config.model, "url": p.base}
            for p in self._providers
        ]

    async def aclose(self) -> None:
        for p in self._providers:
            await p.aclose()
