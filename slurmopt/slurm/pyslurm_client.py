"""The pyslurm adapter: Slurm's C API through pyslurm 25.11 (``Jobs``, ``Nodes``, ``Partitions``).

pyslurm is built for exactly one Slurm release and refuses any other, so it
is imported only when this client is created; where it is missing or refuses
the installed Slurm, creating the client raises :class:`SlurmUnavailable`
with pyslurm's own reason.  pyslurm's objects are turned into the JSON shape
Slurm itself prints and fed through :mod:`slurmopt.slurm.parse`, so every
adapter applies the same rules.  Writes use the documented ``Job`` methods.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

from slurmopt.errors import SlurmCommandError, SlurmUnavailable
from slurmopt.hostlist import expand
from slurmopt.model import ClusterSnapshot
from slurmopt.slurm import parse
from slurmopt.slurm.cli import CliSlurmClient, ScontrolWrites


def load_pyslurm() -> Any:
    """Import pyslurm, or say why it cannot be used here."""
    try:
        return importlib.import_module("pyslurm")
    except ImportError as exc:
        raise SlurmUnavailable(f"pyslurm cannot be used: {exc}") from None
    except Exception as exc:  # pyslurm raises RuntimeError/ValueError on a version mismatch
        raise SlurmUnavailable(f"pyslurm refuses this Slurm: {exc}") from None


def _gres_text(gres: Mapping[str, Any] | None) -> str:
    """pyslurm's ``{"gpu:h100": 8}`` -> Slurm's ``gpu:h100:8``."""
    return ",".join(f"{name}:{count}" for name, count in (gres or {}).items())


def _gpu_tres(gres: Mapping[str, Any] | None) -> str:
    for name, count in (gres or {}).items():
        if name == "gpu" or name.startswith("gpu:"):
            return f"gres/{name}:{count}"
    return ""


def _gres_detail(job: Any, nodes: Iterable[str]) -> list[str]:
    """Per-node ``gpu[:type]:N(IDX:...)`` from pyslurm's resource layout, where it has one."""
    layout_of = getattr(job, "get_resource_layout_per_node", None)
    if layout_of is None:
        return []
    layout = layout_of() or {}
    out = []
    for node in nodes:
        gres = (layout.get(node) or {}).get("gres") or {}
        parts = []
        for name, info in gres.items():
            if name == "gpu" or name.startswith("gpu:"):
                parts.append(f"{name}:{info.get('count', 0)}(IDX:{info.get('indexes', '')})")
        out.append(",".join(parts))
    return out


def _state_words(state: Any) -> list[str]:
    if isinstance(state, str):
        return [w for w in state.replace("+", " ").split() if w]
    return [str(s) for s in state or []]


class PyslurmSlurmClient(ScontrolWrites):
    """:class:`~slurmopt.slurm.base.SlurmClient` over pyslurm (Slurm 25.11 only)."""

    name = "pyslurm"

    def __init__(self, cli: CliSlurmClient | None = None) -> None:
        self.pyslurm = load_pyslurm()
        self.cli = cli or CliSlurmClient()

    def _job_doc(self, job: Any) -> dict[str, Any]:
        nodes = job.allocated_nodes or ""
        deps = job.dependencies or {}
        return {
            "job_id": int(job.id),
            "job_state": _state_words(job.state),
            "state_reason": job.state_reason or "",
            "name": job.name or "",
            "user_name": job.user_name or "",
            "account": job.account or "",
            "partition": job.partition or "",
            "qos": job.qos or "",
            "priority": job.priority or 0,
            "requeue": bool(job.is_requeueable),
            "restart_cnt": job.requeue_count or 0,
            "array_job_id": job.array_id or 0,
            "array_task_id": job.array_task_id,
            "nodes": nodes,
            "node_count": job.num_nodes or 0,
            "gres_detail": _gres_detail(job, expand(nodes)),
            "tres_per_node": _gpu_tres(job.gres_per_node),
            "time_limit": job.time_limit,
            "submit_time": job.submit_time or 0,
            "start_time": job.start_time or 0,
            "end_time": job.end_time or 0,
            "comment": job.comment or "",
            "admin_comment": getattr(job, "admin_comment", None) or "",
            "features": "&".join(job.constraints or []),
            "required_nodes": job.required_nodes or "",
            "excluded_nodes": job.excluded_nodes or "",
            "dependency": ",".join(f"{k}:{v}" for k, v in deps.items() if v),
        }

    @staticmethod
    def _node_doc(node: Any) -> dict[str, Any]:
        return {
            "name": node.name,
            "state": _state_words(node.state),
            "partitions": list(node.partitions or []),
            "features": list(node.active_features or node.available_features or []),
            "weight": node.weight or 1,
            "gres": _gres_text(node.configured_gres),
            "gres_used": _gres_text(node.allocated_gres),
            "cpus": node.total_cpus or 0,
            "alloc_cpus": node.allocated_cpus or 0,
            "reason": node.reason or "",
        }

    @staticmethod
    def _partition_doc(part: Any) -> dict[str, Any]:
        max_time = part.max_time
        max_nodes = part.max_nodes
        return {
            "name": part.name,
            "nodes": part.nodes or "",
            "state": part.state or "UP",
            "flags": ["DEFAULT"] if part.is_default else [],
            "max_time_limit": max_time if isinstance(max_time, int) else -1,
            "maximum_nodes_per_job": max_nodes if isinstance(max_nodes, int) else -1,
        }

    def snapshot(self) -> ClusterSnapshot:
        taken_at = time.time()
        ps = self.pyslurm
        try:
            jobs = ps.Jobs.load()
            nodes = ps.Nodes.load()
            partitions = ps.Partitions.load()
        except Exception as exc:  # pyslurm.RPCError and friends
            raise SlurmUnavailable(f"pyslurm cannot load Slurm's state: {exc}") from None
        jobs_doc = {"jobs": [self._job_doc(j) for j in jobs.values()]}
        nodes_doc = {"nodes": [self._node_doc(n) for n in nodes.values()]}
        parts = parse.parse_partitions_json(
            {"partitions": [self._partition_doc(p) for p in partitions.values()]}, "pyslurm"
        )
        return parse.build_snapshot(
            jobs_doc,
            nodes_doc,
            parts,
            taken_at=taken_at,
            source=self.name,
            jobs_source="pyslurm Jobs",
            nodes_source="pyslurm Nodes",
        )

    def _job_call(self, what: str, job_id: int, call: Any) -> None:
        try:
            call(self.pyslurm.Job(job_id))
        except Exception as exc:
            raise SlurmCommandError([f"pyslurm Job({job_id}).{what}"], 1, str(exc)) from None

    def hold(self, job_id: int) -> None:
        self._job_call("hold", job_id, lambda job: job.hold())

    def release(self, job_id: int) -> None:
        self._job_call("release", job_id, lambda job: job.release())

    def requeue(self, job_id: int, hold: bool = True) -> None:
        self._job_call("requeue", job_id, lambda job: job.requeue(hold=hold))
