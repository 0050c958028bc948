"""What an exception line is: the one form every reader of a paste shares.

Python prints an uncaught exception as its class, dotted by its module where it is not a builtin,
then a colon and its message (`torch.OutOfMemoryError: CUDA out of memory…`, `ValueError: …`), or
the class alone when it has no message (`KeyboardInterrupt`, `SystemExit`); IPython's header names
the class before `Traceback (most recent call last)`. Python's own classes, PyTorch's, vLLM's and
the wrappers' all end in one of `EXCEPTION_SUFFIXES` (`traceback.format_exception_only` prints
`type.__qualname__` with its module).
"""

from __future__ import annotations

from typing import NamedTuple

from service.first_use import first_use_re

__all__ = ["EXCEPTION_CLASS", "ExceptionLine", "exception_line"]

EXCEPTION_SUFFIXES = r"(?:Error|Exception|Exit|Interrupt)"
# An exception's class as a traceback prints it: its module's dotted path (any case: `requests.
# exceptions.HTTPError`, a vendored `Foo.BarError` class in a class), then the class.
EXCEPTION_CLASS = rf"(?:[A-Za-z_]\w*\.){{0,8}}[A-Z]\w{{0,80}}{EXCEPTION_SUFFIXES}"
_LINE = first_use_re(
    rf"^[ \t]*(?:[A-Za-z_]\w*\.){{0,8}}(?P<name>[A-Z]\w{{0,80}}{EXCEPTION_SUFFIXES})\b"
    r"(?:(?P<colon>:)[ \t]*(?P<message>.*?))?[ \t]*$|"
    rf"^[ \t]*(?:[A-Za-z_]\w*\.){{0,8}}(?P<lead>[A-Z]\w{{0,80}}{EXCEPTION_SUFFIXES})\b"
)


class ExceptionLine(NamedTuple):
    """A line opening with an exception's class: the class without its module, its message (None
    when no colon follows the class) and whether the class is all the line holds."""

    name: str
    message: str | None
    bare: bool


def exception_line(text: str) -> ExceptionLine | None:
    """The exception `text` opens with (leading blanks allowed), or None. `ValueError: x` has the
    message `x`; `KeyboardInterrupt` is bare; `OutOfMemoryError    Traceback (most recent…` (IPython's
    header) names its class with no message."""
    match = _LINE.match(text)
    if match is None:
        return None
    if match.group("name") is None:
        return ExceptionLine(match.group("lead"), None, False)
    if match.group("colon") is None:
        return ExceptionLine(match.group("name"), None, True)
    return ExceptionLine(match.group("name"), match.group("message"), False)
