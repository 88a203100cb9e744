"""``invariant()``: always-on checks for programmer errors.

Python's ``assert`` vanishes under ``-O``; an invariant does not. A violated invariant is a bug
in Magnetar, never an operating condition: operating errors are typed ``MagnetarError``s.
"""

from __future__ import annotations

from typing import NoReturn

from mypy_extensions import mypyc_attr


# Compiled by mypyc (the hot path, ``magnetar/_compiled.py``), which cannot make a native class
# of a builtin exception's subclass: this one stays a regular Python class.
@mypyc_attr(native_class=False)
class InvariantViolationError(AssertionError):
    """A condition the code relies on does not hold: a bug, not bad input."""


def invariant(condition: object, message: str) -> None:
    """Raise ``InvariantViolationError(message)`` unless ``condition`` is truthy."""
    if not condition:
        _fail(message)


def _fail(message: str) -> NoReturn:
    raise InvariantViolationError(message)
