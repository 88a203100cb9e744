"""Compiled coroutines never suspend inside an ``except`` block (issue 22, session 12).

mypyc keeps the exception an ``except`` block handles in the thread's shared exception state
(``tstate->exc_info``), not per coroutine as CPython's own coroutines do. While a compiled
coroutine is suspended inside a handler, other coroutines change that state; after the await,
a bare ``raise`` re-raises whatever is there. When that was ``None``, mypyc's catch wrote a
traceback over ``NoneType``'s type (``PyException_SetTraceback(None, tb)``) and the process died
later anywhere (cluster brokers in ``tests/cluster/test_elastic.py``: the cursor's
``_switch_ledger`` awaited a delete, then ``raise``). Even without a bare ``raise`` the handled
exception stays in the shared state for unrelated code (``sys.exc_info()``, the ``__context__``
of later errors). So in every module of ``COMPILED_MODULES`` an ``except`` block holds no
``await``, ``async with`` or ``async for``: the code notes the error and awaits after the block.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from magnetar._compiled import COMPILED_MODULES, source_path
from tests.tooling.pysource import parse_python

_SUSPENDS = (ast.Await, ast.AsyncWith, ast.AsyncFor)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _same_scope(node: ast.AST) -> Iterator[ast.AST]:
    """``node``'s descendants that run in its own function (not in nested functions or classes)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _SCOPES):
            continue
        yield child
        yield from _same_scope(child)


def suspensions_in_handlers(source: str) -> list[int]:
    """Line numbers of every await/async with/async for inside an ``except`` block."""
    lines = []
    for node in ast.walk(parse_python(source)):
        if isinstance(node, ast.ExceptHandler):
            for stmt in node.body:
                if not isinstance(stmt, _SCOPES):
                    lines += [n.lineno for n in (stmt, *_same_scope(stmt)) if isinstance(n, _SUSPENDS)]
    return sorted(lines)


def test_no_compiled_module_suspends_inside_an_except_block() -> None:
    found = {
        module: lines
        for module in COMPILED_MODULES
        if (lines := suspensions_in_handlers(source_path(module).read_text()))
    }
    assert not found, f"await inside an except block of a compiled module (move it after the block): {found}"


def test_the_check_finds_the_pattern_that_crashed_the_brokers() -> None:
    """Negative control: the cursor's old ``_switch_ledger`` shape is found, the fixed one is not."""
    crashed = """
async def switch(self):
    try:
        await self.cas()
    except (FencedError, ClosedError):
        await self.delete_quietly()
        raise
"""
    fixed = """
async def switch(self):
    try:
        await self.cas()
    except (FencedError, ClosedError) as exc:
        lost = exc
    else:
        lost = None
    if lost is not None:
        await self.delete_quietly()
        raise lost
"""
    nested = """
def outer():
    try:
        pass
    except ValueError:
        async def later():
            await thing()
        return later
"""
    assert suspensions_in_handlers(crashed) == [6]
    assert suspensions_in_handlers("async def f():\n    try:\n        pass\n    except E:\n"
                                   "        async with lock:\n            pass\n") == [5]
    assert suspensions_in_handlers(fixed) == []
    assert suspensions_in_handlers(nested) == []  # a function defined there awaits later, elsewhere
