"""The real world: system clock, OS randomness, files with fsync, RocksDB, asyncio sockets.

Owns: the production implementations of the ``magnetar.base`` capabilities and the composition
roots that assemble real processes (standalone, bookie, broker) from a frozen config. The only
package besides ``sim`` that touches the clock, files and sockets directly.
"""

from magnetar.runtime.clock import SystemClock, system_rng
from magnetar.runtime.disk import LocalDisk
from magnetar.runtime.kv import RocksKeyValueStore
from magnetar.runtime.network import TcpNetwork

__all__ = ["LocalDisk", "RocksKeyValueStore", "SystemClock", "TcpNetwork", "system_rng"]
