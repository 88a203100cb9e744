"""The ``magnetar`` command line (typer + rich).

Owns: argument parsing and presentation only. Each sub-command lives in its own module and
calls a composition root in ``runtime`` or ``sim``; no protocol or storage logic lives here.
"""
