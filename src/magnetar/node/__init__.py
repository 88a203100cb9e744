"""The nodes themselves, written against capabilities so both worlds assemble the same ones.

Owns: the bookie node (``node.bookie``: protocol server, registration, cookie check, journal
replay over a ``Disk`` and a ``KeyValueStore``), the broker node (``node.broker``: the Pulsar
protocol server over a ``Network``; ``node.broker_generation``: a cluster broker's ledger client,
bundle ownership and server on one metadata session, rebuilt when the session is lost), the
ledger client wiring (``node.ledger``), geo-replication (``node.replication``), AutoRecovery
(``node.autorecovery``) and the composition of a standalone-style cell of them
(``node.standalone``). ``runtime`` gives these nodes real files, RocksDB, TCP and the system clock
and keeps the process entry points; ``sim`` gives them ``SimDisk``, ``SimKeyValueStore``,
``SimNetwork`` and a virtual clock and runs whole clusters of them in one seeded process.

Invariants: no module here opens a file or socket, reads the wall clock or draws OS randomness;
every capability is passed in (import-linter keeps ``runtime`` and ``sim`` out of this layer).
"""
