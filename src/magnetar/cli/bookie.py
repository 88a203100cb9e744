"""``magnetar bookie``: run a storage node (``runtime.bookie.run_bookie``)."""

from __future__ import annotations

import typer

from magnetar.base.errors import InvalidArgumentError


def register(app: typer.Typer) -> None:
    @app.command("bookie")
    def bookie(
        metadata: str = typer.Option(None, "--metadata", help="metadata store URL (memory:, embedded:/dir, zk://...)"),
        port: int = typer.Option(None, "--port", help="port to listen on (default 3181; 0 picks a free one)"),
        host: str = typer.Option(None, "--host", help="address to listen on and register (default 127.0.0.1)"),
        data_dir: str = typer.Option(None, "--data-dir", help="the bookie's data directory"),
        config: str = typer.Option(None, "--config", help="TOML file with a [bookie] section"),
        rack: str = typer.Option(None, "--rack", help="this bookie's rack, /rack or /region/rack (racks-info)"),
        region: str = typer.Option(None, "--region", help="this bookie's region (with --rack R: stored as /region/R)"),
    ) -> None:
        """Run a bookie: journal, entry logs, index; registers itself in the metadata store."""
        from magnetar.runtime.bookie import main
        from magnetar.runtime.config import load_config, read_toml, section_of
        from magnetar.storage import BookieConfig, CookieMismatchError

        try:
            loaded = load_config(
                BookieConfig,
                "bookie",
                file_values=section_of(read_toml(config), "bookie"),
                overrides={"metadata_url": metadata, "port": port, "host": host, "data_dir": data_dir,
                           "rack": rack, "region": region},
            )
        except InvalidArgumentError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        try:
            main(loaded)
        except CookieMismatchError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(3) from None
