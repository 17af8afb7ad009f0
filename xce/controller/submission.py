"""Submitting a job or array: the checks that read the state, the spec, and its commit.

`ControllerService` (xce/controller/service.py) owns the state, the log and `commit`;
`Submissions` holds the service it submits to and does one job: turn a `SubmitRequest` into
one committed `JobSubmitted`/`ArraySubmitted` event, with its inputs moved into the job's
directory (and shipped to the standbys). The stateless checks are in
xce/controller/submit_checks.py. Nothing awaits between the checks and the commit's apply
(`NumberReserver.ready` is awaited before, and the key is looked up again after it)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from xce.controller import gres_rules
from xce.controller.requests import SubmitRequest
from xce.controller.reservations import check_target
from xce.controller.submit_checks import (
    check_command,
    check_environment,
    check_submitter,
    memory_asked,
    output_patterns,
)
from xce.core import events as ev
from xce.core import queue_rules
from xce.core.arrayspec import parse_array_spec
from xce.core.begin import parse_begin
from xce.core.deps import DepTerm, parse_dependency
from xce.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.core.gres import Pairs
from xce.core.job_context import queue_for
from xce.core.model import JobSpec, QueueRecord
from xce.core.state_base import parse_job_id
from xce.protocol.bodies import SubmitBody
from xce.sched.admission.feasibility import refusal
from xce.sched.admission.multihost import multi_host_refusal
from xce.sched.expr import parse_requirement
from xce.sched.priority import check_job_priority
from xce.store.files import safe_relative_path
from xce.telemetry import metrics

if TYPE_CHECKING:
    from xce.controller.service import ControllerService

IDEMPOTENCY_TTL_S = 24 * 3600.0  # a key also ends with its job (finished-job retention)


class Submissions:
    """`submit` and `submit_keyed` of the service it is given."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service

    def spec(self, req: SubmitRequest) -> tuple[JobSpec, dict[str, str]]:
        """The validated spec, and its inputs as normalised path -> upload id. The checks
        run in a fixed order (who, what, where, how much, files, when), so a request with
        several problems is always refused for the same first one."""
        body = req.body
        service = self.service
        settings, state = service.settings, service.state
        check_submitter(settings, req.body)
        check_command(req.body)
        queue = self._open_queue(self._queue_name(body, settings.default_queue))
        memory_mb = memory_asked(req.body)
        check_environment(req.body)
        inputs = self._inputs(body.inputs, req.uploads_of)
        outputs = output_patterns(body.outputs)
        begin_time = None if body.begin is None else parse_begin(body.begin, service.clock())
        try:
            check_job_priority(settings.scheduler.priority, body.priority, req.privileged)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        dependency = parse_dependency(body.dependency)
        for term in dependency:
            self.check_dependency(term.job, req.may_view_owner)
        groups = [g for g, members in settings.scheduler.groups if body.user in members]
        account = charge_to(body.account or "", groups, req)
        applied = queue_rules.apply(
            queue, body.user, groups, body.slots, memory_mb, body.walltime_s
        )
        if body.reservation:
            check_target(state.reservations, body.reservation, body.user, groups)
        if not body.defer:
            self._check_feasible(req, queue, applied.memory_mb)
        gres, licenses = gres_rules.requested(
            req.body, queue, state.hosts.values(), dict(settings.licenses)
        )
        spec = _job_spec(
            req,
            account=account,
            queue=queue.name,
            applied=applied,
            inputs=tuple(sorted(inputs)),
            outputs=outputs,
            dependency=dependency,
            begin_time=begin_time,
            gres=gres,
            licenses=licenses,
        )
        return spec, inputs

    def _queue_name(self, body: SubmitBody, default: str) -> str:
        """The queue a submission names (or one of its aliases), else the queue its QOS is
        an alias of, else the default."""
        queues = self.service.state.queues
        if body.queue:
            found = queue_for(body.queue, queues)
            return found.name if found is not None else body.queue
        if body.qos and (found := queue_for(body.qos, queues)) is not None:
            return found.name
        return default

    def _open_queue(self, name: str) -> QueueRecord:
        """The queue `name`, which must exist and accept new jobs."""
        queue = self.service.state.queues.get(name)
        if queue is None:
            raise InvalidRequest(f"queue {name!r} does not exist")
        if not queue.open:
            raise Conflict(f"queue {name!r} is closed: it accepts no new jobs")
        return queue

    def _check_feasible(self, req: SubmitRequest, queue: QueueRecord, memory_mb: int) -> None:
        """Refuse a job no host of its queue could ever run (xce/sched/admission/feasibility.py)."""
        body = req.body
        hosts = self.service.state.hosts.values()
        requirement = parse_requirement(body.resources) if body.resources.strip() else None
        why = multi_host_refusal(
            requirement, body.slots, memory_mb, body.exclusive, body.mem_per_slot_mb, queue, hosts
        )
        if why is None:
            return  # a multi-host job some set of hosts can hold
        if why == "":
            why = refusal(requirement, body.slots, memory_mb, queue, hosts)
        if why is not None:
            raise InvalidRequest(
                f"{why} (to keep it for hosts that have not registered yet: xce job submit "
                '--defer, or "defer": true in the API)'
            )

    def check_dependency(self, job_id: str, may_view_owner: Callable[[str], bool] | None) -> None:
        """404 for a dependency on a job that does not exist or that the submitter may not
        view, in the same words: the dependency would reveal how that job ended. `xce job
        modify` checks new dependencies the same way (xce/controller/modify.py)."""
        state = self.service.state
        number, index = parse_job_id(job_id)
        if index is None and number in state.arrays:
            owner: str | None = state.arrays[number].spec.user
        else:
            try:
                owner = state.job(job_id).spec.user
            except NotFound:
                owner = None
        if owner is None or (may_view_owner is not None and not may_view_owner(owner)):
            raise NotFound(
                f"dependency on job {job_id}, which does not exist or which you may not view"
            )

    def _inputs(self, raw: dict[str, str], uploads_of: str | None = None) -> dict[str, str]:
        """Normalised input path -> upload id; paths and uploads must not collide, and each
        upload must be `uploads_of`'s (None: anyone's)."""
        inputs: dict[str, str] = {}
        for path, upload_id in raw.items():
            rel = safe_relative_path(path, "input path")
            if rel in inputs:
                raise InvalidRequest(f"input path {rel!r} is given twice")
            inputs[rel] = upload_id
        ids = list(inputs.values())
        for upload_id in ids:
            self.service.files.check_upload(upload_id, uploads_of)
            if ids.count(upload_id) > 1:
                raise InvalidRequest(f"upload {upload_id} is used for more than one input")
        ordered = sorted(inputs)
        for parent, child in itertools.pairwise(ordered):
            if child.startswith(parent + "/"):
                raise InvalidRequest(
                    f"input {parent!r} cannot be a file and the directory of {child!r}"
                )
        return inputs

    async def submit_keyed(self, req: SubmitRequest, key: str) -> tuple[str, bool]:
        """`submit` with an Idempotency-Key: a repeat of a key this user sent within its
        lifetime returns the first submission's id (True: a repeat) once that is durable,
        across failovers too (the key is part of the replicated job record)."""
        body = req.body
        service = self.service
        if (found := await self._repeat(req, key)) is not None:
            return found, True
        spec, inputs = self.spec(req)
        if service.numbers is not None:
            await service.numbers.ready()  # nothing awaits between this and the commit's apply
            if (found := await self._repeat(req, key)) is not None:
                return found, True  # a twin request got its number first
        number = service.state.next_number
        event = self._submitted(req, number, spec, key)
        service.files.attach_inputs(number, inputs, body.user)
        # the standbys move their copies of the uploads alike
        ticket = service.ship_files(_input_moves(number, inputs))
        try:
            await service.commit([event])
        except Exception:
            state = service.state
            if inputs and str(number) not in state.jobs and number not in state.arrays:
                service.job_files.abandon(number)  # refused: its inputs are nobody's
            raise
        await service.files_replicated(ticket)  # sync mode: the inputs are on a standby too
        metrics.labelled(metrics.SUBMISSIONS, "array" if body.array is not None else "job").inc()
        return str(number), False

    def _submitted(self, req: SubmitRequest, number: int, spec: JobSpec, key: str) -> ev.Event:
        """The event that enqueues job or array `number`."""
        body = req.body
        service = self.service
        if body.array is not None:
            parsed = parse_array_spec(body.array, service.settings.max_array_size)
            return ev.ArraySubmitted(
                service.clock(), number, spec, parsed.indices, parsed.max_concurrent, key
            )
        return ev.JobSubmitted(service.clock(), number, spec, key)

    async def _repeat(self, req: SubmitRequest, key: str) -> str | None:
        """The id of the earlier submission with this key, once it is durable."""
        found = self._keyed(req, key) if key else None
        if found is not None:
            await self.service.log.sync()  # the first request's commit may still be under way
        return found

    def _keyed(self, req: SubmitRequest, key: str) -> str | None:
        """The id an earlier submission with this user's `key` got, if it is still alive
        (IDEMPOTENCY_TTL_S, and as long as the job is kept); Conflict if the key came with
        a different job."""
        body = req.body
        state = self.service.state
        found = state.submit_keys.get((body.user, key))
        if found is None:
            return None
        record = state.arrays.get(int(found)) or state.jobs.get(found)
        if record is None or self.service.clock() - record.submit_time > IDEMPOTENCY_TTL_S:
            return None
        spec = record.spec
        if (spec.command, spec.script, spec.name) != (body.command, body.script, body.name):
            raise Conflict(
                f"Idempotency-Key {key!r} was already used for job {found}, a different submission"
            )
        return found


def _input_moves(number: int, inputs: dict[str, str]) -> list[tuple[str, str]]:
    """The file operations that move a job's uploads into its inputs on a standby."""
    if not inputs:
        return []
    return (
        [(f"files/jobs/{number}/inputs", "drop")]
        + [
            (f"files/jobs/{number}/inputs/{rel}", f"move:files/uploads/{upload}")
            for rel, upload in sorted(inputs.items())
        ]
        + [(f"files/uploads/{upload}.json", "drop") for upload in inputs.values()]
    )


def charge_to(asked: str, declared: list[str], req: SubmitRequest) -> str:
    """The accounting group a job is charged to. Asked for (--account): one of the user's
    groups, those `[scheduler] groups` lists them in and their own (users file, directory,
    the OS for a local caller); operators may name any, and a user whose groups nobody
    knows may name a label. Else the first group `[scheduler] groups` lists them in (the
    override), else their own first group, else none ("default" in the records)."""
    own = [*declared, *req.groups]
    if asked:
        if own and asked not in own and not req.privileged:
            raise Forbidden(
                f"account {asked!r}: user {req.body.user!r} is not a member of that group "
                f"(theirs: {', '.join(dict.fromkeys(own))})"
            )
        return asked
    return own[0] if own else ""


def _job_spec(
    req: SubmitRequest,
    *,
    account: str,
    queue: str,
    applied: queue_rules.Applied,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    dependency: tuple[DepTerm, ...],
    begin_time: float | None,
    gres: Pairs,
    licenses: Pairs,
) -> JobSpec:
    """The spec of a checked request, with what its queue and the checks decided."""
    body = req.body
    return JobSpec(
        user=body.user,
        queue=queue,
        name=body.name,
        command=body.command,
        script=body.script,
        slots=body.slots,
        memory_mb=applied.memory_mb,
        walltime_s=applied.walltime_s,
        env=tuple(sorted(body.env.items())),
        cwd=body.cwd,
        inputs=inputs,
        outputs=outputs,
        dependency=dependency,
        hold=body.hold,
        submit_host=body.submit_host,
        resources=body.resources.strip(),
        stdout_file=body.stdout_file,
        stderr_file=body.stderr_file,
        gres=gres,
        licenses=licenses,
        reservation=body.reservation,
        begin_time=begin_time,
        priority=body.priority,
        exclusive=body.exclusive,
        mem_per_slot_mb=body.mem_per_slot_mb,
        submit_dir=body.submit_dir,
        account=account,
    )
