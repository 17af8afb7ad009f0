"""The job state machine: one table says which action may move a job from which state.

Every mutation of a job in `ClusterState.apply` goes through `check`, so an illegal move
(kill a DONE job, resume a running one) is a `Conflict` with a message that says why.
"""

from __future__ import annotations

from xce.core.errors import Conflict
from xce.core.model import JobState

P, PS, R, US, SS, D, E = (
    JobState.PEND,
    JobState.PSUSP,
    JobState.RUN,
    JobState.USUSP,
    JobState.SSUSP,
    JobState.DONE,
    JobState.EXIT,
)

# action -> {from state: allowed target states}
TRANSITIONS: dict[str, dict[JobState, frozenset[JobState]]] = {
    "start": {P: frozenset({R})},
    "suspend": {P: frozenset({PS}), R: frozenset({US}), SS: frozenset({US})},
    "system_suspend": {R: frozenset({SS})},
    "resume": {PS: frozenset({P}), US: frozenset({R}), SS: frozenset({R})},
    "kill": {
        P: frozenset({E}),
        PS: frozenset({E}),
        R: frozenset({R, E}),
        US: frozenset({US, E}),
        SS: frozenset({SS, E}),
    },
    "finish": {R: frozenset({D, E}), US: frozenset({D, E}), SS: frozenset({D, E})},
    "requeue": {
        R: frozenset({P}),
        US: frozenset({P}),
        SS: frozenset({P}),
        D: frozenset({P}),
        E: frozenset({P}),
    },
    "host_lost": {R: frozenset({P, E}), US: frozenset({P, E}), SS: frozenset({P, E})},
}

_VERBS = {
    "start": "start",
    "suspend": "suspend",
    "system_suspend": "suspend",
    "resume": "resume",
    "kill": "kill",
    "finish": "finish",
    "requeue": "requeue",
    "host_lost": "fail over",
}


def allowed(action: str, state: JobState) -> bool:
    return state in TRANSITIONS[action]


def check(job_id: str, action: str, current: JobState, target: JobState | None = None) -> None:
    """Raise `Conflict` unless `action` may move a job in `current` (to `target`)."""
    targets = TRANSITIONS[action].get(current)
    if targets is None:
        ok_states = ", ".join(s.value for s in TRANSITIONS[action])
        raise Conflict(
            f"cannot {_VERBS[action]} job {job_id}: it is {current.value} "
            f"(only possible from {ok_states})"
        )
    if target is not None and target not in targets:
        raise Conflict(f"job {job_id} cannot go from {current.value} to {target.value}")
