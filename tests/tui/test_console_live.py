"""The console against a real controller and worker: live rows, actions, filter, refusals."""

from __future__ import annotations

from tests.integration.cluster import ADMIN_TOKEN, USER_TOKEN, Cluster
from tests.tui.helpers import footer_keys, notifications, screen_text, until
from xce.console.app import XceTui
from xce.console.screens.confirm import ConfirmScreen


def _state(app: XceTui, job_id: str) -> str | None:
    row = app.jobs.rows.get(job_id)
    return row["state"] if row else None


async def test_submitted_job_appears_and_is_suspended_from_the_console(cluster: Cluster) -> None:
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.connection == "ok", "connected")
        job_id = cluster.submit(command="sleep 60", name="longsleep")
        await until(pilot, lambda: _state(app, job_id) == "RUN", "the job running in the table")
        await until(pilot, lambda: "longsleep" in screen_text(pilot), "the row on screen")
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert f"Suspend job {job_id}?" in app.screen.text
        await pilot.press("y")
        await until(pilot, lambda: _state(app, job_id) == "USUSP", "USUSP from the stream")
        assert cluster.job(job_id)["state"] == "USUSP"
        await until(pilot, lambda: "USUSP" in screen_text(pilot), "USUSP on screen")
        await pilot.press("r", "y")
        await until(pilot, lambda: _state(app, job_id) == "RUN", "resumed")
        cluster.control(job_id, "kill")


async def test_filter_narrows_the_table_and_bad_terms_are_named(cluster: Cluster) -> None:
    a = cluster.submit(command="true", hold=True, name="in-normal")
    b = cluster.submit(command="true", hold=True, name="in-fragile", queue="fragile")
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: {a, b} <= set(app.jobs.visible), "both jobs listed")
        await pilot.press("slash", *"queue:fragile state=PSUSP name~fragile", "enter")
        await until(pilot, lambda: app.jobs.visible == [b], "only the fragile job")
        assert "in-fragile" in screen_text(pilot) and "in-normal" not in screen_text(pilot)
        await pilot.press("slash", "ctrl+u", *"colour=red", "enter")
        assert any("unknown field 'colour'" in n for n in notifications(pilot))
        assert app.jobs.visible == [b]  # the last good filter stays
        await pilot.press("escape", "escape")
        await until(pilot, lambda: {a, b} <= set(app.jobs.visible), "filter cleared")


async def test_multi_select_kill_asks_first_and_names_every_job(cluster: Cluster) -> None:
    ids = [cluster.submit(command="sleep 60", hold=True, name="killset") for _ in range(3)]
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: set(ids) <= set(app.jobs.rows), "three jobs")
        await pilot.press("slash", *"name=killset", "enter")
        await until(pilot, lambda: app.jobs.visible == ids, "only the three")
        await pilot.press("space", "space")  # selects the first two
        assert app.jobs.selected == set(ids[:2])
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmScreen)
        assert f"Kill 2 jobs: {ids[0]}, {ids[1]}?" in app.screen.text
        await pilot.press("n")
        await pilot.pause(0.3)
        assert [cluster.job(i)["state"] for i in ids] == ["PSUSP"] * 3
        await pilot.press("k", "y")
        await until(
            pilot, lambda: [_state(app, i) for i in ids[:2]] == ["EXIT", "EXIT"], "both killed"
        )
        assert cluster.job(ids[2])["state"] == "PSUSP"
        assert any(n.startswith("Done: Kill") for n in notifications(pilot))


async def test_a_normal_user_is_not_offered_host_close(cluster: Cluster) -> None:
    app = XceTui([cluster.url], USER_TOKEN)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.access.permissions is not None, "whoami answered")
        assert not app.access.allows("host.close")  # alice's role is user
        await until(pilot, lambda: "w1" in app.hosts, "hosts listed")
        await pilot.press("3")
        await pilot.pause(0.3)
        assert not any("Close" in key for key in footer_keys(pilot))
        await pilot.press("c")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmScreen)
        assert cluster.get("/api/v1/hosts/w1")["admin"] == "open"


async def test_the_servers_refusal_is_shown_in_a_notification(cluster: Cluster) -> None:
    job_id = cluster.submit(command="true", name="quick")
    cluster.wait_state(job_id, "DONE")
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: _state(app, job_id) == "DONE", "the finished job listed")
        await pilot.press("slash", *f"id={job_id}", "enter")
        await until(pilot, lambda: app.jobs.visible == [job_id], "only that job shown")
        await pilot.press("s")  # offered (the admin may), refused by the server: it ended
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: any("refused" in n for n in notifications(pilot)), "the refusal")
        refusal = next(n for n in notifications(pilot) if "refused" in n)
        assert "409" in refusal and job_id in refusal


async def test_arrays_collapse_to_one_row_and_expand_to_their_tasks(cluster: Cluster) -> None:
    array = cluster.submit(command="sleep 30", array="1-4")
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: f"{array}[2]" in app.jobs.rows, "two tasks running")
        await pilot.press("slash", *f"array={array}", "enter")
        await until(pilot, lambda: app.jobs.visible == [f"@{array}"], "one collapsed row")
        await pilot.press("e")
        await until(
            pilot,
            lambda: app.jobs.visible[1:] == [f"{array}[1]", f"{array}[2]", f"{array}[pending]"],
            "the tasks",
        )
        assert f"-{array}[4]" in screen_text(pilot)
        cluster.control(array, "kill")


async def test_a_lost_controller_shows_a_banner_and_the_console_reconnects(
    cluster: Cluster,
) -> None:
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.connection == "ok", "connected")
        assert cluster.controller is not None
        cluster.controller.terminate()
        cluster.controller.wait(15)
        await until(pilot, lambda: "! connection lost" in screen_text(pilot), "the banner")
        cluster.start_controller()
        await until(pilot, lambda: app.connection == "ok", "reconnected", timeout=30)
        job_id = cluster.submit(command="true", hold=True, name="after-restart")
        await until(pilot, lambda: job_id in app.jobs.rows, "a job seen on the new stream")
        await until(pilot, lambda: "! connection" not in screen_text(pilot), "banner gone")


async def test_job_detail_shows_fields_usage_history_and_output(cluster: Cluster) -> None:
    job_id = cluster.submit(command="echo hello-detail; echo oops >&2", name="detailjob")
    cluster.wait_state(job_id, "DONE")
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 60)) as pilot:
        await until(pilot, lambda: job_id in app.jobs.rows, "the job listed")
        await pilot.press("slash", *"name=detailjob", "enter")
        await until(pilot, lambda: app.jobs.visible == [job_id], "only the job")
        await pilot.press("enter")
        await until(pilot, lambda: "hello-detail" in screen_text(pilot), "stdout on screen")
        await until(pilot, lambda: "finished" in screen_text(pilot), "the fetched history")
        text = screen_text(pilot)
        assert "exit_code    0" in text
        assert "Usage" in text and "Dependencies" in text
        assert "submitted" in text and "on w1 (attempt 0)" in text and "finished" in text
        await pilot.press("o")  # the tail pane switches to stderr
        await until(pilot, lambda: "stderr: the file" in screen_text(pilot), "stderr pane")
        await until(
            pilot,
            lambda: "oops" in "".join(app.screen.query_one("#tail").lines),
            "stderr on screen",
        )
        await pilot.press("escape")
        assert app.screen is app.jobs_screen


async def test_login_screen_takes_a_token_and_shows_refusals(cluster: Cluster) -> None:
    from textual.widgets import Input, Static

    from xce.console.screens.login import LoginScreen

    app = XceTui([cluster.url], None)  # no token: the controller answers 401
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, LoginScreen), "the login screen")
        app.screen.query_one("#token", Input).focus()
        await pilot.press(*"wrong-token", "enter")
        message = app.screen.query_one("#message", Static)
        await until(pilot, lambda: "401" in str(message.render()), "the refusal")
        app.screen.query_one("#token", Input).value = ""
        await pilot.press(*ADMIN_TOKEN, "enter")
        await until(pilot, lambda: app.connection == "ok", "connected with the token")
        assert not isinstance(app.screen, LoginScreen)


async def test_command_palette_offers_host_actions(cluster: Cluster) -> None:
    app = XceTui([cluster.url], ADMIN_TOKEN)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "w1" in app.hosts, "hosts listed")
        await pilot.press("ctrl+p")
        await pilot.press(*"host w1 drain")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the dialog")
        assert "Drain host w1?" in app.screen.text
        await pilot.press("n")
        assert cluster.get("/api/v1/hosts/w1")["admin"] == "open"
