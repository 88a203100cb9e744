"""The broker's Pulsar listener in the real world: ``node.broker.start_broker`` over TCP, with TLS
and client credentials read from the files the config names.

``start_broker`` builds what the node takes from the runtime: the TCP network (unless one is
given), ``CredentialFiles`` (token keys, password files) and, with ``config.tls_enabled`` and a
``tls_port``, the certificate files and a TLS network for the ``pulsar+ssl://`` listener; the node
re-reads the files when they change. Used by ``magnetar standalone``, ``magnetar broker`` and tests.
"""

from __future__ import annotations

from typing import Any

from magnetar.base.clock import Clock
from magnetar.base.io import Network
from magnetar.broker.config import BrokerConfig
from magnetar.node.broker import BrokerServer
from magnetar.node.broker import start_broker as start_broker_node
from magnetar.runtime.network import TcpNetwork
from magnetar.runtime.security import CredentialFiles
from magnetar.runtime.tls import TlsFiles, tls_files_from_config

__all__ = ["BrokerServer", "start_broker"]


async def start_broker(config: BrokerConfig, *, clock: Clock, network: Network | None = None,
                       tls_port: int | None = None, tls: TlsFiles | None = None, **node_options: Any) -> BrokerServer:
    """``node.broker.start_broker`` with real sockets and files (see the module docstring);
    ``node_options`` are that function's other keyword arguments."""
    tls_network: Network | None = None
    if config.tls_enabled and tls_port is not None:
        tls = tls or tls_files_from_config(config)
        assert tls is not None
        tls_network = TcpNetwork(tls.context, config.tls_handshake_timeout_s)
    return await start_broker_node(
        config, clock=clock, network=network or TcpNetwork(), tls_port=tls_port, tls_network=tls_network,
        tls=tls if config.tls_enabled else None, credentials=CredentialFiles(config, clock), **node_options)
