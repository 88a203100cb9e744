"""``spark.read.format("magnetar")`` / ``writeStream.format("magnetar")``: see docs/spark.md.

Pure modules (no pyspark): ``offsets`` (positions and offset JSON), ``options`` (what a query
asked for), ``plan`` (topic layouts and how a range is cut into Spark partitions), ``rows``
(entries and messages to Arrow columns), ``fetch`` (reading a slice from bookies or the broker),
``sink`` (producer names and sequence ids for the deduplicating writer). ``source`` holds the
``DataSource`` classes and is the only module that imports pyspark; ``pyspark_magnetar`` (a
top-level package) re-exports it as ``DefaultSource`` so Spark registers the format by itself.
"""
