"""Parse Python source for the repository checks, robust to a CPython 3.11 race.

CPython 3.11 keeps the AST constructor's recursion counter per interpreter, not per thread
(python/cpython#106905). When another thread builds an AST at the same moment (3.11's
``traceback`` parses a source line to place its ``^^^`` markers, so any background thread of an
earlier test that formats an exception does), ``ast.parse`` here can fail with ``SystemError:
AST constructor recursion depth mismatch`` although the source is fine. That error is retried;
a real syntax error is not.
"""

from __future__ import annotations

import ast

_ATTEMPTS = 5


def parse_python(source: str) -> ast.Module:
    """``ast.parse(source)``, retrying only CPython's spurious recursion-depth ``SystemError``."""
    for attempt in range(_ATTEMPTS):
        try:
            return ast.parse(source)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
