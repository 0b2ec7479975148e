"""`mesh7 discover`: connect to the configured upstreams and draft a policy for their tools.

Read tools are drafted as allow, write and unknown tools as human_approval; nothing is drafted as deny, and the
draft is printed, never written: a human reviews it before it governs anything."""

from __future__ import annotations

import asyncio

import click
import yaml

from flux7.shared.cli.config_choice import announce, load_chosen
from flux7.shared.cli.kit import CONTEXT, Fail, run, runtime
from flux7.shared.errors import ConfigError
from flux7.shared.settings import Settings, choose_config
from flux7.shared.upstreams.registry import Registry

__all__ = ["discover", "draft_policy", "main"]


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


async def _collect(settings: Settings) -> list[tuple[str, str]]:
    registry = Registry(settings)
    await registry.start()
    try:
        return [(t.name, t.classification.access) for t in registry.tools()]
    finally:
        await registry.stop()


@click.command("discover", context_settings=CONTEXT)
@click.option(
    "--config",
    "-c",
    default=None,
    metavar="FILE",
    help="config.yaml whose upstreams to ask (default: $FLUX7_CONFIG, ./config.yaml, else the built-in defaults)",
)
@click.option("--agent", default="*", show_default=True, help="agent glob for the drafted policy")
@click.option("--name", default="discovered", show_default=True, help="the drafted policy's name")
def discover(config: str | None, agent: str, name: str) -> int:
    """Connect to the configured upstreams and print a policy draft for their tools: reads allowed, writes and
    unknowns asking a human. Nothing is written; review the draft before using it."""
    rt = runtime()
    choice = choose_config(config, rt.env)
    announce(choice, rt.err, click.get_current_context().command_path)
    settings = load_chosen(choice, rt.env)
    try:
        tools = asyncio.run(_collect(settings))
    except ConfigError as e:
        raise Fail(f"config error: {e}", 2) from None
    if not tools:
        raise Fail(f"no tools found in the upstreams of {choice.why()}")
    rt.out.write(draft_policy(tools, agent, name))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(discover, argv, prog="mesh7 discover")
