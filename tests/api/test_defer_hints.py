"""A refusal that points at `defer` names something its reader can use: the API's
`"defer": true`, and a command-line option only where that command has it (`xce job modify
--defer`, `xce job submit --defer`)."""

from __future__ import annotations

import re

import typer.main

from tests.api.conftest import Api
from xce.cli.main import build_app

JOBS = "/api/v1/jobs"


def _options(command: str) -> set[str]:
    """Every option string of `xce job COMMAND`, as the CLI parses it."""
    click = typer.main.get_command(build_app("job")).commands["job"].commands[command]
    return {o for p in click.params for o in (*p.opts, *p.secondary_opts)}


def _assert_usable(message: str, command: str) -> None:
    """The message offers the API's `"defer": true`, and each option it names (after `xce
    job X`, else of `command`) is one that command has."""
    assert '"defer": true' in message, message
    for named, option in re.findall(r"(?:xce job ([\w-]+) )?(--[\w-]+)", message):
        assert option in _options(named or command), (option, message)


async def test_a_refused_submit_names_the_apis_defer(api: Api) -> None:
    await api.register("w1", slots=4)
    too_big = await api.call("POST", JOBS, 400, json={"command": "true", "slots": 64})
    assert "xce job submit --defer" in too_big["error"]["message"]
    _assert_usable(too_big["error"]["message"], "submit")
    no_device = await api.call("POST", JOBS, 400, json={"command": "true", "gres": {"fpga": 1}})
    assert "no host of queue 'normal' has fpga devices" in no_device["error"]["message"]
    _assert_usable(no_device["error"]["message"], "submit")


async def test_a_refused_modify_names_xce_job_modify_defer(api: Api) -> None:
    await api.register("w1", slots=4)
    job = await api.submit(hold=True)
    refused = await api.call("PATCH", f"{JOBS}/{job}", 400, json={"slots": 64})
    message = refused["error"]["message"]
    assert "xce job modify --defer" in message
    _assert_usable(message, "modify")
    kept = await api.call("PATCH", f"{JOBS}/{job}", 200, json={"slots": 64, "defer": True})
    assert kept["slots"] == 64
