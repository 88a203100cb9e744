"""``--pulsar-conf FILE``: a Pulsar ``standalone.conf`` / ``broker.conf`` read into Magnetar's
configuration, so an operator's existing file keeps working.

The file is Java properties as Pulsar ships it: ``key=value`` lines, ``#`` comments, empty values
meaning "unset". ``translate`` maps the keys Magnetar supports (``SUPPORTED``) onto ``BrokerConfig``
fields and the node's ports; every other key with a value is reported once, in one warning, as
ignored (never fatal: a Pulsar file has hundreds of keys). Values that do not parse are errors
(``InvalidArgumentError``), as a typo in a Magnetar TOML file is.

Providers are named by Pulsar's class names (``AuthenticationProviderToken`` → "token",
``...Basic`` → "basic", ``...Tls`` → "tls"); an unknown provider class is reported and left out.
A TLS port makes ``tls_enabled`` true, as it opens Pulsar's TLS listener.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.base.errors import InvalidArgumentError
from magnetar.control.balancer import PULSAR_KEYS as BALANCER_KEYS

log = logging.getLogger(__name__)

PROVIDER_CLASSES = {
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken": "token",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic": "basic",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls": "tls",
}


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise InvalidArgumentError(f"expected true or false, got {value!r}")


def _minutes_as_s(value: str) -> int:
    return _int(value) * 60


def _int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidArgumentError(f"expected an integer, got {value!r}") from None


def _list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _text(value: str) -> str:
    return value.strip()


#: Pulsar key → (target, Magnetar field, parser). Target "broker" is ``BrokerConfig``; "node" the
#: process's own config (ports), named in the standalone's terms and renamed for ``magnetar broker``.
SUPPORTED: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "clusterName": ("broker", "cluster_name", _text),
    "maxMessageSize": ("broker", "max_message_size_bytes", _int),
    "brokerDeduplicationEnabled": ("broker", "deduplication", _bool),
    "maxConcurrentNonPersistentMessagePerConnection": ("broker", "max_concurrent_non_persistent_messages_per_connection",
                                                       _int),
    "allowAutoTopicCreation": ("broker", "topic_auto_creation", _bool),
    "authenticationEnabled": ("broker", "authentication_enabled", _bool),
    "anonymousUserRole": ("broker", "anonymous_user_role", _text),
    "tokenSecretKey": ("broker", "token_secret_key", _text),
    "tokenPublicKey": ("broker", "token_public_key", _text),
    "tokenAuthClaim": ("broker", "token_auth_claim", _text),
    "tokenAudienceClaim": ("broker", "token_audience_claim", _text),
    "tokenAudience": ("broker", "token_audience", _text),
    "tokenAllowedClockSkewSeconds": ("broker", "token_allowed_clock_skew_s", _int),
    "basicAuthConf": ("broker", "basic_auth_conf_path", _text),
    "authenticationRefreshCheckSeconds": ("broker", "auth_refresh_check_interval_s", _int),
    "authorizationEnabled": ("broker", "authorization_enabled", _bool),
    "superUserRoles": ("broker", "superuser_roles", _list),
    "tlsCertificateFilePath": ("broker", "tls_certificate_file_path", _text),
    "tlsKeyFilePath": ("broker", "tls_key_file_path", _text),
    "tlsTrustCertsFilePath": ("broker", "tls_trust_certs_file_path", _text),
    "tlsRequireTrustedClientCertOnConnect": ("broker", "tls_require_trusted_client_cert", _bool),
    "tlsCertRefreshCheckDurationSec": ("broker", "tls_cert_refresh_check_interval_s", _int),
    "bookkeeperTLSTrustCertsFilePath": ("broker", "bookkeeper_tls_trust_certs_file_path", _text),
    "bookkeeperTLSCertificateFilePath": ("broker", "bookkeeper_tls_certificate_file_path", _text),
    "bookkeeperTLSKeyFilePath": ("broker", "bookkeeper_tls_key_file_path", _text),
    "managedLedgerOffloadDriver": ("broker", "offload_driver", _text),
    "fileSystemURI": ("broker", "offload_directory", _text),
    "s3ManagedLedgerOffloadBucket": ("broker", "offload_s3_bucket", _text),
    "s3ManagedLedgerOffloadServiceEndpoint": ("broker", "offload_s3_endpoint", _text),
    "s3ManagedLedgerOffloadRegion": ("broker", "offload_s3_region", _text),
    "managedLedgerOffloadAutoTriggerSizeThresholdBytes": ("broker", "offload_threshold_bytes", _int),
    "managedLedgerOffloadDeletionLagMs": ("broker", "offload_deletion_lag_ms", _int),
    "retentionCheckIntervalInSeconds": ("broker", "retention_check_interval_s", _int),
    "backlogQuotaCheckIntervalInSeconds": ("broker", "backlog_quota_check_interval_s", _int),
    "brokerServiceCompactionMonitorIntervalInSeconds": ("broker", "compaction_monitor_interval_s", _int),
    "messageExpiryCheckIntervalInMinutes": ("broker", "message_expiry_check_interval_s", _minutes_as_s),
    "brokerServicePort": ("node", "broker_port", _int),
    "brokerServicePortTls": ("node", "broker_port_tls", _int),
    "webServicePort": ("node", "web_port", _int),
    "webServicePortTls": ("node", "web_port_tls", _int),
    "bindAddress": ("node", "host", _text),
}


def _scaled(field_name: str, factor: float) -> Callable[[str], Any]:
    """A load-balancer key's parser: booleans as they are, numbers times ``factor`` (minutes to
    ms, Mbytes to bytes), weights as floats (``control.balancer.PULSAR_KEYS``)."""
    def parse(value: str) -> Any:
        if field_name.endswith("_enabled"):
            return _bool(value)
        if field_name.endswith(("_weight", "_fraction")):
            try:
                return float(value.strip())
            except ValueError:
                raise InvalidArgumentError(f"expected a number, got {value!r}") from None
        return int(_int(value) * factor)
    return parse


SUPPORTED.update({key: ("broker", name, _scaled(name, factor)) for key, (name, factor) in BALANCER_KEYS.items()})


@dataclass
class PulsarConf:
    broker: dict[str, Any] = field(default_factory=dict)
    node: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def parse_properties(text: str) -> dict[str, str]:
    """``key=value`` lines (``#``/``!`` comments, ``\\`` continuations); the last value of a key wins."""
    values: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        for index, char in enumerate(line):
            if char in "=:":
                key, value = line[:index].strip(), line[index + 1:].strip()
                break
        else:
            key, value = line, ""
        if key:
            values[key] = value
    return values


def translate(properties: dict[str, str]) -> PulsarConf:
    out = PulsarConf()
    for key, value in properties.items():
        if value == "":
            continue  # Pulsar's "unset"
        if key == "authenticationProviders":
            providers = []
            for name in _list(value):
                short = PROVIDER_CLASSES.get(name)
                if short is None:
                    out.ignored.append(f"authenticationProviders:{name}")
                elif short not in providers:
                    providers.append(short)
            out.broker["authentication_providers"] = tuple(providers)
            continue
        target = SUPPORTED.get(key)
        if target is None:
            out.ignored.append(key)
            continue
        where, name, parse = target
        try:
            parsed = parse(value)
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"pulsar conf {key}: {error}") from None
        (out.broker if where == "broker" else out.node)[name] = parsed
    if out.node.get("broker_port_tls") is not None or out.node.get("web_port_tls") is not None:
        out.broker["tls_enabled"] = True
    return out


def read_pulsar_conf(path: str | None) -> PulsarConf:
    """The translated file (empty without a path); ignored keys are logged once."""
    if not path:
        return PulsarConf()
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise InvalidArgumentError(f"cannot read pulsar conf {path!r}: {error.strerror}") from None
    conf = translate(parse_properties(text))
    if conf.ignored:
        log.warning("pulsar conf %s: %d keys are not supported by Magnetar and were ignored: %s",
                    path, len(conf.ignored), ", ".join(sorted(conf.ignored)))
    return conf
