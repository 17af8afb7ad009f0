"""Shell completion for bash, zsh and fish: `xce --install-completion [SHELL]`.

Why not Typer's own: it builds the whole command tree (and pydantic adapters) on every TAB.
Here the shell scripts call `xce __complete WORD...` (with `XCE_COMPLETE_CWORD`, the index
of the word being completed), which imports only the group named on the line, reads its
commands and options from the Typer apps (no second list to keep in step), and asks the
controller for job ids, queue and host names with the light client and a short timeout; if
the controller does not answer, those just do not complete. Files complete where nothing
else does.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

SHELLS = ("bash", "zsh", "fish")

BASH = r"""# xce completion for bash (xce --install-completion bash)
_xce_complete() {
    local IFS=$'\n'
    COMPREPLY=($(XCE_COMPLETE_CWORD=$((COMP_CWORD - 1)) xce __complete \
                 "${COMP_WORDS[@]:1}" 2>/dev/null))
}
complete -o default -o bashdefault -F _xce_complete xce
"""

ZSH = r"""#compdef xce
# xce completion for zsh (xce --install-completion zsh)
_xce() {
    local -a found
    found=("${(@f)$(XCE_COMPLETE_CWORD=$((CURRENT - 2)) xce __complete \
                    "${(@)words[2,-1]}" 2>/dev/null)}")
    if (( ${#found} )) && [[ -n "${found[1]}" ]]; then
        compadd -- "${found[@]}"
    else
        _files
    fi
}
compdef _xce xce
"""

FISH = r"""# xce completion for fish (xce --install-completion fish)
function __xce_complete
    set -l tokens (commandline -opc) (commandline -ct)
    set -l cword (math (count $tokens) - 2)
    env XCE_COMPLETE_CWORD=$cword xce __complete $tokens[2..-1] 2>/dev/null
end
complete -c xce -f -a '(__xce_complete)'
"""

SCRIPTS = {"bash": BASH, "zsh": ZSH, "fish": FISH}


def script(shell: str) -> str:
    if shell not in SCRIPTS:
        raise ValueError(f"no completion for shell {shell!r}: use {', '.join(SHELLS)}")
    return SCRIPTS[shell]


def target(shell: str, home: Path) -> Path:
    """Where each shell loads completions from on demand (no rc-file edits for bash with
    bash-completion, and fish); zsh needs ~/.zfunc in fpath before compinit."""
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    return {
        "bash": data / "bash-completion" / "completions" / "xce",
        "zsh": home / ".zfunc" / "_xce",
        "fish": config / "fish" / "completions" / "xce.fish",
    }[shell]


def install(shell: str | None) -> int:
    shell = shell or Path(os.environ.get("SHELL", "bash")).name
    try:
        text = script(shell)
    except ValueError as exc:
        sys.stderr.write(f"xce: error: {exc}\n")
        return 2
    path = target(shell, Path.home())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    notes = {
        "bash": "new bash shells load it (with the bash-completion package)",
        "zsh": "add `fpath=(~/.zfunc $fpath); autoload -Uz compinit; compinit` to "
        "~/.zshrc if it is not there",
        "fish": "new fish shells load it",
    }
    sys.stdout.write(f"{shell} completion installed in {path}: {notes[shell]}\n")
    return 0


def main_option(args: list[str]) -> int | None:
    """`xce --install-completion [SHELL]` / `xce --show-completion SHELL`, else None."""
    if not args or args[0] not in ("--install-completion", "--show-completion"):
        return None
    shell = args[1] if len(args) > 1 else None
    if args[0] == "--install-completion":
        return install(shell)
    try:
        sys.stdout.write(script(shell or Path(os.environ.get("SHELL", "bash")).name))
    except ValueError as exc:
        sys.stderr.write(f"xce: error: {exc}\n")
        return 2
    return 0


# --- answering a TAB ----------------------------------------------------------------------------

# Option values and positional arguments that name things the controller knows.
_VALUE_KINDS = {"--queue": "queue", "-q": "queue", "--host": "host", "-m": "host"}
_POSITIONAL_KINDS = {"job": "job", "host": "host", "queue": "queue"}
_NO_POSITIONAL_LOOKUP = {
    ("job", "submit"),
    ("job", "list"),
    ("host", "list"),
    ("queue", "list"),
    ("queue", "create"),
}


def complete(words: list[str], cword: int) -> list[str]:
    """Candidates for `words[cword]` (words after `xce`)."""
    from xce.cli.main import GROUPS, TOP_LEVEL

    words = list(words) + [""] * (cword + 1 - len(words))
    current = words[cword]
    if cword == 0:
        names = [
            *GROUPS,
            *_top_level_names(TOP_LEVEL),
            "--help",
            "--version",
            "--install-completion",
        ]
        return _matching(names, current)
    group = words[0]
    if group == "--install-completion":
        return _matching(list(SHELLS), current) if cword == 1 else []
    if group not in GROUPS:
        return []
    module, attr, _ = GROUPS[group]
    app = getattr(importlib.import_module(module), attr)
    commands = {
        (i.name or i.callback.__name__.replace("_", "-")): i.callback
        for i in app.registered_commands
        if i.callback is not None
    }
    if cword == 1:
        return _matching(sorted(commands), current)
    callback = commands.get(words[1])
    if callback is None:
        return []
    if current.startswith("-"):
        return _matching([*_option_names(callback), "--help"], current)
    previous = words[cword - 1]
    if previous in _VALUE_KINDS:
        return _matching(_names(_VALUE_KINDS[previous], words), current)
    if (group, words[1]) in _NO_POSITIONAL_LOOKUP or _takes_value(callback, previous):
        return []
    return _matching(_names(_POSITIONAL_KINDS[group], words), current)


def _matching(names: list[str], prefix: str) -> list[str]:
    return [n for n in names if n.startswith(prefix)]


def _top_level_names(modules: tuple[str, ...]) -> list[str]:
    import typer

    app = typer.Typer()
    for module in modules:
        importlib.import_module(module).register(app)
    return sorted(
        i.name or i.callback.__name__.replace("_", "-")
        for i in app.registered_commands
        if i.callback is not None
    )


def _options(callback: Any) -> list[tuple[list[str], bool]]:
    """(option names, takes a value) of each option of a Typer command function."""
    from typer.models import OptionInfo

    out = []
    for name, default in zip(
        reversed(callback.__code__.co_varnames[: callback.__code__.co_argcount]),
        reversed(callback.__defaults__ or ()),
        strict=False,
    ):
        if isinstance(default, OptionInfo) and not default.hidden:
            decls = [
                d
                for decl in (default.param_decls or (f"--{name.replace('_', '-')}",))
                for d in decl.split("/")
            ]
            is_flag = str(callback.__annotations__.get(name)) == "bool"
            out.append((decls, not is_flag))
    return out


def _option_names(callback: Any) -> list[str]:
    return sorted(d for decls, _ in _options(callback) for d in decls if d.startswith("--"))


def _takes_value(callback: Any, word: str) -> bool:
    return any(word in decls and value for decls, value in _options(callback))


def _names(kind: str, words: list[str]) -> list[str]:
    """Job ids, queue or host names from the controller; nothing if it does not answer."""
    from xce.cli.common import client_settings
    from xce.client.light import LightClient

    controllers = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--controller"]
    try:
        settings = client_settings(controllers or None)
        from xce.auth.contexts import client_ssl_context

        with LightClient(
            settings.controllers,
            settings.token,
            timeout=2.0,
            ssl_context=client_ssl_context(settings),
            insecure=settings.insecure,
        ) as client:
            if kind == "job":
                jobs = client.jobs(limit=500)["jobs"]
                return [j["id"] for j in jobs if j.get("state") not in ("DONE", "EXIT")] + [
                    j["id"] for j in jobs if j.get("state") in ("DONE", "EXIT")
                ]
            if kind == "queue":
                return [q["name"] for q in client.queues()]
            return [h["name"] for h in client.hosts()]
    except (Exception, SystemExit):  # completion never prints an error into the prompt
        return []


def answer(words: list[str]) -> int:
    """`xce __complete WORD...`: one candidate per line."""
    try:
        cword = int(os.environ.get("XCE_COMPLETE_CWORD", len(words) - 1))
    except ValueError:
        return 2
    for name in complete(words, max(cword, 0)):
        sys.stdout.write(name + "\n")
    return 0
