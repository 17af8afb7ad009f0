"""What one script's directives ask for, gathered line by line (`Request`) and turned into
`xce job submit` options at the end (`finish`).

Why gathered first: a job's slots, span and GPUs per host depend on several options that may
come in any order and on different lines (`#SBATCH --nodes=2` above `#SBATCH
--ntasks-per-node=8 -c 2`), so they are only computed once the whole script is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from xce.cli.directives.model import Unsupported, Where
from xce.cli.directives.resources import Requirement, add_lsf, hosts_for

GpuUnit = Literal["host", "task", "job"]


@dataclass(frozen=True)
class GpuAsk:
    """GPUs as asked: per host (`--gpus-per-node`, `-gpu num=N`), per task
    (`--gpus-per-task`, `num=N/task`) or for the whole job (`--gpus`)."""

    count: int
    unit: GpuUnit
    at: Where


@dataclass
class Request:
    """The directives read so far; `warn` and `refuse` name the line being read."""

    lenient: bool = False
    where: Where = field(default_factory=lambda: Where(0, ""))
    options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    tasks: int | None = None
    cpus_per_task: int | None = None
    per_node: int | None = None
    nodes: int | None = None
    layout_at: Where | None = None
    gpus: GpuAsk | None = None
    requirement: Requirement = field(default_factory=Requirement)
    licenses: dict[str, int] = field(default_factory=dict)
    get_user_env: bool = False

    # --- messages ------------------------------------------------------------------------------

    def warn(self, text: str, at: Where | None = None) -> None:
        self.warnings.append(f"{at or self.where}: {text}")

    def refuse(self, text: str, at: Where | None = None) -> None:
        """An error naming the line, or a warning with `--lenient`."""
        if not self.lenient:
            raise Unsupported(text, at)
        self.warn(f"{text} (ignored: --lenient)", at)

    # --- what the translators set --------------------------------------------------------------

    def layout(self, **values: int) -> None:
        """Tasks, CPUs per task, tasks per node or nodes (as named), from this line."""
        for key, value in values.items():
            setattr(self, key, value)
        self.layout_at = self.where

    def gpus_per_host(self, count: int, unit: GpuUnit = "host") -> None:
        self.gpus = GpuAsk(count, unit, self.where)

    def add_license(self, name: str, count: int) -> None:
        lower = name.lower()
        if lower != name:
            self.warn(f"license {name} is asked as {lower} (XCE license names are lower case)")
        self.licenses[lower] = self.licenses.get(lower, 0) + count

    def memory(self, key: Literal["memory", "mem_per_cpu"], megabytes: int) -> None:
        """Memory per host or per slot: one of the two, as Slurm and XCE's controller
        allow."""
        other = "mem_per_cpu" if key == "memory" else "memory"
        if other in self.options:
            raise Unsupported(
                "memory per host (--mem, -M) and per CPU (--mem-per-cpu) are both given: "
                "keep one (Slurm refuses both too)"
            )
        self.options[key] = megabytes

    def xce_options(self, found: dict[str, Any]) -> None:
        """An `#XCE` line's options: its `-R` and `--license` join the others' requirement
        and licenses; the rest are set as given."""
        if "resources" in found:
            add_lsf(str(found.pop("resources")), self, "--resources")
        if "licenses" in found:
            for part in str(found.pop("licenses")).split(","):
                name, sep, count = part.strip().partition(":")
                if name:
                    self.add_license(name, _count(count, name) if sep else 1)
        self.options.update(found)

    # --- the end -------------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """The submit options: slots and span from the layout, GPUs per host, licenses,
        the merged resource requirement."""
        out = dict(self.options)
        per_host = self._layout(out)
        self._gpus(out, per_host)
        if self.get_user_env and "export" not in out:
            out["export"] = "ALL"
        if licenses := [f"{k}:{v}" for k, v in self.licenses.items() if v]:
            out["licenses"] = ",".join(licenses)
        resources = self.requirement.text()
        if resources:
            out["resources"] = resources
        return out

    def _layout(self, out: dict[str, Any]) -> int | None:
        """Slots = tasks x CPUs per task; `--nodes=1` is one host, `--ntasks-per-node=P`
        (or `--nodes=N` with T tasks: ceil(T/N) per host) a tile of P x CPUs slots per host.
        Returns the tasks per host where known, for GPUs per task."""
        nodes, per_node, tasks = self.nodes, self.per_node, self.tasks
        cpus = self.cpus_per_task or 1
        if tasks is None and nodes is None and per_node is None and self.cpus_per_task is None:
            return self._tasks_per_host(out.get("slots"), cpus)
        if tasks is None:
            tasks = nodes * per_node if nodes and per_node else per_node or nodes or 1
        out["slots"] = tasks * cpus
        at = self.layout_at or self.where
        if nodes == 1:
            self._span("hosts=1", at)
            return tasks
        if per_node:
            self._span(f"ptile={per_node * cpus}", at)
            return per_node
        if nodes:
            each = math.ceil(tasks / nodes)
            self._span(f"ptile={each * cpus}", at)
            if hosts_for(tasks, each) != nodes:
                self.warn(
                    f"{tasks} tasks on --nodes={nodes}: Slurm spreads them over exactly "
                    f"{nodes} hosts; XCE puts at most {each} on each host "
                    f"(span[ptile={each * cpus}]), so the job runs on "
                    f"{hosts_for(tasks, each)} hosts",
                    at,
                )
            return each
        return self._tasks_per_host(out["slots"], cpus)

    def _span(self, body: str, at: Where) -> None:
        try:
            self.requirement.set_span(body, at)
        except Unsupported as exc:
            self.refuse(str(exc), exc.at)

    def _tasks_per_host(self, slots: Any, cpus: int) -> int | None:
        """From an LSF span: ptile slots per host, or every task on one host."""
        tile = self.requirement.slots_per_host()
        if tile is not None:
            return max(1, tile // cpus)
        if self.requirement.one_host() and slots is not None:
            return max(1, int(slots) // cpus)
        return None

    def _gpus(self, out: dict[str, Any], per_host: int | None) -> None:
        """XCE counts GPUs per host (`--gpus`): a per-task or per-job count is turned into
        that, and the assumption is said."""
        ask = self.gpus
        if ask is None or not ask.count:
            return
        if ask.unit == "host":
            out["gpus"] = ask.count
            return
        cpus = self.cpus_per_task or 1
        tasks = int(out.get("slots", 1)) // cpus or 1
        if ask.unit == "task":
            each = per_host or tasks
            out["gpus"] = ask.count * each
            where = "tasks per host" if per_host else "tasks, all on one host"
            self.warn(
                f"XCE counts GPUs per host: {ask.count} per task is asked as "
                f"{out['gpus']} per host ({each} {where})",
                ask.at,
            )
            return
        hosts = hosts_for(tasks, per_host) if per_host else 1
        out["gpus"] = math.ceil(ask.count / hosts)
        if hosts > 1:
            self.warn(
                f"XCE counts GPUs per host: {ask.count} for the job is asked as "
                f"{out['gpus']} on each of its {hosts} hosts",
                ask.at,
            )


def _count(text: str, name: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"license {name}:{text}: the count must be a whole number")
    return int(text)
