"""The security side of the CLI: ``magnetar tokens`` in Pulsar's shape, and ``admin``, ``produce``
and ``consume`` with ``--token`` / ``--auth-plugin``/``--auth-params`` and TLS options, against an
in-process broker with token and TLS authentication on a TLS listener."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from magnetar.broker import BrokerConfig
from magnetar.cli.main import _register_commands, app
from magnetar.runtime.certs import make_pki
from magnetar.security import create_token
from tests.admin.conftest import HttpBroker, running_http_broker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    if not any(group.name == "tokens" for group in app.registered_groups):
        _register_commands()
    return CliRunner()


def run(runner: CliRunner, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_secret_key_token_round_trip(runner: CliRunner, tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    assert run(runner, "tokens", "create-secret-key", "--output", str(key))[0] == 0
    assert len(key.read_bytes()) == 32
    code, token = run(runner, "tokens", "create", "--subject", "alice", "--secret-key", f"file://{key}",
                      "--expiry-time", "1h")
    assert code == 0
    code, shown = run(runner, "tokens", "show", token.strip())
    assert code == 0 and json.loads(shown)["claims"]["sub"] == "alice" and "exp" in json.loads(shown)["claims"]
    code, out = run(runner, "tokens", "validate", token.strip(), "--secret-key", f"file://{key}")
    assert code == 0 and json.loads(out)["role"] == "alice"
    other = tmp_path / "other.key"
    run(runner, "tokens", "create-secret-key", "--output", str(other))
    assert run(runner, "tokens", "validate", token.strip(), "--secret-key", f"file://{other}")[0] == 1
    expired = create_token("alice", secret_key=key.read_bytes(), expires_at_s=1_000_000)
    code, out = run(runner, "tokens", "validate", expired, "--secret-key", f"file://{key}")
    assert code == 1 and "expired" in out


def test_base64_secret_key_and_key_pairs(runner: CliRunner, tmp_path: Path) -> None:
    code, text = run(runner, "tokens", "create-secret-key", "--base64")
    assert code == 0 and len(base64.b64decode(text.strip())) == 32
    reference = f"data:;base64,{text.strip()}"
    code, token = run(runner, "tokens", "create", "-s", "bob", "--secret-key", reference)
    assert code == 0 and run(runner, "tokens", "validate", token.strip(), "-sk", reference)[0] == 0
    for algorithm in ("RS256", "ES256"):
        private, public = tmp_path / f"{algorithm}.key", tmp_path / f"{algorithm}.pub"
        assert run(runner, "tokens", "create-key-pair", "-a", algorithm, "--output-private-key", str(private),
                   "--output-public-key", str(public))[0] == 0
        code, token = run(runner, "tokens", "create", "-s", "carol", "--private-key", f"file://{private}")
        assert code == 0
        code, out = run(runner, "tokens", "validate", token.strip(), "--public-key", f"file://{public}")
        assert code == 0 and json.loads(out)["role"] == "carol"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpBroker, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("cli-secure")
    pki = make_pki(str(directory / "pki"), client_roles=("operator",))
    (directory / "secret.key").write_bytes(b"cli-secret-cli-secret-cli-secret")
    pki["secret"] = str(directory / "secret.key")
    config = BrokerConfig(advertised_port=0, advertised_host="localhost", authentication_enabled=True,
                          authentication_providers=("token", "tls"), token_secret_key=f"file://{pki['secret']}",
                          tls_enabled=True, tls_certificate_file_path=pki["broker_cert"],
                          tls_key_file_path=pki["broker_key"], tls_trust_certs_file_path=pki["ca"])
    with running_http_broker(config) as running:
        yield running, pki


def test_admin_produce_and_consume_with_credentials(runner: CliRunner, secured: tuple[HttpBroker, dict[str, str]],
                                                    tmp_path: Path) -> None:
    broker, pki = secured
    token_file = tmp_path / "alice.token"
    token_file.write_text(create_token("alice", secret_key=Path(pki["secret"]).read_bytes()))
    url = broker.http_url
    code, out = run(runner, "admin", "--url", url, "tenants", "list")
    assert code == 1 and "401" in out
    code, out = run(runner, "admin", "--url", url, "--token", f"file://{token_file}", "tenants", "list")
    assert code == 0 and "public" in out
    assert broker.thread.server is not None
    tls_url = f"pulsar+ssl://localhost:{broker.thread.server.tls_port}"
    topic = "persistent://public/default/cli-secure"
    code, out = run(runner, "produce", topic, "-m", "hello", "--service-url", tls_url, "--timeout-s", "10",
                    "--token", f"file://{token_file}", "--tls-trust-cert", pki["ca"])
    assert code == 0, out
    code, out = run(runner, "consume", topic, "-s", "sub", "--service-url", tls_url, "--timeout-s", "10",
                    "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationTls",
                    "--auth-params", f"tlsCertFile:{pki['operator_cert']},tlsKeyFile:{pki['operator_key']}",
                    "--tls-trust-cert", pki["ca"])
    assert code == 0 and "hello" in out, out
    code, out = run(runner, "produce", topic, "-m", "x", "--service-url", tls_url, "--timeout-s", "3",
                    "--token", "junk", "--tls-trust-cert", pki["ca"])
    assert code == 1 and "uthentication" in out, out
