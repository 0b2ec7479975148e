"""Where a Ctrl-C goes (shared/agent/terminal.py): at a question it answers the question, even when it comes the
instant the question shows; during a run it interrupts the run. The handler is called as the signal would call it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import pytest

from flux7.shared.agent.terminal import Keys


@pytest.fixture
def keys() -> Iterator[Keys]:
    loop = asyncio.new_event_loop()
    yield Keys(loop, tty=False)
    loop.close()


def test_a_ctrl_c_as_soon_as_the_question_shows_answers_it_and_does_not_reach_the_run(keys: Keys) -> None:
    interrupted: list[bool] = []
    keys.on_interrupt = lambda: interrupted.append(True)  # a run is going: the question comes from inside it
    shown: list[str] = []

    def ask() -> None:
        shown.append("run shell? [y/N] ")
        keys._sigint(signal.SIGINT, None)  # the key pressed the instant the question is on the screen

    with pytest.raises(KeyboardInterrupt):
        keys.read_line("", ask=ask)
    assert shown and not interrupted and not keys.reading


def test_a_ctrl_c_during_a_run_interrupts_the_run(keys: Keys) -> None:
    interrupted: list[bool] = []
    keys.on_interrupt = lambda: interrupted.append(True)
    keys._sigint(signal.SIGINT, None)
    keys.loop.call_soon(keys.loop.stop)  # one turn of the loop: the handler handed the interrupt to it
    keys.loop.run_forever()
    assert interrupted == [True]


def test_a_line_typed_ahead_still_shows_the_question_it_answers(keys: Keys, capsys: pytest.CaptureFixture[str]) -> None:
    keys.typed_ahead = "y\nnext"
    shown: list[str] = []
    assert keys.read_line("", ask=lambda: shown.append("run shell? [y/N] ")) == "y"
    assert shown and keys.typed_ahead == "next" and capsys.readouterr().out == "y\n"
