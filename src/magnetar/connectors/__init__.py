"""Connectors: Magnetar topics as sources and sinks of other systems.

Owns: ``spark/`` (a PySpark Python Data Source, ``format("magnetar")``, batch and streaming read
and write; the only place ``pyspark`` is imported). Connectors sit above ``runtime``: like the
CLI they compose real I/O (TCP, the system clock, a read-only metadata view) around the clients
of the layers below — the asyncio ``client`` for the broker path, the ``ledger`` reader for
entries straight from bookies, ``metadata`` records for the topic's ledger list. They never reach
into ``broker``, ``managed_ledger`` or ``storage``.
"""
