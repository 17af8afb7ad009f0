"""The submit's checks that need no state: text fields, user, command, sizes, environment.

Kept apart from `ControllerService` (xce/controller/service.py) so the submission path reads
as the order of its checks (xce/controller/submission.py); `xce job modify` applies the same
text rule (xce/controller/modify.py). Each raises the request error that names the field.
"""

from __future__ import annotations

import operator
import pwd
import re

from xce.config.settings import ControllerSettings
from xce.controller.uids import UidCache
from xce.core.errors import Forbidden, InvalidRequest
from xce.core.jobfiles import check_file_pattern
from xce.protocol.bodies import SubmitBody
from xce.sched.admission.multihost import check_span, per_slot_memory
from xce.sched.expr import parse_requirement
from xce.store.files import RESERVED_OUTPUTS, safe_relative_path

USER_NAME = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
MAX_MEMORY_MB = 2**40  # as the submit schema's memory_mb (xce/protocol/bodies.py)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _uid_of(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


UIDS = UidCache(_uid_of)  # getpwnam per submit was a tenth of its CPU (xce/controller/uids.py)


def check_job_user(settings: ControllerSettings, user: str) -> None:
    """403 when `settings` forbid jobs to run as `user` on this controller's host.

    Root needs `allow_root_jobs`; another uid below `min_job_uid` must be in `job_users`;
    whatever role the submitter has. A name that does not resolve here (a user known only
    on the execution hosts) is left to the worker, which applies the same rule on its host.
    """
    uid = UIDS.uid(user)
    if uid is None:
        return
    if uid == 0:
        if not settings.allow_root_jobs:
            named = user if user == "root" else f"{user} (uid 0)"
            raise Forbidden(
                f"jobs may not run as {named}: the cluster does not allow root "
                "jobs ([controller] allow_root_jobs)"
            )
        return
    if uid < settings.min_job_uid and user not in settings.job_users:
        raise Forbidden(
            f"jobs may not run as {user}: uid {uid} is below [controller] "
            f"min_job_uid = {settings.min_job_uid} and {user} is not in "
            "[controller] job_users"
        )


def check_text(field: str, value: str | None) -> None:
    """Refuse text no command line, environment or file name can hold (NUL), or that is not
    valid Unicode (a lone surrogate), at submit, naming the field: accepted, it would fail
    only when the job launches, or when the log encodes it."""
    if value is None:
        return
    if "\x00" in value:
        raise InvalidRequest(f"{field} contains a NUL byte, which a job cannot be given")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(f"{field} is not valid Unicode text (a lone surrogate)") from None


_TEXT_FIELDS = (
    "user",
    "command",
    "script",
    "name",
    "queue",
    "cwd",
    "array",
    "dependency",
    "submit_host",
    "resources",
    "stdout_file",
    "stderr_file",
    "reservation",
    "submit_dir",
)
_texts_of = operator.attrgetter(*_TEXT_FIELDS)


def check_texts(body: SubmitBody) -> None:
    """`check_text` for every string field of a submit.

    The usual submit is plain ASCII: one look at all its text together (no NUL, ASCII, so
    encodable) clears it in ~0.5 us instead of a call per field; anything else takes the
    field-by-field walk, which names the first field at fault as before."""
    texts = [v for v in _texts_of(body) if v is not None]
    texts.extend(body.outputs)
    for pairs in (body.env, body.inputs):
        if pairs:
            texts.extend(pairs)
            texts.extend(pairs.values())
    try:
        joined = "".join(texts)
    except TypeError:  # not all text (a caller inside the controller): the walk decides
        joined = "\x00"
    if joined.isascii() and "\x00" not in joined:
        return
    for field, value in zip(_TEXT_FIELDS, _texts_of(body), strict=True):
        check_text(field, value)
    for key, value in body.env.items():
        check_text("an env variable name", key)
        check_text(f"env variable {key}", value)
    for path, upload_id in body.inputs.items():
        check_text("an input path", path)
        check_text(f"the upload id of input {path}", upload_id)
    for pattern in body.outputs:
        check_text("an output pattern", pattern)


def check_command(body: SubmitBody) -> None:
    """Exactly one of command or script, and not blank."""
    if (body.command is None) == (body.script is None):
        raise InvalidRequest("give exactly one of command or script")
    text = body.command if body.command is not None else body.script
    if not text or not text.strip():
        raise InvalidRequest("the command or script is empty")


def memory_asked(body: SubmitBody) -> int:
    """Slots and walltime in range, and the memory per host the job asks: memory_mb,
    else `rusage[mem=N]` of its resource requirement, or per slot times slots."""
    if body.slots < 1:
        raise InvalidRequest("slots must be at least 1")
    memory_mb = body.memory_mb
    if body.resources.strip():
        requirement = parse_requirement(body.resources)  # ExprError names the column
        check_span(requirement, body.slots)
        reserved = next((r.value for r in requirement.rusage if r.name == "mem"), None)
        if reserved is not None and reserved > MAX_MEMORY_MB:
            raise InvalidRequest(
                f"resources: rusage[mem={reserved:g}] is more than the limit of {MAX_MEMORY_MB} MB"
            )
        if reserved is not None and memory_mb == 0:
            memory_mb = int(reserved)
    if body.memory_mb < 0:
        raise InvalidRequest("memory_mb may not be negative")
    if body.mem_per_slot_mb:
        memory_mb = per_slot_memory(body.memory_mb, body.mem_per_slot_mb, body.slots)
    if body.walltime_s is not None and body.walltime_s < 1:
        raise InvalidRequest("walltime_s must be at least 1 second")
    return memory_mb


def check_environment(body: SubmitBody) -> None:
    """Variable names a shell takes (XCE_ ones are ours), an absolute cwd, and output
    file patterns."""
    for key in body.env:
        if not ENV_NAME.match(key):
            raise InvalidRequest(f"environment variable name {key!r} is not valid")
        if key.startswith("XCE_"):
            raise InvalidRequest(f"environment variable {key} is reserved for XCE")
    if body.cwd is not None and not body.cwd.startswith("/"):
        raise InvalidRequest("cwd must be an absolute path on the execution host")
    if body.submit_dir is not None and not body.submit_dir.startswith("/"):
        raise InvalidRequest("submit_dir must be an absolute path")
    for what, pattern in (("stdout", body.stdout_file), ("stderr", body.stderr_file)):
        check_file_pattern(what, pattern)


def output_patterns(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """The output patterns as safe relative paths, none of them a reserved name."""
    outputs = tuple(safe_relative_path(p, "output pattern") for p in patterns)
    for out in outputs:
        if out in RESERVED_OUTPUTS:
            raise InvalidRequest(f"output {out!r} is reserved for the job's {out}")
    return outputs


def check_submitter(settings: ControllerSettings, body: SubmitBody) -> None:
    """Text every field can hold, and a user jobs may run as."""
    check_texts(body)
    if not USER_NAME.match(body.user or ""):
        raise InvalidRequest(f"user {body.user!r} is not a valid user name")
    check_job_user(settings, body.user)
