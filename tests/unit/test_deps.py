"""Dependency expressions: parsing, evaluation against a lookup, and ClusterState.outcome."""

from __future__ import annotations

import pytest

from tests.unit.helpers import T0, new_state, submit, submit_array
from xce.core import events as ev
from xce.core.deps import (
    DepStatus,
    DepTerm,
    Outcome,
    describe,
    evaluate,
    parse_dependency,
)
from xce.core.errors import InvalidRequest


class FakeLookup:
    def __init__(self, outcomes: dict[str, Outcome]) -> None:
        self.outcomes = outcomes
        self.asked: list[str] = []

    def outcome(self, job_ref: str) -> Outcome:
        self.asked.append(job_ref)
        return self.outcomes.get(job_ref, Outcome.MISSING)


# --- parsing ----------------------------------------------------------------------------


def test_parse_two_kinds_with_a_task_reference() -> None:
    assert parse_dependency("afterok:12,afterany:13[4]") == (
        DepTerm("afterok", "12"),
        DepTerm("afterany", "13[4]"),
    )


def test_parse_several_ids_for_one_kind() -> None:
    assert parse_dependency("afterok:1:2") == (DepTerm("afterok", "1"), DepTerm("afterok", "2"))


def test_parse_afternotok_and_whitespace_around_parts() -> None:
    assert parse_dependency(" afternotok:7 , afterany:8 ") == (
        DepTerm("afternotok", "7"),
        DepTerm("afterany", "8"),
    )


@pytest.mark.parametrize("text", [None, "", "   "])
def test_no_dependency_is_empty(text: str | None) -> None:
    assert parse_dependency(text) == ()


@pytest.mark.parametrize(
    "text", ["after:1", "AFTEROK:1", "afterok", "afterok1", "before:3", ":1", "afterok:1,"]
)
def test_bad_kinds_are_refused(text: str) -> None:
    with pytest.raises(InvalidRequest, match="expected one of afterok, afterany, afternotok"):
        parse_dependency(text)


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("afterok:", "''"),
        ("afterok:abc", "'abc'"),
        ("afterok:1::2", "''"),
        ("afterok:-1", "'-1'"),
        ("afterok:1[]", "'1[]'"),
        ("afterok:1[a]", "'1[a]'"),
        ("afterok:[3]", "'[3]'"),
        ("afterok:1 2", "'1 2'"),
    ],
)
def test_bad_ids_are_refused(text: str, bad: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_dependency(text)
    assert f"{bad} is not a job id" in info.value.message


def test_describe_round_trips() -> None:
    terms = parse_dependency("afterok:1:2,afterany:3[4]")
    assert describe(terms) == "afterok:1,afterok:2,afterany:3[4]"
    assert parse_dependency(describe(terms)) == terms


# --- evaluation --------------------------------------------------------------------------

OC = Outcome
EXPECTED = {
    ("afterok", OC.DONE): DepStatus.SATISFIED,
    ("afterok", OC.FAILED): DepStatus.NEVER,
    ("afterok", OC.RUNNING): DepStatus.WAITING,
    ("afterok", OC.MISSING): DepStatus.NEVER,
    ("afternotok", OC.DONE): DepStatus.NEVER,
    ("afternotok", OC.FAILED): DepStatus.SATISFIED,
    ("afternotok", OC.RUNNING): DepStatus.WAITING,
    ("afternotok", OC.MISSING): DepStatus.NEVER,
    ("afterany", OC.DONE): DepStatus.SATISFIED,
    ("afterany", OC.FAILED): DepStatus.SATISFIED,
    ("afterany", OC.RUNNING): DepStatus.WAITING,
    ("afterany", OC.MISSING): DepStatus.NEVER,
}


@pytest.mark.parametrize(("kind", "outcome"), list(EXPECTED))
def test_single_term(kind: str, outcome: Outcome) -> None:
    lookup = FakeLookup({"5": outcome})
    assert evaluate(parse_dependency(f"{kind}:5"), lookup) is EXPECTED[(kind, outcome)]
    assert lookup.asked == ["5"]


def test_no_terms_are_satisfied() -> None:
    assert evaluate((), FakeLookup({})) is DepStatus.SATISFIED


def test_all_terms_must_hold() -> None:
    lookup = FakeLookup({"1": OC.DONE, "2": OC.FAILED, "3": OC.RUNNING})
    assert evaluate(parse_dependency("afterok:1,afternotok:2"), lookup) is DepStatus.SATISFIED
    assert evaluate(parse_dependency("afterok:1,afterok:3"), lookup) is DepStatus.WAITING
    assert evaluate(parse_dependency("afterok:1:2"), lookup) is DepStatus.NEVER


def test_never_wins_over_waiting_in_any_order() -> None:
    lookup = FakeLookup({"1": OC.RUNNING, "2": OC.FAILED})
    assert evaluate(parse_dependency("afterok:1,afterok:2"), lookup) is DepStatus.NEVER
    assert evaluate(parse_dependency("afterok:2,afterok:1"), lookup) is DepStatus.NEVER
    assert evaluate(parse_dependency("afterany:1,afterok:9"), lookup) is DepStatus.NEVER


# --- ClusterState.outcome ----------------------------------------------------------------


def test_outcome_of_plain_jobs() -> None:
    state = new_state(hosts={"h1": (4, 1000)})
    pend, ok, bad, killed = (submit(state) for _ in range(4))
    assert state.outcome(pend) is OC.RUNNING
    for job in (ok, bad):
        state.apply(ev.JobStarted(T0, job, "h1"))
    assert state.outcome(ok) is OC.RUNNING
    state.apply(ev.JobFinished(T0, ok, 0, 0))
    state.apply(ev.JobFinished(T0, bad, 0, 2))
    state.apply(ev.JobKilled(T0, killed))
    assert state.outcome(ok) is OC.DONE
    assert state.outcome(bad) is OC.FAILED
    assert state.outcome(killed) is OC.FAILED
    assert state.outcome("99") is OC.MISSING
    assert state.outcome(f"{ok}[1]") is OC.MISSING


def test_outcome_of_a_held_job_is_running() -> None:
    state = new_state()
    job = submit(state, hold=True)
    assert state.outcome(job) is OC.RUNNING


def test_whole_array_is_done_only_when_every_task_is_done() -> None:
    state = new_state(hosts={"h1": (8, 1000)})
    number = submit_array(state, "1-3")
    arr = str(number)
    assert state.outcome(arr) is OC.RUNNING
    for i in (1, 2, 3):
        state.apply(ev.JobStarted(T0, f"{number}[{i}]", "h1"))
    state.apply(ev.JobFinished(T0, f"{number}[1]", 0, 0))
    state.apply(ev.JobFinished(T0, f"{number}[2]", 0, 0))
    assert state.outcome(arr) is OC.RUNNING
    assert state.outcome(f"{number}[1]") is OC.DONE
    assert state.outcome(f"{number}[3]") is OC.RUNNING
    state.apply(ev.JobFinished(T0, f"{number}[3]", 0, 0))
    assert state.outcome(arr) is OC.DONE


def test_whole_array_with_one_failed_task_is_failed() -> None:
    state = new_state(hosts={"h1": (8, 1000)})
    number = submit_array(state, "1-2")
    for i in (1, 2):
        state.apply(ev.JobStarted(T0, f"{number}[{i}]", "h1"))
    state.apply(ev.JobFinished(T0, f"{number}[1]", 0, 1))
    assert state.outcome(str(number)) is OC.RUNNING  # not finished yet
    state.apply(ev.JobFinished(T0, f"{number}[2]", 0, 0))
    assert state.outcome(str(number)) is OC.FAILED
    assert state.outcome(f"{number}[1]") is OC.FAILED
    assert state.outcome(f"{number}[2]") is OC.DONE


def test_cancelled_array_is_failed_and_its_unstarted_tasks_too() -> None:
    state = new_state(hosts={"h1": (8, 1000)})
    number = submit_array(state, "1-4")
    state.apply(ev.JobStarted(T0, f"{number}[1]", "h1"))
    state.apply(ev.JobFinished(T0, f"{number}[1]", 0, 0))
    assert state.outcome(f"{number}[2]") is OC.RUNNING  # pending task
    state.apply(ev.ArrayCancelled(T0, number))
    assert state.outcome(str(number)) is OC.FAILED
    assert state.outcome(f"{number}[2]") is OC.FAILED
    assert state.outcome(f"{number}[9]") is OC.MISSING


def test_evaluate_against_the_state_for_an_array_dependency() -> None:
    state = new_state(hosts={"h1": (8, 1000)})
    number = submit_array(state, "1-2")
    ok = parse_dependency(f"afterok:{number}")
    notok = parse_dependency(f"afternotok:{number}")
    one = parse_dependency(f"afterok:{number}[1]")
    assert evaluate(ok, state) is DepStatus.WAITING
    state.apply(ev.JobStarted(T0, f"{number}[1]", "h1"))
    state.apply(ev.JobFinished(T0, f"{number}[1]", 0, 0))
    assert evaluate(one, state) is DepStatus.SATISFIED
    assert evaluate(ok, state) is DepStatus.WAITING
    state.apply(ev.JobStarted(T0, f"{number}[2]", "h1"))
    state.apply(ev.JobFinished(T0, f"{number}[2]", 0, 0))
    assert evaluate(ok, state) is DepStatus.SATISFIED
    assert evaluate(notok, state) is DepStatus.NEVER
    assert evaluate(parse_dependency("afterany:77"), state) is DepStatus.NEVER
