"""The list of command modules attached to the ``magnetar`` app (one line per module)."""

from __future__ import annotations

from collections.abc import Callable

import typer

from magnetar.cli import (  # admin_geo attaches its commands to admin's and cluster's groups
    admin,
    admin_geo,  # noqa: F401
    autorecovery,
    bookie,
    broker,
    chaos,
    cluster,
    consume,
    perf,
    produce,
    sim,
    standalone,
    tokens,
)

REGISTRARS: list[Callable[[typer.Typer], None]] = []
REGISTRARS.append(sim.register)
REGISTRARS.append(bookie.register)
REGISTRARS.append(standalone.register)
REGISTRARS.append(produce.register)
REGISTRARS.append(consume.register)
REGISTRARS.append(autorecovery.register)
REGISTRARS.append(perf.register)
REGISTRARS.append(broker.register)
REGISTRARS.append(chaos.register)
REGISTRARS.append(cluster.register)
REGISTRARS.append(admin.register)
REGISTRARS.append(tokens.register)
