"""Tables on a terminal, plain lines when piped: never cut what people copy.

rich draws tables at the terminal's width, and at 80 columns when the output is not a terminal,
folding or cutting cells with an ellipsis (a fault-point name copied into ``MAGNETAR_FAULTS``
must be whole). ``print_table`` draws a rich table on a terminal; piped or redirected, it prints
one header line and one line per row, cells separated by a tab, markup removed, nothing cut:
what ``cut``, ``awk`` and ``grep`` expect.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text


def _plain(cell: str) -> str:
    return Text.from_markup(cell).plain


def print_table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """``rows`` (cells may hold rich markup) under ``columns``, drawn or plain (see the module)."""
    if console.is_terminal:
        table = Table(title=title)
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        return
    lines = ["\t".join(columns), *("\t".join(_plain(cell) for cell in row) for row in rows)]
    console.file.write("\n".join(lines) + "\n")
    console.file.flush()
