"""Pure parts of priorities and preemption: `[scheduler.priority]` and the queue's preemption keys
in the config, the multifactor formula, and what the state does with JobModified and
JobPreempted (a preempted job's slots are free, its memory is not)."""

from __future__ import annotations

import dataclasses

import pytest

from xce.config.loader import parse_config
from xce.core import events as ev
from xce.core.errors import ConfigError, Conflict, InvalidRequest
from xce.core.model import JobSpec, QueueRecord
from xce.core.state import ClusterState
from xce.sched.priority import PrioritySettings, check_job_priority, factors, scale_of


def test_priority_settings_and_preemption_keys_from_the_config() -> None:
    config = parse_config(
        {
            "queue": [
                {"name": "normal"},
                {
                    "name": "high",
                    "priority": 90,
                    "preempt": ["normal"],
                    "preempt_mode": "requeue",
                    "preempt_min_run_s": 120,
                },
            ],
            "scheduler": {
                "priority": {"weight_age": 5, "default_job_priority": 10, "max_job_priority": 20}
            },
        }
    )
    high = config.controller.queues[1]
    assert (high.preempt, high.preempt_mode, high.preempt_min_run_s) == (
        ("normal",),
        "requeue",
        120,
    )
    settings = config.controller.scheduler.priority
    assert (settings.weight_age, settings.default_job_priority) == (5.0, 10)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scheduler": {"priority": {"weight_agee": 1}}}, "scheduler.priority.weight_agee"),
        ({"scheduler": {"priority": {"weight_job": -1}}}, "weight_job must be a number"),
        ({"scheduler": {"priority": {"default_job_priority": 200}}}, "above max_job_priority"),
        ({"queue": [{"name": "q", "preempt_mode": "kill"}]}, "preempt_mode must be"),
        ({"queue": [{"name": "q", "preempt": ["q"]}]}, "cannot preempt itself"),
        ({"queue": [{"name": "q", "preempt": "low"}]}, "preempt must be a list"),
        ({"queue": [{"name": "normal", "preempt": ["low"]}]}, "queue 'low' is not defined"),
    ],
)
def test_bad_keys_are_named(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


def test_the_documented_formula() -> None:
    settings = PrioritySettings(
        weight_queue=1000,
        weight_job=1000,
        weight_age=100,
        weight_fairshare=100,
        weight_size=10,
        max_age_s=1000,
    )
    queues = {
        "a": QueueRecord("a", priority=25, shares=(("alice", "2"),)),
        "b": QueueRecord("b", priority=100),
    }
    scale = scale_of(queues, [8, 16])
    spec = JobSpec(user="alice", queue="a", command="x", slots=4, priority=75)
    f = factors(spec, 100.0, queues["a"], settings, scale, 600.0, {"alice": 1.0}, {"alice": 1})
    # Q = 25/100, J = 75/100, A = 500/1000, F = 1/(1 + (1 + 1)/2), S = 4/16
    assert (f.queue, f.job, f.age, f.fairshare, f.size) == (0.25, 0.75, 0.5, 0.5, 0.25)
    assert f.priority == 250 + 750 + 50 + 50 + 2.5
    default = factors(
        dataclasses.replace(spec, priority=None), 600.0, queues["a"], settings, scale, 600.0, {}, {}
    )
    assert default.job == 0.5 and default.age == 0.0 and default.fairshare == 1.0


def test_who_may_give_which_priority() -> None:
    settings = PrioritySettings()
    check_job_priority(settings, 50, privileged=False)
    check_job_priority(settings, 100, privileged=True)
    with pytest.raises(ValueError, match="users may only lower"):
        check_job_priority(settings, 51, privileged=False)
    with pytest.raises(ValueError, match="between 0 and 100"):
        check_job_priority(settings, 101, privileged=True)


def _state() -> ClusterState:
    state = ClusterState()
    state.apply(ev.QueueCreated(0, QueueRecord("normal")))
    state.apply(ev.QueueCreated(0, QueueRecord("other")))
    state.apply(ev.HostRegistered(0, "h1", 4, 1000))
    spec = JobSpec(user="u", queue="normal", command="x", slots=4, memory_mb=300)
    state.apply(ev.JobSubmitted(1, 1, spec))
    state.apply(ev.JobSubmitted(1, 2, spec))
    state.apply(ev.JobStarted(2, "1", "h1"))
    return state


def test_job_modified_rules_in_the_state() -> None:
    state = _state()
    pending, running = state.jobs["2"], state.jobs["1"]
    state.apply(ev.JobModified(3, "2", dataclasses.replace(pending.spec, queue="other")))
    assert state.counts[(pending.state, "other")] == 1
    with pytest.raises(Conflict, match="only its name and walltime"):
        state.apply(ev.JobModified(3, "1", dataclasses.replace(running.spec, slots=1)))
    with pytest.raises(InvalidRequest, match="owner"):
        state.apply(ev.JobModified(3, "2", dataclasses.replace(pending.spec, user="v")))
    state.apply(ev.JobModified(3, "1", dataclasses.replace(running.spec, walltime_s=5)))
    assert state.jobs["1"].spec.walltime_s == 5


def test_a_preempted_job_frees_its_slots_not_its_memory_and_resumes_only_with_room() -> None:
    state = _state()
    state.apply(ev.JobPreempted(3, "1", "2"))
    load = state.host_load["h1"]
    assert (load.slots, load.memory_mb) == (0, 300)
    assert state.jobs["1"].reason == "preempted by job 2"
    state.apply(ev.JobStarted(4, "2", "h1"))
    with pytest.raises(Conflict, match="has 0 free slots"):
        state.apply(ev.JobResumed(5, "1"))
    with pytest.raises(Conflict, match="only a running job"):
        state.apply(ev.JobPreempted(5, "1", "2"))
    state.apply(ev.JobFinished(6, "2", 0, 0))
    state.apply(ev.JobResumed(7, "1"))
    job = state.jobs["1"]
    assert (job.state.value, job.preempted_by, job.resumed_time) == ("RUN", "", 7)
    assert state.host_load["h1"].slots == 4


def test_a_modified_dependency_is_waited_for_and_tracked() -> None:
    """A new dependency makes a pending job not eligible until it is satisfied (the
    dependents index follows the new terms); a restored state agrees."""
    from xce.core.deps import parse_dependency

    state = _state()
    pending = state.jobs["2"]
    assert pending.eligible_time == 1
    state.apply(
        ev.JobModified(
            3, "2", dataclasses.replace(pending.spec, dependency=parse_dependency("afterok:1"))
        )
    )
    assert state.jobs["2"].eligible_time is None and "2" in state.dependents["1"]
    state.apply(ev.JobFinished(4, "1", 0, 0))
    assert state.jobs["2"].eligible_time == 4
    state.apply(ev.JobModified(5, "2", dataclasses.replace(pending.spec, dependency=())))
    assert state.jobs["2"].eligible_time == 4 and "2" not in state.waiting_on_deps
    assert not state.dependents.get("1")
