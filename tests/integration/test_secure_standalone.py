"""A secured ``magnetar standalone`` process, configured by a Pulsar ``standalone.conf``
(``--pulsar-conf``): TLS listeners, token, basic and TLS-certificate authentication, with the
official client over ``pulsar://``, ``pulsar+ssl://``, ``http://`` and ``https://`` service URLs.

One module-scoped process serves every case.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.runtime.certs import make_pki
from magnetar.runtime.processes import StandaloneProcess
from magnetar.security import create_token

pytestmark = pytest.mark.integration

SECRET = b"standalone-secret-standalone-sec"
HTPASSWD = "basicuser:$apr1$abcdefgh$h9FWgUz3n9YxylKLlR5SQ/\n"  # password "secret"


class Secure:
    def __init__(self, process: StandaloneProcess, pki: dict[str, str]) -> None:
        self.process = process
        self.pki = pki
        fields = process.fields
        self.binary = fields["broker"]
        self.binary_tls = fields["broker_tls"].replace("127.0.0.1", "localhost")
        self.http = f"http://{fields['http']}"
        self.https = f"https://{fields['https'].replace('127.0.0.1', 'localhost')}"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    directory: Path = tmp_path_factory.mktemp("secure-standalone")
    pki = make_pki(str(directory / "pki"), client_roles=("superuser",))
    (directory / "secret.key").write_bytes(SECRET)
    (directory / "htpasswd").write_text(HTPASSWD)
    conf = directory / "standalone.conf"
    conf.write_text("\n".join([
        "clusterName=standalone",
        "brokerServicePortTls=0",
        "webServicePortTls=0",
        "authenticationEnabled=true",
        "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
        "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic,"
        "org.apache.pulsar.broker.authentication.AuthenticationProviderTls",
        f"tokenSecretKey=file://{directory / 'secret.key'}",
        f"basicAuthConf={directory / 'htpasswd'}",
        f"tlsCertificateFilePath={pki['broker_cert']}",
        f"tlsKeyFilePath={pki['broker_key']}",
        f"tlsTrustCertsFilePath={pki['ca']}",
        "managedLedgerDefaultEnsembleSize=1",
        "",
    ]))
    process = StandaloneProcess(str(directory / "data"), extra_args=("--pulsar-conf", str(conf)))
    try:
        yield Secure(process, pki)
    finally:
        process.terminate()


def token(role: str = "alice") -> str:
    return create_token(role, secret_key=SECRET)


def make_client(url: str, auth: Any, ca: str | None = None, timeout_s: int = 10) -> Any:
    return pulsar.Client(url, authentication=auth, tls_trust_certs_file_path=ca, tls_validate_hostname=ca is not None,
                         operation_timeout_seconds=timeout_s, connection_timeout_ms=5000,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def round_trip(client: Any, topic: str) -> None:
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(topic).send(topic.encode())
        message = consumer.receive(timeout_millis=10_000)
        assert bytes(message.data()) == topic.encode()
        consumer.acknowledge(message)
    finally:
        client.close()


def test_start_up_says_what_is_required(secure: Secure) -> None:
    assert "providers=token,basic,tls" in secure.process.security_line


@pytest.mark.parametrize("how", ["binary", "binary-tls", "http", "https"])
def test_token_over_every_service_url(secure: Secure, how: str) -> None:
    url = {"binary": secure.binary, "binary-tls": secure.binary_tls, "http": secure.http, "https": secure.https}[how]
    ca = secure.pki["ca"] if how in ("binary-tls", "https") else None
    round_trip(make_client(url, pulsar.AuthenticationToken(token()), ca), f"persistent://public/default/token-{how}")


def test_basic_over_tls_and_client_certificate(secure: Secure) -> None:
    ca = secure.pki["ca"]
    round_trip(make_client(secure.binary_tls, pulsar.AuthenticationBasic("basicuser", "secret"), ca),
               "persistent://public/default/basic-tls")
    round_trip(make_client(secure.binary_tls, pulsar.AuthenticationTLS(secure.pki["superuser_cert"],
                                                                       secure.pki["superuser_key"]), ca),
               "persistent://public/default/cert-tls")


@pytest.mark.parametrize("url_kind", ["binary", "http"])
def test_bad_credentials_are_refused(secure: Secure, url_kind: str) -> None:
    # Over HTTP the C++ client turns the lookup's 401 into ConnectError (curl fails the request
    # before the client looks at the status); over the binary protocol it is AuthenticationError.
    url = secure.binary if url_kind == "binary" else secure.http
    expected = pulsar.AuthenticationError if url_kind == "binary" else pulsar.ConnectError
    for auth in (pulsar.AuthenticationToken("junk"), pulsar.AuthenticationBasic("basicuser", "wrong")):
        client = make_client(url, auth, timeout_s=3)
        try:
            with pytest.raises(expected):
                client.create_producer(f"persistent://public/default/refused-{url_kind}")
        finally:
            client.close()


def admin_get(url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def test_admin_and_lookup_over_http_and_https(secure: Secure) -> None:
    status, body = admin_get(f"{secure.http}/admin/v2/tenants")
    assert status == 401 and "reason" in body
    status, body = admin_get(f"{secure.http}/admin/v2/tenants", {"Authorization": f"Bearer {token()}"})
    assert status == 200 and "public" in body
    basic = base64.b64encode(b"basicuser:secret").decode()
    status, body = admin_get(f"{secure.http}/lookup/v2/topic/persistent/public/default/where",
                             {"Authorization": f"Basic {basic}"})
    assert status == 200 and body["brokerUrl"] == secure.binary
    assert body["brokerUrlTls"].startswith("pulsar+ssl://") and body["httpUrlTls"].startswith("https://")
    context = ssl.create_default_context(cafile=secure.pki["ca"])
    context.load_cert_chain(secure.pki["superuser_cert"], secure.pki["superuser_key"])
    status, body = admin_get(f"{secure.https}/admin/v2/tenants", context=context)  # the certificate's CN
    assert status == 200 and "public" in body
    anonymous = ssl.create_default_context(cafile=secure.pki["ca"])
    assert admin_get(f"{secure.https}/admin/v2/tenants", context=anonymous)[0] == 401
    # the web console's API is behind the same authentication, and knows who asks
    assert admin_get(f"{secure.http}/console/api/whoami")[0] == 401
    status, body = admin_get(f"{secure.http}/console/api/whoami", {"Authorization": f"Bearer {token('carol')}"})
    assert status == 200 and body == {"role": "carol"}
    status, body = admin_get(f"{secure.https}/console/api/whoami", context=context)
    assert status == 200 and body == {"role": "superuser"}


def test_stalled_and_garbage_https_handshakes_harm_no_one(secure: Secure) -> None:
    import socket

    port = int(secure.https.rsplit(":", 1)[1])
    stalled = socket.create_connection(("127.0.0.1", port))
    garbage = socket.create_connection(("127.0.0.1", port))
    garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP to the HTTPS port
    try:
        context = ssl.create_default_context(cafile=secure.pki["ca"])
        status, body = admin_get(f"{secure.https}/admin/v2/tenants", {"Authorization": f"Bearer {token()}"},
                                 context=context)
        assert status == 200 and "public" in body
    finally:
        stalled.close()
        garbage.close()
