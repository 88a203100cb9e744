"""Sans-IO wire codecs: bytes in, typed messages out, and back. No sockets, no files, no clock.

Owns: ``protocol.pulsar`` (the Pulsar binary protocol that clients speak to brokers) and
``protocol.bookie`` (Magnetar's own compact framing between the ledger client and bookies).
Invariants: a decoder never buffers more than one frame's named maximum
(``PULSAR_FRAME_BYTES_MAX``, ``BOOKIE_FRAME_BYTES_MAX``); malformed input raises a typed
``CorruptDataError``/``LimitExceededError`` and never an unchecked exception; encoding then decoding a
message gives the same message (golden-byte tests pin the layouts).
"""
