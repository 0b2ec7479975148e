"""The tty approval channel, against a real pseudo-terminal."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from flux7.shared.gate.tty_prompt import ask, available

VIEW = {"id": "0123456789abcdef", "agent_id": "bot", "tool": "fs.write", "params": {"path": "/x"}}


@pytest.fixture
def pty() -> Iterator[tuple[int, str]]:
    master, slave = os.openpty()
    yield master, os.ttyname(slave)
    os.close(master)
    os.close(slave)


def read_until(fd: int, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        seen += os.read(fd, 1024)
    return seen


@pytest.mark.parametrize(
    ("answer", "decision"), [(b"y\n", "approve"), (b"YES\n", "approve"), (b"n\n", "deny"), (b"maybe\n", None)]
)
def test_the_answer_typed_at_the_terminal_is_the_decision(
    pty: tuple[int, str], answer: bytes, decision: str | None
) -> None:
    master, path = pty
    result: list[str | None] = []
    asker = threading.Thread(target=lambda: result.append(ask(VIEW, 10, tty_path=path)))
    asker.start()
    prompt = read_until(master, b"approve? [y/N]")
    assert b"agent bot wants to call fs.write" in prompt and b'"/x"' in prompt
    os.write(master, answer)
    asker.join(10)
    assert result == [decision]


def test_no_answer_in_time_is_no_decision(pty: tuple[int, str]) -> None:
    _, path = pty
    assert ask(VIEW, 0.1, tty_path=path) is None


def test_without_a_terminal_there_is_no_prompt(tmp_path: os.PathLike[str]) -> None:
    missing = os.path.join(str(tmp_path), "no-tty")
    assert not available(missing)
    assert ask(VIEW, 5, tty_path=missing) is None
