"""`sacct`, `sinfo`: Slurm's accounting and partition commands (scontrol is in
scontrol.py).

Why apart from slurm.py: these read other parts of the API (the accounting store, hosts,
queues) and each has its own layout; a tool imports only its module. What each covers is
listed in docs/migration.md ("Familiar commands").
"""

from __future__ import annotations

import time
from typing import Any

from xce.cli.compat import base, formats
from xce.cli.compat.base import Parser, Usage
from xce.cli.compat.formats import ACTIVE, DOC, Column
from xce.core import hostlist

# --- sacct --------------------------------------------------------------------------------

# sacct field (lower case) -> (title, width, value of a row); rows are accounting records
# (ended attempts) or live jobs made to look like them (`_live_record`).
SACCT_FIELDS: dict[str, tuple[str, int, Any]] = {
    "jobid": ("JobID", 12, lambda r: formats.slurm_job_id(str(r["job_id"]))),
    "jobname": ("JobName", 10, lambda r: str(r.get("name") or "")),
    "partition": ("Partition", 10, lambda r: str(r.get("queue") or "")),
    "account": ("Account", 10, lambda r: str(r.get("grp") or "")),
    "alloccpus": ("AllocCPUS", 10, lambda r: str(r.get("req_slots") or 0)),
    "state": ("State", 10, lambda r: formats.slurm_state(str(r["state"]), r.get("reason"))[1]),
    "exitcode": ("ExitCode", 8, lambda r: formats.slurm_exit_code(r)),
    "user": ("User", 9, lambda r: str(r.get("user") or "")),
    "group": ("Group", 9, lambda r: str(r.get("grp") or "")),
    "elapsed": ("Elapsed", 10, lambda r: formats.slurm_duration(r.get("wall_s"))),
    "submit": ("Submit", 19, lambda r: formats.slurm_timestamp(r.get("submit_time"))),
    "start": ("Start", 19, lambda r: formats.slurm_timestamp(r.get("start_time"))),
    "end": ("End", 19, lambda r: formats.slurm_timestamp(r.get("end_time"))),
    "nodelist": ("NodeList", 15, lambda r: _nodes(r)),
    "timelimit": ("Timelimit", 10, lambda r: formats.slurm_limit(r.get("req_walltime_s"))),
    "reqmem": ("ReqMem", 10, lambda r: f"{r.get('req_memory_mb') or 0}M"),
    "maxrss": ("MaxRSS", 10, lambda r: f"{int(r.get('max_rss_bytes') or 0) // 1024}K"),
    "totalcpu": (
        "TotalCPU",
        10,
        lambda r: formats.slurm_duration(
            float(r.get("cpu_user_s") or 0) + float(r.get("cpu_system_s") or 0)
        ),
    ),
    "reason": ("Reason", 20, lambda r: str(r.get("reason") or "None")),
}
SACCT_DEFAULT = "jobid,jobname,partition,account,alloccpus,state,exitcode"


def _nodes(record: dict[str, Any]) -> str:
    """`w1:2,w2:2` (the accounting store's shape) -> `w1,w2`; None assigned yet."""
    hosts = [part.split(":")[0] for part in str(record.get("hosts") or "").split(",") if part]
    return hostlist.compress(hosts) or "None assigned"


def _live_record(job: dict[str, Any]) -> dict[str, Any]:
    """A live (pending, running, suspended) job in the accounting record's shape: sacct
    shows those too, and the accounting store holds ended attempts only."""
    usage = job.get("usage") or {}
    return {
        "job_id": job["id"],
        "name": job.get("name"),
        "queue": job["queue"],
        "grp": "",
        "user": job["user"],
        "req_slots": job.get("slots"),
        "state": job["state"],
        "reason": job.get("reason"),
        "exit_code": None,
        "exit_signal": None,
        "wall_s": usage.get("wall_time_s"),
        "submit_time": job.get("submit_time"),
        "start_time": job.get("start_time"),
        "end_time": None,
        "hosts": ",".join(formats.host_names(job)),
        "req_walltime_s": job.get("walltime_s"),
        "req_memory_mb": job.get("memory_mb"),
        "max_rss_bytes": usage.get("max_rss_bytes"),
        "cpu_user_s": usage.get("cpu_user_s"),
        "cpu_system_s": usage.get("cpu_system_s"),
    }


def _sacct_columns(text: str) -> list[tuple[str, int]]:
    """`-o jobid,jobname%30,state` -> [(field, width)]."""
    out = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        name, _, width = item.partition("%")
        key = name.lower()
        if key not in SACCT_FIELDS:
            raise Usage(f'Invalid field requested: "{name}" (XCE covers {", ".join(SACCT_FIELDS)})')
        if width and not width.isdigit():
            raise Usage(f"Invalid field width: {item!r}")
        out.append((key, int(width) if width else SACCT_FIELDS[key][1]))
    return out


def sacct(args: list[str]) -> int:
    """`sacct [-j IDS] [-u USERS|-a] [-S START] [-E END] [-s STATES] [-o FIELDS] [-n] [-P]`:
    ended attempts from the accounting store, and live jobs, in sacct's layout."""
    p = Parser("sacct", "Jobs and their ended attempts, as Slurm's sacct shows them.")
    p.add_argument("-j", "--jobs", action="append", help="job ids (12, 12_3)")
    p.add_argument("-u", "--user", "--uid", action="append", help="users (comma-separated)")
    p.add_argument("-a", "--allusers", action="store_true", help="every user's jobs")
    p.add_argument("-S", "--starttime", help="from (default: midnight; all with -j)")
    p.add_argument("-E", "--endtime", help="before")
    p.add_argument("-s", "--state", help="CD,F,CA,TO,OOM,NF,RQ,PD,R,S")
    p.add_argument("-r", "--partition", action="append", help="queues (comma-separated)")
    p.add_argument("-o", "--format", help=f"fields (default {SACCT_DEFAULT})")
    p.add_argument("-n", "--noheader", action="store_true", help="no header lines")
    p.add_argument("-P", "--parsable2", action="store_true", help="'|' between fields")
    p.add_argument("-p", "--parsable", action="store_true", help="'|' after each field")
    p.add_argument("-X", "--allocations", action="store_true", help="(no steps: always so)")
    o = p.parse(args)
    columns = _sacct_columns(o.format or SACCT_DEFAULT)
    states, letters = _sacct_states(o.state)
    ids: list[str] = []
    for word in base.split_list(o.jobs):
        try:
            ids += formats.xce_job_ids(word)
        except ValueError as exc:
            raise Usage(str(exc)) from None
    since = o.starttime
    if since is None and not ids:
        since = str(int(time.mktime((*time.localtime()[:3], 0, 0, 0, 0, 0, -1))))
    params = {
        "user": ",".join(base.split_list(o.user)) or None,
        "queue": ",".join(base.split_list(o.partition)) or None,
        "since": _moment("-S", since),
        "until": _moment("-E", o.endtime),
    }

    def fetch(client: Any) -> list[dict[str, Any]]:
        query = {k: v for k, v in params.items() if v}
        if not o.allusers and not query.get("user"):
            query["user"] = base.me(client)
        return _sacct_rows(client, query, ids, states)

    rows = [r for r in base.call(fetch) if letters is None or _letter(r) in letters]
    headers = [Column(SACCT_FIELDS[k][0], w, right=True) for k, w in columns]
    cells = [[SACCT_FIELDS[k][2](r) for k, _ in columns] for r in rows]
    if o.parsable2 or o.parsable:
        end = "|" if o.parsable else ""
        lines = [] if o.noheader else ["|".join(c.title for c in headers) + end]
        base.write(lines + ["|".join(row) + end for row in cells])
        return 0
    base.write(formats.render_columns(headers, cells, not o.noheader, rule=True, cut="+"))
    return 0


def _letter(record: dict[str, Any]) -> str:
    return formats.slurm_state(str(record["state"]), record.get("reason"))[0]


def _sacct_states(text: str | None) -> tuple[set[str] | None, set[str] | None]:
    if not text:
        return None, None
    try:
        chosen = formats.slurm_state_filter(text)
    except ValueError as exc:
        raise Usage(str(exc)) from None
    return chosen if chosen is not None else (None, None)


def _moment(option: str, text: str | None) -> str | None:
    """-S/-E in local time, as `xce acct` reads them (xce/cli/acct.py)."""
    if not text:
        return None
    from xce.cli.acct import _moment as acct_moment

    return acct_moment(option, text)


def _sacct_rows(
    client: Any, query: dict[str, str], ids: list[str], states: set[str] | None
) -> list[dict[str, Any]]:
    """Ended attempts (the store's) and live jobs, by job number. With -j the jobs are
    named: whoever ran them, whenever."""
    from xce.cli.acct import _fetch

    ended = (
        {"DONE", "EXIT", "REQUEUED"} if states is None else states & {"DONE", "EXIT", "REQUEUED"}
    )
    live = set(ACTIVE) if states is None else states & set(ACTIVE)
    records: list[dict[str, Any]] = []
    if ended:
        query = {**query, "state": ",".join(sorted(ended))}
        if ids:
            query.pop("user", None)
        for job_id in ids:
            records += _fetch(client, {**query, "job": job_id}, 100_000)
        if not ids:
            records += _fetch(client, query, 100_000)
    if live:
        user = None if ids else query.get("user")
        queue = query.get("queue")
        rows = base.list_jobs(
            client,
            live,
            user=user if user and "," not in user else None,
            queue=queue if queue and "," not in queue else None,
        )
        for job in rows:
            if ids and str(job["id"]) not in ids and str(job.get("array_id")) not in ids:
                continue
            if not ids and not _listed(job, query):
                continue
            records.append(_live_record(job))
    return sorted(records, key=_order)


def _listed(job: dict[str, Any], query: dict[str, str]) -> bool:
    for key, field in (("user", "user"), ("queue", "queue")):
        if query.get(key) and job[field] not in query[key].split(","):
            return False
    return True


def _order(record: dict[str, Any]) -> tuple[int, int]:
    """By job number, then array index (an array's unstarted rest first)."""
    number, _, index = str(record["job_id"]).partition("[")
    return (int(number) if number.isdigit() else 0, int(index[:-1]) if index[:-1].isdigit() else -1)


# --- sinfo --------------------------------------------------------------------------------

SINFO_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"
SINFO_SUMMARY = "%#P %.5a %.10l %.16F  %N"
SINFO_NODES = "%#N %.6D %#P %6t"
SINFO_HEADERS = {
    "P": "PARTITION",
    "a": "AVAIL",
    "l": "TIMELIMIT",
    "D": "NODES",
    "t": "STATE",
    "T": "STATE",
    "N": "NODELIST",
    "c": "CPUS",
    "m": "MEMORY",
    "F": "NODES(A/I/O/T)",
    "C": "CPUS(A/I/O/T)",
}


def _uniform(values: list[int]) -> str:
    if not values:
        return "0"
    low = min(values)
    return str(low) if low == max(values) else f"{low}+"


def _sinfo_row(queue: dict[str, Any], hosts: list[dict[str, Any]], state: str) -> dict[str, str]:
    slots = [int(h.get("slots") or 0) for h in hosts]
    used = [int(h.get("slots_used") or 0) for h in hosts]
    states = [formats.sinfo_node_state(h) for h in hosts]
    allocated = sum(1 for s in states if s in ("alloc", "mix"))
    idle = states.count("idle")
    other = len(states) - allocated - idle
    down = sum(s for s, st in zip(slots, states, strict=True) if st not in ("idle", "alloc", "mix"))
    return {
        "P": str(queue["name"]),
        "a": formats.sinfo_avail(queue),
        "l": formats.slurm_limit(queue.get("max_walltime_s"), "infinite"),
        "D": str(len(hosts)),
        "t": state,
        "T": formats.SINFO_LONG_STATE.get(state, state),
        "N": hostlist.compress(h["name"] for h in hosts),
        "c": _uniform(slots),
        "m": _uniform([int(h.get("memory_mb") or 0) for h in hosts]),
        "F": f"{allocated}/{idle}/{other}/{len(hosts)}",
        "C": f"{sum(used)}/{sum(slots) - sum(used) - down}/{down}/{sum(slots)}",
    }


def sinfo_rows(
    queues: list[dict[str, Any]], hosts: list[dict[str, Any]], by: str = "state"
) -> list[dict[str, str]]:
    """sinfo's lines: per queue and node state (`by="state"`), per queue (`"queue"`, -s)
    or per host and queue (`"node"`, -N)."""
    rows = []
    for queue in queues:
        members = formats.queue_hosts(queue, hosts)
        if by == "queue":
            rows.append(_sinfo_row(queue, members, "n/a"))
            continue
        if by == "node":
            rows += [_sinfo_row(queue, [h], formats.sinfo_node_state(h)) for h in members]
            continue
        groups: dict[str, list[dict[str, Any]]] = {}
        for host in members:
            groups.setdefault(formats.sinfo_node_state(host), []).append(host)
        if not groups:
            rows.append(_sinfo_row(queue, [], "n/a"))
        rows += [_sinfo_row(queue, group, state) for state, group in groups.items()]
    return rows


def sinfo(args: list[str]) -> int:
    """`sinfo [-p PART] [-h] [-s] [-N] [-o FORMAT]`: queues as partitions, hosts as nodes."""
    p = Parser("sinfo", "Queues and hosts, as Slurm's sinfo shows partitions and nodes.")
    p.add_argument("-p", "--partition", action="append", help="queues (comma-separated)")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("-s", "--summarize", action="store_true", help="one line per queue")
    p.add_argument("-N", "--Node", action="store_true", help="one line per host")
    p.add_argument("-o", "--format", help="%%-fields (P a l D t T N c m F C)")
    p.add_argument("-a", "--all", action="store_true", help="(every queue: always so)")
    o = p.parse(args)
    default = SINFO_NODES if o.Node else SINFO_SUMMARY if o.summarize else SINFO_FORMAT
    try:
        fields = formats.parse_format(o.format or default, SINFO_HEADERS)
    except ValueError as exc:
        raise Usage(f"--format: {exc} (see {DOC})") from None
    queues, hosts = base.call(lambda c: (c.queues(), c.hosts()))
    wanted = base.split_list(o.partition)
    if wanted:
        queues = [q for q in queues if q["name"] in wanted]
    rows = sinfo_rows(queues, hosts, "node" if o.Node else "queue" if o.summarize else "state")
    base.write(formats.render_format(fields, SINFO_HEADERS, rows, header=not o.noheader))
    return 0
