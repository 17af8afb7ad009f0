"""The names under which the controller's own files travel to the standbys, and the answer for
a file a record names that this controller does not hold.

The API and the controller store job files, uploads, the users file and the audit log under
these names; the replication source (xce/ha/files.py) ships each name to the standbys, which
store it under the same name. One list, so both sides agree on every name.
"""

from __future__ import annotations

import re
from typing import Any

from xce.core.errors import Unavailable
from xce.store.files import job_dir_name

USERS = "users"
AUDIT = "audit"
FILES = "files/"
MOVE = "move:"  # op "move:<source name>": an upload becomes a job's input on the standby too
_UPLOAD = re.compile(r"^uploads/[0-9a-f]{32}(\.json)?$")


class FileNotHere(Unavailable):
    """A job's file that its record names but that this controller does not hold: it was
    stored by another controller candidate and has not been replicated here (yet)."""

    code = "file_not_replicated"


def upload_names(upload_id: str) -> list[str]:
    """An upload and its owner record (`<id>.json`, xce/store/files.py)."""
    return [f"{FILES}uploads/{upload_id}", f"{FILES}uploads/{upload_id}.json"]


def input_name(number: int, rel: str) -> str:
    return f"{FILES}jobs/{number}/inputs/{rel}"


def outputs_name(number: int, job_id: str) -> str:
    return f"{FILES}jobs/{number}/outputs/{job_dir_name(job_id)}"


def output_name(number: int, job_id: str, rel: str) -> str:
    return f"{outputs_name(number, job_id)}/{rel}"


def not_here(node: Any, what: str) -> FileNotHere:
    """The answer for a file a record names that this controller does not hold."""
    others = [u for u in getattr(node, "candidates", ()) if u != getattr(node, "url", None)]
    where = ", ".join(others) or "another controller"
    return FileNotHere(
        f"{what} is not on this controller ({getattr(node, 'url', '?')}): it was stored by "
        f"the controller candidate {where} and has not been replicated here yet; it is "
        f"copied here once that controller is back as a standby, so retry later"
    )
