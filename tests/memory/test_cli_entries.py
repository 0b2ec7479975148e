"""`mem7 store | search | recall | forget` (shared/memory/cli_entries.py) in process, on mem7's own memory (MEM7_DIR,
no daemon at MEM7_LISTEN): the tools' own texts for people, JSON for programs, and which memory was used said on
stderr. Against a flux7 server's memory: tests/e2e/test_first_run.py."""

from __future__ import annotations

import io
import json
from pathlib import Path

from flux7.shared.cli.kit import run
from flux7.shared.memory.cli import memory
from tests.support.http import free_port


def mem7(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    env = {"MEM7_DIR": str(tmp_path / "mem7"), "MEM7_LISTEN": f"127.0.0.1:{free_port()}", "MEM7_HYBRID": "0"}
    out, err = io.StringIO(), io.StringIO()
    code = run(memory, list(argv), prog="mem7", env=env, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_store_search_recall_forget_from_the_terminal(tmp_path: Path) -> None:
    code, out, err = mem7(tmp_path, "store", "deploy-window", "Production deploys happen on Tuesdays.", "--tag", "ops")
    assert (code, out) == (0, "Memory 'deploy-window' created (1 total entries)\n"), err
    assert f"mem7 store: memory: mem7's own in {tmp_path / 'mem7'} (MEM7_DIR;" in err
    assert (tmp_path / "mem7" / "workspace" / "memory").is_dir()  # the markdown truth, where MEM7_DIR says

    code, out, _ = mem7(tmp_path, "search", "when do we deploy")
    assert code == 0 and out.startswith("1 results (ranked by relevance):\n\n## deploy-window\n"), out
    code, out, _ = mem7(tmp_path, "search", "deploy*", "--mode", "raw", "--json")
    (found,) = json.loads(out)
    assert (found["key"], found["value"], found["tags"]) == (
        "deploy-window",
        "Production deploys happen on Tuesdays.",
        ["ops"],
    )
    code, out, _ = mem7(tmp_path, "recall", "--tag", "ops")
    assert code == 0 and "## deploy-window\nProduction deploys happen on Tuesdays.\nTags: ops\n" in out

    code, out, _ = mem7(tmp_path, "store", "deploy-window", "Deploys moved to Wednesdays.", "--json")
    assert json.loads(out) == {"key": "deploy-window", "action": "updated", "total": 1}
    code, out, _ = mem7(tmp_path, "forget", "deploy-window", "--json")
    assert json.loads(out) == {"removed": 1, "remaining": 0}
    code, out, _ = mem7(tmp_path, "recall", "deploy-window")
    assert (code, out) == (0, "No memories found.\n")


def test_refusals_are_one_line_with_the_usual_exit_status(tmp_path: Path) -> None:
    code, _, err = mem7(tmp_path, "recall")
    assert code == 2 and err.splitlines()[0] == "mem7 recall: give a KEY, --tag or --agent"
    code, _, err = mem7(tmp_path, "store", "two\nlines", "v")  # the tool refuses it: the tool's words, exit 1
    assert code == 1 and err.splitlines()[-1] == "mem7 store: key must be a single line"
    code, _, err = mem7(tmp_path, "search", "x", "--url", f"http://127.0.0.1:{free_port()}")
    assert code == 1 and "mem7 search: cannot reach the memory at http://127.0.0.1:" in err
