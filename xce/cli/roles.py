"""Role subcommands: `xce controller`, `xce worker` and `xce up` (the embedded default)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer

from xce.cli.common import fail


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _load(config: Path | None):  # type: ignore[no-untyped-def]
    from xce.config import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        fail(exc.message)


def register(app: typer.Typer) -> None:
    @app.command()
    def controller(
        config: Path = typer.Option(None, "--config", "-c", help="cluster config (TOML)"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
    ) -> None:
        """Run a controller: REST API, scheduler and state."""
        from xce.controller.main import serve
        from xce.core.errors import XceError

        _setup_logging(verbose)
        cfg = _load(config)
        try:
            asyncio.run(serve(cfg))
        except XceError as exc:
            fail(exc.message)
        except OSError as exc:
            fail(f"cannot start the controller: {exc}")

    @app.command()
    def worker(
        config: Path = typer.Option(None, "--config", "-c", help="cluster config (TOML)"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
    ) -> None:
        """Run a worker: registers this host and runs the jobs dispatched to it."""
        from xce.core.errors import XceError
        from xce.worker.agent import run_worker

        _setup_logging(verbose)
        cfg = _load(config)
        try:
            asyncio.run(run_worker(cfg))
        except XceError as exc:
            fail(exc.message)
        except OSError as exc:
            fail(f"cannot start the worker: {exc}")

    @app.command()
    def up(
        state_dir: Path = typer.Option(
            None, "--state-dir", help="where state lives (default ~/.local/share/xce)"
        ),
        port: int = typer.Option(0, "--port", help="controller port (default 6820)"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
    ) -> None:
        """Start the embedded default: a controller and one local worker on this machine."""
        from xce.cli.embedded import run_embedded

        _setup_logging(verbose)
        run_embedded(state_dir, port or None)
