"""The command palette (ctrl+p): every navigation and every control action the user may do.

Job actions apply to the jobs screen's selection (or cursor row); queue and host actions are
listed once per queue and host, so `close normal` or `drain w1` is a few keystrokes away.
Actions the user's permissions do not grant are not listed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider

from xce.console.actions import ACTIONS


class ConsoleCommands(Provider):
    def _commands(self) -> list[tuple[str, Callable[[], Any], str]]:
        app: Any = self.app
        out: list[tuple[str, Callable[[], Any], str]] = [
            (f"Go to {mode}", partial(app.action_go, mode), f"show the {mode} screen")
            for mode in ("jobs", "queues", "hosts", "cluster", "reservations")
        ]
        out.append(("Help: keys and filter syntax", app.action_help, "show the help screen"))
        for name, spec in ACTIONS.items():
            if not app.access.allows(name):
                continue
            kind = name.split(".")[0]
            if kind == "job":
                out.append(
                    (
                        f"Jobs: {spec.verb.lower()} selected",
                        partial(app.offer_jobs, name),
                        f"{spec.verb} the selected jobs (or the one under the cursor)",
                    )
                )
            else:
                names = sorted(app.queues if kind == "queue" else app.hosts)
                for target in names:
                    out.append(
                        (
                            f"{kind.capitalize()} {target}: {spec.verb.lower()}",
                            partial(app.offer, name, [target]),
                            spec.effect,
                        )
                    )
        return out

    async def discover(self) -> Hits:
        for text, callback, help_text in self._commands():
            yield DiscoveryHit(text, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, callback, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback, help=help_text)
