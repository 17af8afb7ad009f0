"""Role subcommands: `xce controller`, `xce worker` and `xce up` (the embedded default)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from xce.cli.common import fail

if TYPE_CHECKING:
    from xce.config.settings import Config


def _setup_logging(verbose: bool) -> None:
    from xce.telemetry.logs import setup_logging

    setup_logging(verbose)


def _load(config: Path | None) -> Config:
    from xce.config.loader import load_config
    from xce.core.errors import ConfigError

    try:
        return load_config(config)
    except ConfigError as exc:
        fail(exc.message)


INSECURE = typer.Option(
    False, "--insecure", help="development only: allow plain HTTP off loopback ([tls] insecure)"
)


def _run_role(
    name: str,
    main: Callable[[Config], Coroutine[Any, Any, None]],
    config: Path | None,
    verbose: bool,
    insecure: bool = False,
) -> None:
    """Load the config and run a role; expected failures become one-line messages, and an
    unexpected one a line naming the log that keeps its traceback (`xce.cli.crash`)."""
    import dataclasses

    from xce.client import ApiError
    from xce.core.errors import XceError

    _setup_logging(verbose)
    cfg: Config | None = None
    try:
        if config is not None:
            from xce.config.file_safety import check_config

            check_config(config)  # StrictModes for the file that says who may run as root
        cfg = _load(config)
        if insecure:
            cfg = dataclasses.replace(cfg, tls=dataclasses.replace(cfg.tls, insecure=True))
        import asyncio  # here, not at the top: `xce --help` loads this module

        from xce.server.collector import pace_collector

        pace_collector()
        asyncio.run(main(cfg))
    except typer.Exit:
        raise
    except XceError as exc:
        fail(exc.message)
    except ApiError as exc:  # e.g. a worker refused by the controller (403, TLS)
        fail(f"the {name} stopped: {exc.message}")
    except OSError as exc:
        fail(f"cannot start the {name}: {exc}")
    except Exception as exc:
        from xce.cli.crash import crashed

        crashed(name, exc, [_state_dir(name, cfg)])


def _state_dir(name: str, cfg: Config | None) -> Path | None:
    """The role's own directory, where its error log belongs (None before the config)."""
    if cfg is None:
        return None
    return cfg.worker.spool_dir if name == "worker" else cfg.controller.state_dir


def register(app: typer.Typer) -> None:
    @app.command()
    def controller(
        config: Path = typer.Option(None, "--config", "-c", help="cluster config (TOML)"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
        insecure: bool = INSECURE,
    ) -> None:
        """Run a controller: REST API, scheduler and state."""
        from xce.server.main import serve

        _run_role("controller", serve, config, verbose, insecure)

    @app.command()
    def standby(
        config: Path = typer.Option(None, "--config", "-c", help="cluster config (TOML)"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
        insecure: bool = INSECURE,
    ) -> None:
        """Run a standby controller: follows the primary's log, takes over by election."""
        import functools

        from xce.server.main import serve

        _run_role(
            "standby", functools.partial(serve, prefer_primary=False), config, verbose, insecure
        )

    @app.command()
    def worker(
        config: Path = typer.Option(None, "--config", "-c", help="cluster config (TOML)"),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
        insecure: bool = INSECURE,
    ) -> None:
        """Run a worker: registers this host and runs the jobs dispatched to it."""
        from xce.worker.agent.worker_agent import run_worker

        _run_role("worker", run_worker, config, verbose, insecure)

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
