"""``magnetar autorecovery``: run an auditor candidate and a replication worker
(``runtime.autorecovery.run_autorecovery``) against a metadata store until SIGTERM."""

from __future__ import annotations

import typer

from magnetar.base.errors import InvalidArgumentError


def register(app: typer.Typer) -> None:
    @app.command("autorecovery")
    def autorecovery(
        metadata: str = typer.Option(..., "--metadata", help="metadata store URL (zk://..., embedded:/dir)"),
        lost_bookie_delay_ms: int = typer.Option(
            0, "--lost-bookie-delay-ms", help="how long a bookie must stay unregistered before re-replication"
        ),
        open_ledger_grace_ms: int = typer.Option(
            30_000, "--open-ledger-grace-ms", help="wait before fencing an open ledger whose tail lost a bookie"
        ),
        audit_interval_ms: int = typer.Option(600_000, "--audit-interval-ms", help="full audit at least this often"),
        batch: int = typer.Option(10, "--batch", help="entries copied in parallel"),
        poll_interval_ms: int = typer.Option(5_000, "--poll-interval-ms", help="workers re-scan markers this often"),
        bookie_tls_trust_cert: str = typer.Option(None, "--bookie-tls-trust-cert",
                                                  help="CA of TLS bookies (turns TLS to the bookies on)"),
        bookie_tls_cert: str = typer.Option(None, "--bookie-tls-cert", help="client certificate for the bookies"),
        bookie_tls_key: str = typer.Option(None, "--bookie-tls-key", help="its key"),
    ) -> None:
        """Run AutoRecovery: elected auditor + replication worker (restores Qw copies of lost bookies)."""
        from magnetar.ledger.autorecovery import AutoRecoveryConfig
        from magnetar.runtime.autorecovery import main

        try:
            config = AutoRecoveryConfig(
                lost_bookie_recovery_delay_ms=lost_bookie_delay_ms,
                audit_interval_ms=audit_interval_ms,
                open_ledger_grace_ms=open_ledger_grace_ms,
                rereplication_batch_count_max=batch,
                worker_poll_interval_ms=poll_interval_ms,
            )
        except InvalidArgumentError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        main(metadata, config, (bookie_tls_trust_cert, bookie_tls_cert, bookie_tls_key))
