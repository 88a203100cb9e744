"""Help text people can read and copy: applied once to the whole ``magnetar`` command tree.

typer's defaults get in the way of a new user: flags are shown as ``<bool>``, required
arguments as ``{topic}`` in usage lines, docstrings' reST double backticks appear literally,
``[section]`` in help text is eaten as rich markup, and the rich panels fold or cut long
defaults at 80 columns when help is piped. ``plain_help`` turns every command of the click
tree built from the typer app into click's plain help: ``TOPIC`` and ``[TOPIC]`` in usage
lines, no type label on flags, single backticks, text wrapped (never cut) at the terminal's
width.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument


class _UsageArgument(TyperArgument):
    """An argument shown the click way: ``TOPIC`` (required) or ``[TOPIC]`` in the usage line."""

    def _usage_display_name(self) -> str:
        name = self.metavar or self.name or "arg"
        shown = name if self.required else f"[{name}]"
        return shown + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _readable(text: str | None) -> str | None:
    return None if text is None else text.replace("``", "`")


def plain_help(command: Any) -> Any:
    """``command`` (a click command or group as typer builds it; typer carries its own copy of
    click, so this goes by attributes) and its subcommands with plain help, changed in place."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    command.help = _readable(command.help)
    command.short_help = _readable(command.short_help)
    for param in command.params:
        if isinstance(param, TyperArgument):
            if param.metavar is None and param.name:
                param.metavar = param.name.upper()
            param.__class__ = _UsageArgument
        elif hasattr(param, "help"):
            param.help = _readable(param.help)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command
