"""Job dependencies, Slurm style: `afterok:12,afterany:13[4]` (`,` means and).

Evaluation reads the state through a small protocol so this module stays independent of
`ClusterState` and can be tested with a dictionary.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol

from xce.core.errors import InvalidRequest

KINDS = ("afterok", "afterany", "afternotok")
_REF = re.compile(r"^\d+(?:\[\d+\])?$", re.ASCII)


@dataclass(frozen=True, slots=True)
class DepTerm:
    kind: str
    job: str


class DepStatus(enum.StrEnum):
    SATISFIED = "satisfied"
    WAITING = "waiting"
    NEVER = "never"


class Outcome(enum.Enum):
    """How a dependency target ended, as far as is known now."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    MISSING = "missing"


class OutcomeLookup(Protocol):
    def outcome(self, job_ref: str) -> Outcome: ...


def parse_dependency(text: str | None) -> tuple[DepTerm, ...]:
    """Parse the dependency expression; references are checked later against the state."""
    if text is None or not text.strip():
        return ()
    terms: list[DepTerm] = []
    for part in text.split(","):
        kind, sep, refs = part.strip().partition(":")
        if kind not in KINDS or not sep:
            raise InvalidRequest(
                f"dependency {part.strip()!r}: expected one of {', '.join(KINDS)}"
                " followed by :JOBID"
            )
        for ref in refs.split(":"):
            if not _REF.match(ref):
                raise InvalidRequest(f"dependency {part.strip()!r}: {ref!r} is not a job id")
            terms.append(DepTerm(kind, ref))
    return tuple(terms)


def describe(terms: tuple[DepTerm, ...]) -> str:
    return ",".join(f"{t.kind}:{t.job}" for t in terms)


def evaluate(terms: tuple[DepTerm, ...], lookup: OutcomeLookup) -> DepStatus:
    """All terms must hold; any term that can no longer hold makes the whole NEVER."""
    status = DepStatus.SATISFIED
    for term in terms:
        outcome = lookup.outcome(term.job)
        if outcome is Outcome.MISSING:
            return DepStatus.NEVER
        if outcome is Outcome.RUNNING:
            status = DepStatus.WAITING
            continue
        ok = (
            term.kind == "afterany"
            or (term.kind == "afterok" and outcome is Outcome.DONE)
            or (term.kind == "afternotok" and outcome is Outcome.FAILED)
        )
        if not ok:
            return DepStatus.NEVER
    return status
