"""Magnetar: a durable, replicated messaging and streaming platform speaking the Pulsar protocol.

Layers live in sub-packages, lowest first: ``base``, ``faults``, ``protocol``, ``metadata``,
``storage``, ``ledger``, ``managed_ledger``, ``broker``, ``admin``/``replication``, ``client``,
``connectors``, and the two worlds that compose them: ``runtime`` (real I/O) and ``sim``
(deterministic simulation). ``cli`` is the command line. See ``docs/architecture.md``.
"""

__version__ = "0.1.0"

# The compiled hot path (issue 22): loads mypyc's extension modules when a current build exists
# and MAGNETAR_PURE_PYTHON is not 1; otherwise every module is the plain .py.
from magnetar import _compiled  # noqa: F401
