"""The keyboard at the REPL, as Claude Code and Codex use it: Ctrl-C (or Esc) ends the run in progress and comes
back to the prompt; at a question Ctrl-C means no; at the prompt it clears the line, and twice on an empty line
it leaves.

One SIGINT handler decides by where the agent is:
- reading a line (the prompt, a question): the line is read in the main thread with readline, so the handler can
  raise KeyboardInterrupt into it at once (a line read in a thread would stay blocked until Enter and then
  swallow the next line typed);
- a run going: the handler asks the agent to interrupt it (`on_interrupt`), which ends the run well formed;
- neither: KeyboardInterrupt, as Python's own handler does.

During a run the terminal is in cbreak mode (no echo, keys read one by one, Ctrl-C still a signal) so Esc can be
read; what else is typed meanwhile is kept as a terminal would keep it: a whole line typed ahead is the next
prompt's answer, a part of one is put back on its line for editing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["Keys"]

_ESC = b"\x1b"


class Keys:
    def __init__(self, loop: asyncio.AbstractEventLoop, *, tty: bool) -> None:
        self.loop = loop
        self.tty = tty
        self.fd = sys.stdin.fileno() if tty else -1
        self.reading = False  # a line is being read in the main thread
        self.on_interrupt: Callable[[], Any] | None = None  # what Ctrl-C and Esc do while a run goes
        self.typed_ahead = ""
        self._empty_line = False  # the line being read was empty when Ctrl-C came
        self._saved_mode: Any = None
        self._previous: Any = None

    def install(self) -> None:
        self._previous = signal.signal(signal.SIGINT, self._sigint)

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _sigint(self, _signum: int, _frame: FrameType | None) -> None:
        if self.reading:
            self._empty_line = not _line_buffer()
            raise KeyboardInterrupt
        if self.on_interrupt is not None:
            self.loop.call_soon_threadsafe(self.on_interrupt)
            return
        raise KeyboardInterrupt

    def read_line(self, prompt: str, *, ask: Callable[[], None] | None = None) -> str:
        """One line, read here in the main thread (EOFError at the end of input; KeyboardInterrupt for Ctrl-C,
        with `interrupted_empty` saying whether the line was empty). `ask` writes the question first, once a
        Ctrl-C already answers it: a key pressed as soon as the question shows must not reach the run instead."""
        if "\n" in self.typed_ahead:  # a line typed while the agent worked: read now, as a terminal would
            line, self.typed_ahead = self.typed_ahead.split("\n", 1)
            if ask is not None:
                ask()
            sys.stdout.write(prompt + line + "\n")
            sys.stdout.flush()
            return line
        watching = self._saved_mode is not None
        if watching:
            self._cooked()
        hook = False
        try:
            self.reading = True
            if ask is not None:
                ask()
            hook = self._prefill()
            return input(prompt)
        finally:
            self.reading = False
            if hook:
                _startup_hook(None)
            if watching:
                self._cbreak()

    @property
    def interrupted_empty(self) -> bool:
        return self._empty_line

    def _prefill(self) -> bool:
        typed, self.typed_ahead = self.typed_ahead, ""
        if not typed:
            return False
        return _startup_hook(typed)

    @contextlib.contextmanager
    def watching(self, on_interrupt: Callable[[], Any]) -> Iterator[None]:
        """While a run goes: Ctrl-C and Esc call `on_interrupt`; other keys are kept for the next prompt."""
        self.on_interrupt = on_interrupt
        if self.tty:
            self._cbreak()
            self.loop.add_reader(self.fd, self._key)
        try:
            yield
        finally:
            self.on_interrupt = None
            if self.tty:
                self.loop.remove_reader(self.fd)
                self._cooked()
                self._saved_mode = None

    def _key(self) -> None:
        try:
            data = os.read(self.fd, 1024)
        except OSError:
            return
        if data == _ESC and self.on_interrupt is not None:  # Esc alone (arrow keys send Esc and more)
            self.on_interrupt()
            return
        text = data.decode("utf-8", "ignore").replace("\r", "\n")
        for c in text:
            if c in ("\x7f", "\b"):  # backspace
                self.typed_ahead = self.typed_ahead[:-1]
            elif c.isprintable() or c == "\n":
                self.typed_ahead += c

    def _cbreak(self) -> None:
        import termios
        import tty

        with contextlib.suppress(termios.error, OSError):
            if self._saved_mode is None:
                self._saved_mode = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd, termios.TCSANOW)

    def _cooked(self) -> None:
        import termios

        if self._saved_mode is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(self.fd, termios.TCSANOW, self._saved_mode)


def _line_buffer() -> str:
    try:
        import readline
    except ImportError:
        return ""
    return readline.get_line_buffer()


def _startup_hook(text: str | None) -> bool:
    try:
        import readline
    except ImportError:
        return False
    if text is None:
        readline.set_startup_hook(None)
    else:
        readline.set_startup_hook(lambda: readline.insert_text(text))
    return True
