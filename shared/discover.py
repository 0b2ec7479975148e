"""`mesh7 discover`: connect to the configured upstreams and draft a policy for their tools.

Read tools are drafted as allow, write and unknown tools as human_approval; nothing is drafted as deny, and the
draft is printed, never written: a human reviews it before it governs anything."""

from __future__ import annotations

import argparse
import asyncio
import sys

import yaml

from .errors import ConfigError
from .settings import load_settings
from .upstreams.registry import Registry

__all__ = ["draft_policy", "main"]


def draft_policy(tools: list[tuple[str, str]], agent: str = "*", name: str = "discovered") -> str:
    """A policy YAML from (tool name, access) pairs."""
    reads = sorted(n for n, access in tools if access == "read")
    others = sorted(n for n, access in tools if access != "read")
    rules = []
    if reads:
        rules.append({"tools": reads, "action": "allow"})
    if others:
        rules.append({"tools": others, "action": "human_approval"})
    header = "# Drafted by `mesh7 discover`: reads allowed, writes and unknowns ask a human. Review before use.\n"
    return header + yaml.safe_dump({"name": name, "agent": agent, "rules": rules}, sort_keys=False)


async def _collect(config: str | None) -> list[tuple[str, str]]:
    registry = Registry(load_settings(config))
    await registry.start()
    try:
        return [(t.name, t.classification.access) for t in registry.tools()]
    finally:
        await registry.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mesh7 discover", description=__doc__)
    parser.add_argument("--config", "-c", default=None)
    parser.add_argument("--agent", default="*", help="agent glob for the drafted policy")
    parser.add_argument("--name", default="discovered")
    args = parser.parse_args(argv)
    try:
        tools = asyncio.run(_collect(args.config))
    except ConfigError as e:
        print(f"mesh7: config error: {e}", file=sys.stderr)
        return 2
    if not tools:
        print("mesh7 discover: no tools found in the configured upstreams", file=sys.stderr)
        return 1
    sys.stdout.write(draft_policy(tools, args.agent, args.name))
    return 0
