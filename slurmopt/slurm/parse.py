"""Slurm's JSON and ``-o`` text, of any supported release, into :mod:`slurmopt.model` types.

It stays one module past 500 lines: jobs, nodes and partitions of every
supported release go through one set of field readers (``_Fields``), and the
differences between releases read best side by side.

Pure functions, no I/O: every adapter (command line, slurmrestd) feeds the
documents it fetched through here, so one set of rules covers
Slurm 22.05 (openapi v0.0.38), 24.11 (data_parser v0.0.40-42) and
26.05 (v0.0.42-45).  The differences absorbed here:

* ``job_state`` and node ``state`` are strings (22.05, node state lower
  case plus ``state_flags``) or upper-case lists (24.11+);
* numbers are plain or wrapped as ``{"set", "infinite", "number"}``;
* ``tres_per_node`` says ``gres:gpu:8`` (22.05) or ``gres/gpu:8``;
* ``features`` is a comma string (22.05) or a list;
* ``hold`` is absent in 22.05 and inferred from the pending reason;
* nodes come per node (22.05 ``sinfo``, ``scontrol show nodes``) or grouped
  (24.11+ ``sinfo``);
* partitions come from ``scontrol show partition -o`` text or JSON.
* a node's reason time is ``reason_changed_at`` per node, ``reason.time``
  in grouped records (0: never set, read as None).

Anything malformed raises :class:`SlurmResponseError` naming the source,
the object and the field, so a caller never sees a partial snapshot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from slurmopt.durations import slurm_duration_min
from slurmopt.errors import SlurmResponseError
from slurmopt.hostlist import HostlistError, expand
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition

#: The slurmrestd openapi versions whose documents these parsers read, oldest first:
#: 22.05's v0.0.38, 24.11's v0.0.40-42 and 26.05's v0.0.42-45 (23.02's v0.0.39 is unchecked).
REST_API_VERSIONS = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")

#: Slurm's backfill scheduler stores an INFINITE job time limit as 365 days.
BACKFILL_INFINITE_MINUTES = 525600

#: A parsed node and the GPU indices its ``gres_used`` names (None where it names none).
NodeRecord = tuple[Node, tuple[int, ...] | None]

#: Pending reasons that mean the job is held (22.05 has no ``hold`` field).
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})

_GRES_ITEM = re.compile(
    r"(?P<name>[^:(,]+)(?::(?P<type>[^:(,]+))?:(?P<count>\d+)(?:\((?P<detail>[^)]*)\))?"
)
_TRES_GPU = re.compile(r"^gres[:/]gpu(?::(?P<type>[^:=]+))?[:=](?P<count>\d+)$")


def _fail(source: str, where: str, cause: str) -> SlurmResponseError:
    return SlurmResponseError(f"{source}: {where}: {cause}" if where else f"{source}: {cause}")


# --------------------------------------------------------------------------- documents


def load_json(text: str | bytes, source: str) -> dict[str, Any]:
    """Parse one Slurm JSON document; refuse non-JSON, non-objects and reported errors."""
    try:
        doc = json.loads(text)
    except (ValueError, TypeError) as exc:
        snippet = text[:60] if isinstance(text, str) else text[:60].decode(errors="replace")
        raise _fail(
            source, "", f"not JSON ({exc.__class__.__name__}: {exc}; starts {snippet.strip()!r})"
        ) from None
    if not isinstance(doc, dict):
        raise _fail(source, "", f"expected a JSON object, got {type(doc).__name__}")
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        first = errors[0]
        if isinstance(first, dict):
            msg = first.get("description") or first.get("error") or json.dumps(first)
        else:
            msg = str(first)
        raise _fail(source, "", f"Slurm reported an error: {msg}")
    return doc


def meta_version(doc: Mapping[str, Any]) -> str:
    """``"22.05.8"``-style release from a document's ``meta`` (either spelling), or ``""``."""
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        return ""
    info = meta.get("slurm") or meta.get("Slurm")
    if not isinstance(info, dict):
        return ""
    release = info.get("release")
    if isinstance(release, str) and release:
        return release
    ver = info.get("version")
    if isinstance(ver, dict) and {"major", "minor"} <= ver.keys():
        return f"{int(ver['major'])}.{int(ver['minor']):02d}.{int(ver.get('micro', 0))}"
    return ""


def _records(doc: Mapping[str, Any], key: str, source: str) -> list[dict[str, Any]]:
    if key not in doc:
        raise _fail(source, "", f"missing top-level key {key!r} (keys: {sorted(doc)[:8]})")
    items = doc[key]
    if not isinstance(items, list):
        raise _fail(source, key, f"expected a list, got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _fail(source, f"{key}[{i}]", f"expected an object, got {type(item).__name__}")
    return items


# --------------------------------------------------------------------------- field readers


class _Fields:
    """Typed access to one JSON object, raising errors that name the object and the field."""

    def __init__(self, obj: Mapping[str, Any], source: str, where: str) -> None:
        self.obj = obj
        self.source = source
        self.where = where

    def fail(self, key: str, cause: str) -> SlurmResponseError:
        return _fail(self.source, f"{self.where} field {key!r}", cause)

    def required(self, key: str) -> Any:
        if key not in self.obj:
            raise _fail(self.source, self.where, f"missing required field {key!r}")
        return self.obj[key]

    def text(self, key: str, default: str = "") -> str:
        value = self.obj.get(key)
        if value is None:
            return default
        if isinstance(value, str):
            return value
        raise self.fail(key, f"expected a string, got {type(value).__name__}")

    def number(self, key: str, required: bool = False) -> int | None:
        """A plain or ``{set, infinite, number}`` number; None when unset or infinite."""
        value = self.required(key) if required else self.obj.get(key)
        return _unwrap_number(value, lambda cause: self.fail(key, cause))

    def flag(self, key: str) -> bool | None:
        value = self.obj.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise self.fail(key, f"expected a boolean, got {type(value).__name__}")

    def names(self, key: str) -> list[str]:
        """A comma string or a list of strings."""
        value = self.obj.get(key)
        if value is None or value == "":
            return []
        if isinstance(value, str):
            return [v for v in value.split(",") if v]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise self.fail(key, f"expected a string or list of strings, got {type(value).__name__}")

    def hosts(self, key: str) -> list[str]:
        value = self.text(key)
        try:
            return expand(value)
        except HostlistError as exc:
            raise self.fail(key, str(exc)) from None


def _unwrap_number(value: Any, fail: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise fail("expected a number, got bool")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict) and "number" in value:
        if value.get("infinite") or not value.get("set", True):
            return None
        return _unwrap_number(value["number"], fail)
    raise fail(f"expected a number, got {type(value).__name__}")


def _epoch(value: int | None) -> float | None:
    return float(value) if value else None


def _parse_gres_items(text: str) -> list[tuple[str, str | None, int, str | None]]:
    """``gpu:h100:4(IDX:0-3),nic:1`` -> ``[("gpu","h100",4,"IDX:0-3"), ("nic",None,1,None)]``."""
    items = []
    for match in _GRES_ITEM.finditer(text):
        items.append((match["name"].strip(), match["type"], int(match["count"]), match["detail"]))
    return items


def _index_list(detail: str | None) -> tuple[int, ...] | None:
    """``"IDX:0-2,5"`` -> ``(0, 1, 2, 5)``; ``"IDX:N/A"`` -> ``()``; no IDX -> None."""
    if detail is None or not detail.startswith("IDX:"):
        return None
    spec = detail[4:]
    if spec in ("", "N/A"):
        return ()
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"bad GPU index list {detail!r}")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def gpu_gres(text: str | None) -> tuple[int, str | None, tuple[int, ...] | None]:
    """GPU count, type and indices from a GRES string (``gres``, ``gres_used``, gres detail).

    Several GPU entries (mixed types) are summed; the type is kept only when
    there is one.  Indices are None when the string carries no ``IDX``.
    """
    count = 0
    types: set[str] = set()
    indices: list[int] | None = None
    for name, gtype, n, detail in _parse_gres_items(text or ""):
        if name != "gpu":
            continue
        count += n
        if gtype:
            types.add(gtype)
        idx = _index_list(detail)
        if idx is not None:
            indices = (indices or []) + list(idx)
    return (
        count,
        (types.pop() if len(types) == 1 else None),
        (tuple(indices) if indices is not None else None),
    )


def tres_gpus(text: str | None) -> tuple[int, str | None]:
    """GPUs in a ``tres_per_*`` string: ``gres:gpu:8``, ``gres/gpu:h100:8``, ``gres/gpu=2``."""
    for item in (text or "").split(","):
        match = _TRES_GPU.match(item.strip())
        if match:
            return int(match["count"]), match["type"]
    return 0, None


# --------------------------------------------------------------------------- jobs


def _job_state(value: Any, f: _Fields) -> JobState:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        names = value
    elif isinstance(value, str) and value:
        names = [value]
    else:
        raise f.fail("job_state", f"expected a state string or list, got {value!r}")
    for name in names:
        if name.upper() in JobState.__members__:
            return JobState(name.upper())
    return JobState.UNKNOWN


def parse_job(obj: Mapping[str, Any], source: str = "jobs") -> Job:
    """One job object of any supported release."""
    job_id = obj.get("job_id")
    f = _Fields(obj, source, f"job {job_id}")
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise f.fail("job_id", f"expected an integer, got {job_id!r}")
    state = _job_state(f.required("job_state"), f)
    reason = f.text("state_reason")
    if reason == "None":
        reason = ""
    held = f.flag("hold")
    if held is None:
        held = reason in HELD_REASONS

    nodes = f.hosts("nodes")
    node_count = f.number("node_count") or len(nodes)

    gres_detail = obj.get("gres_detail") or []
    if not isinstance(gres_detail, list) or not all(isinstance(g, str) for g in gres_detail):
        raise f.fail("gres_detail", f"expected a list of strings, got {gres_detail!r}")
    gpu_indices: dict[str, tuple[int, ...]] = {}
    detail_counts: list[int] = []
    gpu_type: str | None = None
    for node, detail in zip(nodes, gres_detail, strict=False):
        try:
            count, dtype, idx = gpu_gres(detail)
        except ValueError as exc:
            raise f.fail("gres_detail", str(exc)) from None
        detail_counts.append(count)
        gpu_type = gpu_type or dtype
        if idx is not None and idx:
            gpu_indices[node] = idx

    per_node, tres_type = tres_gpus(f.text("tres_per_node"))
    if not per_node and detail_counts:
        per_node = max(detail_counts)
    if not per_node:
        per_job, job_type = tres_gpus(f.text("tres_per_job"))
        if per_job:
            per_node = -(-per_job // max(node_count, 1))
            tres_type = tres_type or job_type
    gpu_type = gpu_type or tres_type

    minutes = f.number("time_limit")
    time_limit_s = None if minutes is None or minutes == BACKFILL_INFINITE_MINUTES else minutes * 60

    array_job = f.number("array_job_id")
    array_task = f.number("array_task_id")
    exclusive_raw = obj.get("exclusive")
    exclusive = bool(exclusive_raw) and exclusive_raw not in (["false"], "false", ["FALSE"])

    return Job(
        job_id=job_id,
        state=state,
        name=f.text("name"),
        user=f.text("user_name"),
        account=f.text("account"),
        partition=f.text("partition"),
        qos=f.text("qos"),
        priority=f.number("priority") or 0,
        reason=reason,
        held=held,
        requeue=bool(f.flag("requeue")),
        array_job_id=array_job or None,
        array_task_id=array_task if array_job else None,
        nodes=tuple(nodes),
        node_count=node_count,
        gpus_per_node=per_node,
        gpu_type=gpu_type,
        gpu_indices=gpu_indices,
        time_limit_s=time_limit_s,
        submit_time=_epoch(f.number("submit_time")),
        start_time=_epoch(f.number("start_time")),
        end_time=_epoch(f.number("end_time")),
        comment=f.text("comment"),
        admin_comment=f.text("admin_comment"),
        features=f.text("features"),
        excluded_nodes=tuple(f.hosts("excluded_nodes")),
        required_nodes=tuple(f.hosts("required_nodes")),
        dependency=f.text("dependency"),
        exclusive=exclusive,
        restarts=f.number("restart_cnt") or 0,
        # Slurm prints no begin time; a future --begin shows as pending reason BeginTime.
        het_job_id=f.number("het_job_id") or None,
        reservation=f.text("resv_name"),
        segment_size=f.number("segment_size") or None,  # Slurm 26.05+; 0 means unset
    )


def parse_config_text(text: str) -> dict[str, str]:
    """``Key = value`` lines of ``scontrol show config`` as a dict (other lines ignored)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def parse_jobs(doc: Mapping[str, Any], source: str = "squeue --json") -> list[Job]:
    """Every job of a ``squeue --json`` / ``scontrol show jobs --json`` / ``/jobs`` document."""
    return [parse_job(obj, source) for obj in _records(doc, "jobs", source)]


# --------------------------------------------------------------------------- nodes


def _node_state(state: Any, extra_flags: Any, f: _Fields) -> tuple[NodeState, frozenset[str]]:
    if isinstance(state, str) and state:
        words = [w for w in re.split(r"[+\s]", state) if w]
    elif isinstance(state, list) and state and all(isinstance(s, str) for s in state):
        words = list(state)
    else:
        raise f.fail("state", f"expected a state string or list, got {state!r}")
    if extra_flags is not None:
        if not isinstance(extra_flags, list) or not all(isinstance(s, str) for s in extra_flags):
            raise f.fail("state_flags", f"expected a list of strings, got {extra_flags!r}")
        words += extra_flags
    base = NodeState.UNKNOWN
    flags: set[str] = set()
    found = False
    for word in words:
        upper = word.upper()
        if not found and upper in NodeState.__members__:
            base = NodeState(upper)
            found = True
        else:
            flags.add(upper)
    return base, frozenset(flags)


def _gres_counts(
    f: _Fields, total_key: str, used_key: str, total: str | None = None, used: str | None = None
) -> tuple[int, int, str | None, tuple[int, ...] | None]:
    total_text = f.text(total_key) if total is None else total
    used_text = f.text(used_key) if used is None else used
    try:
        n_total, gtype, _ = gpu_gres(total_text)
        n_used, used_type, used_idx = gpu_gres(used_text)
    except ValueError as exc:
        raise f.fail(used_key, str(exc)) from None
    return n_total, n_used, gtype or used_type, used_idx


def parse_node(obj: Mapping[str, Any], source: str = "nodes") -> NodeRecord:
    """One per-node object; also returns the GPU indices ``gres_used`` names (None if none)."""
    name = obj.get("name")
    f = _Fields(obj, source, f"node {name}")
    if not isinstance(name, str) or not name:
        raise f.fail("name", f"expected a node name, got {name!r}")
    state, flags = _node_state(f.required("state"), obj.get("state_flags"), f)
    total, used, gtype, used_idx = _gres_counts(f, "gres", "gres_used")
    node = Node(
        name=name,
        state=state,
        flags=flags,
        partitions=tuple(f.names("partitions")),
        features=frozenset(f.names("active_features") or f.names("features")),
        weight=f.number("weight") or 1,
        gpus_total=total,
        gpus_alloc=used,
        gpu_type=gtype,
        cpus=f.number("cpus") or 0,
        alloc_cpus=f.number("alloc_cpus") or 0,
        reason=f.text("reason"),
        reason_time=_epoch(f.number("reason_changed_at")),
    )
    return node, used_idx


def _parse_grouped(doc: Mapping[str, Any], source: str) -> list[NodeRecord]:
    """24.11+ ``sinfo --json``: records grouped by identical state, expanded back per node."""
    merged: dict[str, NodeRecord] = {}
    for i, rec in enumerate(_records(doc, "sinfo", source)):
        f = _Fields(rec, source, f"sinfo[{i}]")
        nodes_obj = f.required("nodes")
        names = nodes_obj.get("nodes") if isinstance(nodes_obj, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise f.fail("nodes", "expected an object with a 'nodes' list of names")
        state, flags = _node_state(_sub(rec, "node").get("state"), None, f)
        gres = _sub(rec, "gres")
        total, used, gtype, used_idx = _gres_counts(
            f, "gres", "gres", total=str(gres.get("total") or ""), used=str(gres.get("used") or "")
        )
        feats = _sub(rec, "features")
        reason = _sub(rec, "reason")
        reason_time = _epoch(_Fields(reason, source, f"sinfo[{i}] reason").number("time"))
        part = _sub(rec, "partition")
        cpus = _sub(rec, "cpus")
        weight = _sub(rec, "weight")
        part_name = part.get("name") or ""
        for name in names:
            if name in merged:
                old, idx = merged[name]
                if part_name and part_name not in old.partitions:
                    merged[name] = (replace(old, partitions=old.partitions + (part_name,)), idx)
                continue
            merged[name] = (
                Node(
                    name=name,
                    state=state,
                    flags=flags,
                    partitions=(part_name,) if part_name else (),
                    features=frozenset(x for x in str(feats.get("active") or "").split(",") if x),
                    weight=int(weight.get("minimum") or 1),
                    gpus_total=total,
                    gpus_alloc=used,
                    gpu_type=gtype,
                    cpus=int(cpus.get("minimum") or 0),
                    # sinfo reports the group's sum; nodes of one group hold equal shares.
                    alloc_cpus=int(cpus.get("allocated") or 0) // max(len(names), 1),
                    reason=str(reason.get("description") or ""),
                    reason_time=reason_time,
                ),
                used_idx,
            )
    return list(merged.values())


def _sub(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A nested object, or an empty one where the release leaves it out."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def parse_node_records(doc: Mapping[str, Any], source: str = "nodes") -> list[NodeRecord]:
    """Per-node records from any node document (per-node ``nodes`` or grouped ``sinfo``)."""
    if "nodes" in doc:
        return [parse_node(obj, source) for obj in _records(doc, "nodes", source)]
    if "sinfo" in doc:
        return _parse_grouped(doc, source)
    raise _fail(source, "", f"missing top-level key 'nodes' or 'sinfo' (keys: {sorted(doc)[:8]})")


def attach_gpu_indices(records: Iterable[NodeRecord], jobs: Iterable[Job]) -> list[Node]:
    """Fill each node's ``alloc_gpu_indices`` from the active jobs' per-node GRES detail.

    Falls back to the indices in ``gres_used`` when the jobs do not account for
    every allocated GPU, and to None when neither source can tell.
    """
    by_node: dict[str, set[int]] = {}
    for job in jobs:
        if job.is_active:
            for name, idx in job.gpu_indices.items():
                by_node.setdefault(name, set()).update(idx)
    out = []
    for node, used_idx in records:
        from_jobs = by_node.get(node.name, set())
        indices: frozenset[int] | None
        if len(from_jobs) == node.gpus_alloc:
            indices = frozenset(from_jobs)
        elif used_idx is not None and len(used_idx) == node.gpus_alloc:
            indices = frozenset(used_idx)
        else:
            indices = None
        out.append(replace(node, alloc_gpu_indices=indices))
    return out


# --------------------------------------------------------------------------- partitions


def _duration_minutes(text: str, source: str, where: str) -> int | None:
    """A Slurm time string in minutes (:func:`slurmopt.durations.slurm_duration_min`)."""
    try:
        return slurm_duration_min(text)
    except ValueError as exc:
        raise _fail(source, where, str(exc)) from None


def parse_partitions_text(text: str, source: str = "scontrol show partition -o") -> list[Partition]:
    """One ``PartitionName=...`` line per partition, as 22.05+ ``scontrol -o`` prints them."""
    parts = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = dict(re.findall(r"(\S+?)=(\S*)", line))
        where = f"line {lineno}"
        if "PartitionName" not in fields:
            raise _fail(source, where, f"expected PartitionName=..., got {line[:60]!r}")
        name = fields["PartitionName"]
        try:
            nodes = tuple(expand(fields.get("Nodes")))
        except HostlistError as exc:
            raise _fail(source, where, str(exc)) from None
        max_nodes_text = fields.get("MaxNodes", "UNLIMITED")
        if max_nodes_text.upper() in ("UNLIMITED", "INFINITE"):
            max_nodes = None
        elif max_nodes_text.isdigit():
            max_nodes = int(max_nodes_text)
        else:
            raise _fail(source, where, f"bad MaxNodes {max_nodes_text!r}")
        minutes = _duration_minutes(fields.get("MaxTime", "UNLIMITED"), source, where)
        parts.append(
            Partition(
                name=name,
                nodes=nodes,
                state=fields.get("State", "UP"),
                default=fields.get("Default", "NO").upper() == "YES",
                max_time_s=None if minutes is None else minutes * 60,
                max_nodes=max_nodes,
            )
        )
    if not parts:
        raise _fail(source, "", "no PartitionName= lines")
    return parts


def _limit(value: int | None) -> int | None:
    """Slurm's "no limit" encodings (negative, INFINITE/NO_VAL 0xfffffffe/f) -> None."""
    if value is None or value < 0 or value >= 0xFFFFFFFE:
        return None
    return value


def partitions_mark_default(doc: Mapping[str, Any]) -> bool:
    """Whether a partitions document says which partition is the default.

    24.11's JSON (v0.0.40-42) has no ``flags``, so its ``default`` is always
    False; 22.05's slurmrestd and 26.05 carry ``flags: ["DEFAULT"]``.
    """
    records = doc.get("partitions")
    return isinstance(records, list) and any(
        isinstance(obj, dict) and "flags" in obj for obj in records
    )


def with_defaults(partitions: Sequence[Partition], defaults: Collection[str]) -> list[Partition]:
    """The partitions with ``default`` set exactly for the names in ``defaults``."""
    return [replace(part, default=part.name in defaults) for part in partitions]


def parse_partitions_json(doc: Mapping[str, Any], source: str = "partitions") -> list[Partition]:
    """``scontrol show partitions --json`` (24.11+) or slurmrestd ``/partitions`` (v0.0.38)."""
    parts = []
    for obj in _records(doc, "partitions", source):
        name = obj.get("name")
        f = _Fields(obj, source, f"partition {name}")
        if not isinstance(name, str) or not name:
            raise f.fail("name", f"expected a partition name, got {name!r}")
        nodes_val = obj.get("nodes")
        if isinstance(nodes_val, dict):
            nodes_val = nodes_val.get("configured", "")
        if not isinstance(nodes_val, str):
            raise f.fail("nodes", f"expected a hostlist, got {nodes_val!r}")
        try:
            nodes = tuple(expand(nodes_val))
        except HostlistError as exc:
            raise f.fail("nodes", str(exc)) from None
        maxima = obj.get("maximums") if isinstance(obj.get("maximums"), dict) else None
        if maxima is not None:
            mf = _Fields(maxima, source, f"partition {name} maximums")
            minutes, max_nodes = mf.number("time"), mf.number("nodes")
        else:
            # v0.0.38 (slurmrestd 22.05): -1 or NO_VAL-style values mean unlimited.
            minutes = _limit(f.number("max_time_limit"))
            max_nodes = _limit(f.number("maximum_nodes_per_job"))
        state_val: Any = obj.get("state")
        inner = obj.get("partition")
        if isinstance(inner, dict):
            state_val = inner.get("state")
        if isinstance(state_val, list):
            state_val = state_val[0] if state_val else "UP"
        flags = [str(x).upper() for x in (obj.get("flags") or []) if isinstance(x, str)]
        parts.append(
            Partition(
                name=name,
                nodes=nodes,
                state=str(state_val or "UP").upper(),
                default="DEFAULT" in flags,
                max_time_s=None if minutes is None else minutes * 60,
                max_nodes=max_nodes,
            )
        )
    return parts


# --------------------------------------------------------------------------- snapshot


def build_snapshot(
    jobs_doc: Mapping[str, Any],
    nodes_doc: Mapping[str, Any],
    partitions: Sequence[Partition],
    taken_at: float,
    source: str,
    jobs_source: str = "jobs",
    nodes_source: str = "nodes",
    slurm_version: str = "",
) -> ClusterSnapshot:
    """A complete snapshot from already-fetched documents, or :class:`SlurmResponseError`.

    The snapshot's ``slurm_version`` is the documents' ``meta`` release, else
    ``slurm_version`` (what the adapter detected otherwise).
    """
    jobs = parse_jobs(jobs_doc, jobs_source)
    nodes = attach_gpu_indices(parse_node_records(nodes_doc, nodes_source), jobs)
    return ClusterSnapshot.build(
        taken_at=taken_at,
        nodes=nodes,
        jobs=jobs,
        partitions=partitions,
        slurm_version=meta_version(jobs_doc) or meta_version(nodes_doc) or slurm_version,
        source=source,
    )
