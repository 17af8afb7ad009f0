"""Actions the user may not do are not offered (whoami permissions); without whoami every
action is offered and the server decides."""

from __future__ import annotations

from tests.tui.helpers import footer_keys
from tests.tui.sample import sample_app
from tui.perms import Access
from tui.screens.confirm import ConfirmScreen


def test_access_from_whoami_scopes() -> None:
    access = Access.from_whoami({"user": "alice", "roles": ["user"],
                                 "permissions": ["job:view:self", "job:control:self"]})
    assert access.allows("job.kill") and not access.allows("host.close")
    assert not access.allows("queue.close")
    assert Access.unknown().allows("host.close")
    assert Access.from_whoami({"user": "root", "permissions": ["*"]}).allows("host.drain")


async def test_jobs_screen_hides_what_whoami_does_not_grant() -> None:
    app = sample_app()
    app.access = Access("alice", ("viewer",), frozenset({"job:view:all"}))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.4)
        footer = footer_keys(pilot)
        assert "Filter" in footer and "Kill" not in footer and "Suspend" not in footer
        await pilot.press("k")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("3")
        await pilot.pause(0.4)
        footer = footer_keys(pilot)
        assert "Topology" in footer and "Drain" not in footer
        await pilot.press("d")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_without_whoami_every_action_is_offered() -> None:
    app = sample_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause(0.4)
        assert "Kill" in footer_keys(pilot)
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmScreen)
        assert "Kill job 101?" in app.screen.text
