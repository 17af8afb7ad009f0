"""The `xce` entry point: one executable, every role and every verb.

Start-up time matters: users and their scripts run `xce job submit` and `xce job list` in
loops, like sbatch and bjobs. So the command tree is built lazily: `xce job ...` imports
only `xce.cli.jobs` (and what its command needs), not the console, the controller or the
PKI. `GROUPS` names each noun's module; `TOP_LEVEL` the modules whose `register(app)` adds
top-level verbs (`controller`, `up`, `login`, `tui`, ...); these are loaded only when the
first word is not a group. `app` (module attribute) is still the whole tree, for tests and
tools that want it.

Rich is not used for help or errors: usage errors are one line on stderr with exit 2
(`xce: error: ...`), and help shows literal `[...]` (plain click formatting).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

HELP = "XCE cluster manager: controller, worker and the commands to drive them."

# noun -> (module, Typer attribute, help)
GROUPS: dict[str, tuple[str, str, str]] = {
    "job": ("xce.cli.jobs", "app", "Submit, list, show and control jobs."),
    "queue": ("xce.cli.queues", "app", "List, create and switch queues."),
    "host": ("xce.cli.hosts", "app", "List, show, open, close and drain hosts."),
    "cluster": (
        "xce.cli.cluster",
        "app",
        "Controller candidates: which is primary, epochs, replication lag.",
    ),
    "admin": (
        "xce.cli.admin",
        "app",
        "Maintenance: check and repair the WAL; read the audit log; switchover.",
    ),
    "user": ("xce.cli.users", "app", "Add, list, delete users; change passwords."),
    # xce.cli.init adds `xce token join` to identity's token_app: load it through init.
    "token": ("xce.cli.init", "token_app", "Service and join tokens, revocation, key rotation."),
    "tls": ("xce.cli.tls", "app", "Create the cluster CA and TLS certificates."),
    "rsv": (
        "xce.cli.rsv",
        "app",
        "Advance reservations: add, list, delete (brsvadd, brs, brsvdel).",
    ),
    "compat": (
        "xce.cli.compat.commands",
        "app",
        "Familiar commands (sbatch, squeue, bsub, bjobs, qsub, qstat...): install, list, run.",
    ),
}
# Top-level verbs the fast path runs without the Typer tree: verb -> (module, function).
FAST_VERBS: dict[str, tuple[str, str]] = {
    "acct": ("xce.cli.acct", "acct"),
    "report": ("xce.cli.acct", "report"),
}
# Modules whose `register(app)` adds top-level commands, in help order.
TOP_LEVEL = (
    "xce.cli.roles",
    "xce.cli.simulate",
    "xce.cli.init",
    "xce.cli.tui_cmd",
    "xce.cli.acct",
    "xce.cli.identity",
)


def _print_version(value: bool) -> None:
    if value:
        import typer

        from xce import __version__

        typer.echo(f"xce {__version__}")
        raise typer.Exit()


def build_app(first: str | None = None, shallow: bool = False) -> Any:
    """The Typer app; with `first` naming a group, only that group is loaded. `shallow`
    (for the root's own help page, which shows each group's name and line only): every
    group is an empty stand-in carrying its help text, so no group module is imported and
    no group's commands are built."""
    import typer

    app = typer.Typer(
        name="xce",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        epilog="Shell completion: xce --install-completion [bash|zsh|fish] "
        "(or --show-completion SHELL to print the script).",
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )

    @app.callback()
    def _options(
        version: bool = typer.Option(
            False,
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version and exit.",
        ),
    ) -> None:
        """XCE cluster manager: controller, worker and the commands to drive them."""

    only = first in GROUPS
    if not only:
        for module in TOP_LEVEL:
            importlib.import_module(module).register(app)
    for noun, (module, attr, text) in GROUPS.items():
        if only and noun != first:
            continue
        group = typer.Typer() if shallow else getattr(importlib.import_module(module), attr)
        group.rich_markup_mode = None  # plain help: `[...]` stays literal, no rich import
        app.add_typer(group, name=noun, help=text)
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _first_word(args: list[str]) -> str | None:
    return next((a for a in args if not a.startswith("-")), None)


def run(args: list[str] | None = None) -> None:
    """Parse and run; usage errors are one line on stderr and exit code 2."""
    if args is None:  # started as `squeue`, `bjobs`, ... (xce compat install): that tool only
        import os

        from xce.cli.compat import invoked_as

        tool = invoked_as(sys.argv[0], os.environ, sys.executable)
        if tool is not None:
            from xce.cli.compat.base import main as compat_main

            sys.exit(compat_main(tool, sys.argv[1:]))
    args = sys.argv[1:] if args is None else list(args)
    if args[:2] == ["compat", "run"] and len(args) > 2 and not args[2].startswith("-"):
        from xce.cli.compat.base import main as compat_main

        sys.exit(compat_main(args[2], args[3:]))
    if args[:1] == ["__complete"] or args[:1] in (["--install-completion"], ["--show-completion"]):
        from xce.cli import completion

        code = (
            completion.answer(args[1:]) if args[0] == "__complete" else completion.main_option(args)
        )
        sys.exit(code)
    if args[:1] == ["launch"]:  # inside jobs, often once per MPI daemon: stdlib only, fast
        from xce.cli.launch import main as launch_main

        sys.exit(launch_main(args[1:]))
    import gc

    # Start-up makes many objects and no cyclic garbage worth a collection: the collector
    # waits until the command runs (`try_run` turns it on before calling the command, and
    # the Typer path below), which saves about a twentieth of a hot command's start.
    gc.disable()
    from xce.cli.fast import try_run

    try:
        if try_run(args, GROUPS, FAST_VERBS):  # `xce job list`, `xce acct` & co.: no Typer tree
            sys.exit(0)
    except BrokenPipeError:  # `xce job list | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    gc.enable()
    import typer.main
    from typer._click import exceptions as click_exc
    from typer.exceptions import Abort  # typer's vendored click has no Abort of its own

    root_help = args in ([], ["--help"])
    command = typer.main.get_command(build_app(_first_word(args), shallow=root_help))
    try:
        code = command.main(args=args, prog_name="xce", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as exc:
        exc.show()  # `xce job` alone: the help, as click does
        sys.exit(2)
    except click_exc.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "xce"
        sys.stderr.write(f"xce: error: {exc.format_message()} (see '{where} --help')\n")
        sys.exit(2)
    except click_exc.ClickException as exc:
        sys.stderr.write(f"xce: error: {exc.format_message()}\n")
        sys.exit(exc.exit_code)
    except Abort:
        sys.stderr.write("xce: aborted\n")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    run()
