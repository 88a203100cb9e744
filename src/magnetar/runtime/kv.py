"""``KeyValueStore`` over RocksDB (``rocksdict``): the bookie index and small durable state."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rocksdict import Options, Rdict, WriteBatch, WriteOptions


class RocksKeyValueStore:
    def __init__(self, path: str) -> None:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        self._db = Rdict(path, options)
        self._sync = WriteOptions()
        self._sync.sync = True
        self._nosync = WriteOptions()
        self._nosync.sync = False

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def write(self, puts: Iterable[tuple[bytes, bytes | None]], *, sync: bool) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in puts:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch, self._sync if sync else self._nosync)

    def scan(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        iterator = self._db.iter()
        iterator.seek(start)
        while iterator.valid():
            key = bytes(iterator.key())
            if end is not None and key >= end:
                break
            yield key, bytes(iterator.value())
            iterator.next()

    def close(self) -> None:
        self._db.close()
