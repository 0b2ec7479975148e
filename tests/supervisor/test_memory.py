from __future__ import annotations

import asyncio
import json
from pathlib import Path

from flux7.functions.memory import create_memory_app
from flux7.shared.decisions.memory_client import RpcMemory, parse_memory_list
from tests.decisions.support import new_memory_service, serve_asgi
from tests.supervisor.conftest import sup7_config, world, write_mesh_config
from tests.supervisor.test_loop import call, decisions_until
from tests.upstreams.servers.http_backend import Backend


async def test_decisions_are_stored_in_memory_and_recalled_on_start(tmp_path: Path, backend: Backend) -> None:
    async with (
        serve_asgi(create_memory_app(new_memory_service(tmp_path))) as mem_url,
        world(write_mesh_config(tmp_path, backend)) as w,
    ):
        cfg = sup7_config(tmp_path, memory={"enabled": True, "url": mem_url})
        sup = w.supervisor(cfg)
        await sup.recall()  # nothing yet: must not fail
        pending = call(w.client, "create_pet", {"name": "Kit", "path": "/home/u/proj/a"})
        [d] = await decisions_until(sup)
        assert (await asyncio.wait_for(pending, 10)).status_code == 200
        memory = RpcMemory(mem_url)
        [fact] = parse_memory_list(await memory.call_tool("memory_list", {"tags": ["supervisor", "decision"]}))
        assert fact.key == f"supervisor:decision:{d.approval_id}" and fact.agent == "supervisor"
        assert set(fact.tags) == {"supervisor", "decision", "approved", "create_pet"}
        text = await memory.call_tool("memory_recall", {"key": fact.key})
        value = json.loads(text.split("\n")[1])
        assert value["decision"] == "approved" and value["rule_matched"] == "project-files"
        assert set(value) == {
            "approval_id",
            "agent_id",
            "tool",
            "decision",
            "rule_matched",
            "reasoning",
            "confidence",
            "timestamp",
        }
        await memory.aclose()
        await sup.aclose()
