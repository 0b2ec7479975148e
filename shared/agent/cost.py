"""What the model's tokens cost: prices per model (US dollars per million input and output tokens), the
defaults below for common models, overridden or added to by `[prices."<model>"] input = 3.0, output = 15.0` in
agent.toml. A model is priced by its longest listed prefix (`claude-sonnet-4-5-20250929` by `claude-sonnet-4-5`);
Ollama's models cost nothing; a model without a price has no cost shown (the tokens are)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_PRICES", "Prices"]

# Public list prices, USD per million tokens (input, output), as published by the providers in 2025.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.4),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1-nano": (0.1, 0.4),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
    "o3": (2.0, 8.0),
    "o4-mini": (1.1, 4.4),
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.3, 2.5),
}


class Prices:
    def __init__(self, configured: Mapping[str, tuple[float, float]] | None = None) -> None:
        self.table = {**DEFAULT_PRICES, **(configured or {})}

    def of(self, provider: str, model: str) -> tuple[float, float] | None:
        """(input, output) per million tokens; None when unknown."""
        if provider == "ollama":
            return (0.0, 0.0)
        name = model.rsplit("/", 1)[-1]  # openrouter-style `anthropic/claude-...`
        best = max((p for p in self.table if name.startswith(p)), key=len, default=None)
        return self.table[best] if best is not None else None

    def cost(self, provider: str, model: str, usage: Mapping[str, int]) -> float | None:
        price = self.of(provider, model)
        if price is None:
            return None
        return (usage.get("input_tokens", 0) * price[0] + usage.get("output_tokens", 0) * price[1]) / 1_000_000
