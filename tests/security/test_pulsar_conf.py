"""--pulsar-conf: a Pulsar conf file's supported keys become Magnetar settings; others are reported."""

from __future__ import annotations

import pytest

from magnetar.base.errors import InvalidArgumentError
from magnetar.broker import BrokerConfig
from magnetar.runtime.config import load_config
from magnetar.runtime.pulsar_conf import parse_properties, translate

CONF = """
# Pulsar standalone.conf excerpt
clusterName=standalone
brokerServicePort=6650
brokerServicePortTls=6651
webServicePort=8080
webServicePortTls=
bindAddress=127.0.0.1
maxMessageSize=1048576
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken,\\
  org.apache.pulsar.broker.authentication.AuthenticationProviderBasic,com.example.Kerberos
tokenSecretKey=data:;base64,c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlYw==
tokenAuthClaim=role
tokenAllowedClockSkewSeconds=5
basicAuthConf=/etc/pulsar/.htpasswd
anonymousUserRole=anonymous
authorizationEnabled=true
superUserRoles=admin, superuser
tlsCertificateFilePath=/certs/broker.cert.pem
tlsKeyFilePath=/certs/broker.key-pk8.pem
tlsTrustCertsFilePath=/certs/ca.cert.pem
tlsRequireTrustedClientCertOnConnect=false
managedLedgerDefaultEnsembleSize=1
zookeeperServers=
"""


def test_supported_keys_take_effect_and_others_are_reported() -> None:
    conf = translate(parse_properties(CONF))
    assert conf.node == {"broker_port": 6650, "broker_port_tls": 6651, "web_port": 8080, "host": "127.0.0.1"}
    config = load_config(BrokerConfig, "broker", file_values=conf.broker, environ={})
    assert config.authentication_enabled and config.authorization_enabled and config.tls_enabled
    assert config.authentication_providers == ("token", "basic")
    assert config.superuser_roles == ("admin", "superuser")
    assert config.token_auth_claim == "role" and config.token_allowed_clock_skew_s == 5
    assert config.max_message_size_bytes == 1048576 and config.cluster_name == "standalone"
    assert config.basic_auth_conf_path == "/etc/pulsar/.htpasswd" and config.anonymous_user_role == "anonymous"
    assert not config.tls_require_trusted_client_cert
    # empty values are Pulsar's "unset", never reported; unknown keys and providers are
    assert sorted(conf.ignored) == ["authenticationProviders:com.example.Kerberos", "managedLedgerDefaultEnsembleSize"]


def test_bad_values_are_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="authenticationEnabled"):
        translate({"authenticationEnabled": "yes please"})
    with pytest.raises(InvalidArgumentError, match="brokerServicePort"):
        translate({"brokerServicePort": "sixty"})


def test_basic_auth_conf_as_path_data_or_base64(tmp_path: object) -> None:
    import base64
    from pathlib import Path

    from magnetar.runtime.security import read_htpasswd

    line = "admin:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n"
    path = Path(str(tmp_path)) / "htpasswd"
    path.write_text(line)
    encoded = base64.b64encode(line.encode()).decode()
    for reference in (str(path), f"file://{path}", f"data:;base64,{encoded}", encoded):
        assert read_htpasswd(reference).verify("admin", "secret"), reference
    with pytest.raises(InvalidArgumentError):
        read_htpasswd(str(path) + ".missing")


def test_deduplication_and_non_persistent_bound_keys() -> None:
    """Pulsar's defaults: deduplication off; the keys set them as Pulsar's do."""
    assert BrokerConfig().deduplication is False
    assert BrokerConfig().max_concurrent_non_persistent_messages_per_connection == 1000
    conf = translate({"brokerDeduplicationEnabled": "true", "maxConcurrentNonPersistentMessagePerConnection": "7"})
    config = load_config(BrokerConfig, "broker", file_values=conf.broker, environ={})
    assert config.deduplication is True and config.max_concurrent_non_persistent_messages_per_connection == 7
    env = load_config(BrokerConfig, "broker", environ={"MAGNETAR_BROKER_DEDUPLICATION": "true"})
    assert env.deduplication is True
