"""Auto-registration of ``format("magnetar")``: Spark registers any importable top-level
``pyspark_*`` module's ``DefaultSource`` under its ``name()`` (no ``spark.dataSource.register``)."""

from magnetar.connectors.spark.source import MagnetarDataSource as DefaultSource

__all__ = ["DefaultSource"]
