"""Actions the user may not do are not offered (whoami permissions); without whoami every
action is offered and the server decides."""

from __future__ import annotations

from tests.tui.helpers import footer_keys, until
from tests.tui.sample import sample_app
from xce.console.perms import Access
from xce.console.screens.confirm import ConfirmScreen


def test_access_from_whoami_scopes() -> None:
    access = Access.from_whoami(
        {"user": "alice", "roles": ["user"], "permissions": ["job:view:self", "job:control:self"]}
    )
    assert access.allows("job.kill") and not access.allows("host.close")
    assert not access.allows("queue.close")
    assert Access.unknown().allows("host.close")
    assert Access.from_whoami({"user": "root", "permissions": ["*"]}).allows("host.drain")


async def test_jobs_screen_hides_what_whoami_does_not_grant() -> None:
    app = sample_app()
    app.access = Access("alice", ("viewer",), frozenset({"job:view:all"}))
    async with app.run_test(size=(120, 30)) as pilot:
        # The footer fills once the screen is composed: under load that takes a while.
        await until(pilot, lambda: "Filter" in footer_keys(pilot), "the jobs footer")
        footer = footer_keys(pilot)
        assert "Kill" not in footer and "Suspend" not in footer
        await pilot.press("k")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("3")
        await until(pilot, lambda: "Topology" in footer_keys(pilot), "the hosts footer")
        assert "Drain" not in footer_keys(pilot)
        await pilot.press("d")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_without_whoami_every_action_is_offered() -> None:
    app = sample_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: "Kill" in footer_keys(pilot), "Kill in the footer")
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Kill job 101?" in app.screen.text
