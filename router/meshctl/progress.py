"""A progress line: rewritten in place on a terminal, one line per change otherwise."""

from __future__ import annotations

from typing import TextIO


class Progress:
    """Shows ``"<text> (<seconds> s)"``; off a TTY a line is printed only when ``text`` changes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._last = self._line = ""
        self._shown = False

    def show(self, text: str, elapsed: float) -> None:
        line = f"{text} ({elapsed:.1f} s)"
        if self.tty:
            if line == self._line:
                return
            self.stream.write(f"\r\033[K{line}")
            self._shown = True
        elif text != self._last:
            self.stream.write(line + "\n")
        self._last, self._line = text, line
        self.stream.flush()

    def done(self) -> None:
        """End the in-place line (if any) so that what follows starts on a line of its own."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
