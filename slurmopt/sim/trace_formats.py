"""The trace formats: one reader per public or Slurm format, each into raw job rows.

A reader takes the file's text (``synthetic``: the spec itself), the path
for messages and a :class:`Tally` of what it skipped or assumed, and returns
a :class:`RawJob` per job in file order.  :func:`slurmopt.sim.traces.read_trace`
picks the reader, then sorts, shapes and renumbers the jobs.  A bad row is one
:class:`TraceError` naming the file and line (for JSON, the job's index).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmopt.durations import slurm_duration_s
from slurmopt.errors import SlurmoptError
from slurmopt.words import TRACE_FALSE_WORDS, TRACE_TRUE_WORDS, BoolWordError, parse_bool

#: The largest time or duration a trace may give, in seconds (about 317 years, past any epoch
#: stamp of this era): larger values are typos or garbage, and would overflow the metrics' sums.
MAX_SECONDS = 1e10

#: The largest count (GPUs, nodes, priority, limit) a trace may give: Slurm's 32-bit fields.
MAX_COUNT = 2**32 - 1

#: The most jobs a synthetic workload may have (a trace file is bounded by its size).
MAX_SYNTHETIC_JOBS = 1_000_000


class TraceError(SlurmoptError):
    """A trace file that cannot be read; the message names the file and line."""

    exit_code = 65  # EX_DATAERR

    def __init__(self, cause: str, path: str, line: int | str | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {cause}")


@dataclass
class RawJob:
    """A job as read, before gang rounding, sorting and renumbering."""

    submit_s: float
    duration_s: float
    gpus: int
    nodes: int | None = None
    gpus_per_node: int | None = None
    priority: int = 0
    time_limit_s: int | None = None
    preemptible: bool = False
    #: Elastic: the fewest nodes (``min_nodes``), or True for half the nodes (synthetic).
    min_nodes: int | None = None
    elastic: bool = False


@dataclass
class Tally:
    skipped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


# -- CSV plumbing ------------------------------------------------------------------------------
def read_text(path: str) -> str:
    try:
        # utf-8-sig: spreadsheets save CSV with a byte-order mark that would hide in a column name
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise TraceError("no such file", path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read: {exc}", path) from None


def csv_rows(
    text: str, path: str, required: Sequence[str], delimiter: str = ","
) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, row)`` per data row; blank lines are skipped, missing columns are an error."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header: list[str] | None = None
    for cells in reader:
        line = reader.line_num
        if not cells or all(not c.strip() for c in cells):
            continue
        if header is None:
            header = [c.strip() for c in cells]
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError(
                    f"missing column(s) {', '.join(missing)}; header is {delimiter.join(header)}",
                    path,
                    line,
                )
            continue
        if len(cells) != len(header):
            raise TraceError(f"expected {len(header)} fields, got {len(cells)}", path, line)
        yield line, {h: c.strip() for h, c in zip(header, cells, strict=True)}
    if header is None:
        raise TraceError("empty file", path)


def csv_number(row: Mapping[str, str], key: str, path: str, line: int) -> float:
    raw = row.get(key, "")
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{key} is not a number: {raw!r}", path, line) from None
    if not 0 <= value <= MAX_SECONDS:  # NaN fails too
        raise TraceError(
            f"{key} must be a finite number from 0 to {MAX_SECONDS:g}, got {raw!r}", path, line
        )
    return value


def csv_whole(row: Mapping[str, str], key: str, path: str, line: int) -> int:
    value = csv_number(row, key, path, line)
    if not value.is_integer() or value > MAX_COUNT:
        raise TraceError(
            f"{key} must be a whole number from 0 to {MAX_COUNT}, got {row[key]!r}", path, line
        )
    return int(value)


# -- the formats -------------------------------------------------------------------------------
def read_philly(text: str, path: str, tally: Tally) -> list[RawJob]:
    out = []
    for line, row in csv_rows(text, path, ("timestamp", "duration", "num_gpus")):
        try:
            submitted = dt.datetime.fromisoformat(row["timestamp"])
        except ValueError:
            raise TraceError(f"timestamp is not a date: {row['timestamp']!r}", path, line) from None
        submitted = submitted.replace(tzinfo=submitted.tzinfo or dt.UTC)
        out.append(
            RawJob(
                submitted.timestamp(),
                csv_number(row, "duration", path, line),
                csv_whole(row, "num_gpus", path, line),
            )
        )
    return out


def read_itp(text: str, path: str, tally: Tally) -> list[RawJob]:
    cols = ("submission_time", "duration", "num_gpu")
    return [
        RawJob(
            csv_number(row, "submission_time", path, line),
            csv_number(row, "duration", path, line),
            csv_whole(row, "num_gpu", path, line),
        )
        for line, row in csv_rows(text, path, cols)
    ]


def read_tiresias(text: str, path: str, tally: Tally) -> list[RawJob]:
    cols = ("num_gpu", "submit_time", "duration")
    return [
        RawJob(
            csv_number(row, "submit_time", path, line),
            csv_number(row, "duration", path, line),
            csv_whole(row, "num_gpu", path, line),
        )
        for line, row in csv_rows(text, path, cols)
    ]


def read_openb(text: str, path: str, tally: Tally) -> list[RawJob]:
    out = []
    shares = 0
    cols = ("num_gpu", "gpu_milli", "creation_time", "deletion_time")
    for line, row in csv_rows(text, path, cols):
        gpus = csv_whole(row, "num_gpu", path, line)
        milli = csv_whole(row, "gpu_milli", path, line)
        if gpus == 1 and 0 < milli < 1000:
            shares += 1  # a share of one GPU: counted as the whole GPU for now
        created = csv_number(row, "creation_time", path, line)
        started = created
        if row.get("scheduled_time"):
            started = max(created, csv_number(row, "scheduled_time", path, line))
        deleted = csv_number(row, "deletion_time", path, line)
        if deleted < started:
            raise TraceError("deletion_time is before the pod started", path, line)
        out.append(RawJob(created, deleted - started, gpus))
    if shares:
        tally.notes.append(
            f"{shares} pods ask for a share of one GPU (gpu_milli < 1000); each counts as 1 GPU"
        )
    return out


def _sacct_time(text: str) -> float | None:
    text = text.strip()
    if text in ("", "Unknown", "None", "N/A"):
        return None
    stamp = dt.datetime.fromisoformat(text)
    return stamp.replace(tzinfo=stamp.tzinfo or dt.UTC).timestamp()


_TRES_GPU = re.compile(r"(?:^|,)gres/gpu(?::[^=,]+)?=(\d+)")


def _tres_gpus(text: str) -> int:
    """GPUs in an ``AllocTRES`` string; typed entries (``gres/gpu:h100=8``) are the same GPUs.

    ValueError for a count above :data:`MAX_COUNT`.
    """
    counts = [int(m) if len(m) <= 10 else MAX_COUNT + 1 for m in _TRES_GPU.findall(text)]
    most = max(counts, default=0)
    if most > MAX_COUNT:
        raise ValueError(f"GPU count in {_short(text)} is above {MAX_COUNT}")
    return most


def read_sacct(text: str, path: str, tally: Tally) -> list[RawJob]:
    out = []
    cols = ("Submit", "Start", "End", "Timelimit", "AllocTRES", "NNodes")
    for line, row in csv_rows(text, path, cols, delimiter="|"):
        try:
            submit, start, end = (_sacct_time(row[k]) for k in ("Submit", "Start", "End"))
            limit = slurm_duration_s(row["Timelimit"])
            if limit is not None and limit > MAX_SECONDS:
                raise ValueError(f"Timelimit {row['Timelimit']!r} is above {MAX_SECONDS:g} s")
            gpus = _tres_gpus(row["AllocTRES"])
        except (ValueError, OverflowError) as exc:
            raise TraceError(str(exc), path, line) from None
        if submit is None or start is None or end is None or end < start:
            tally.skip("never ran or still running")
            continue
        if gpus == 0:
            tally.skip("no GPUs")
            continue
        nodes = csv_whole(row, "NNodes", path, line) or 1
        prio = csv_whole(row, "Priority", path, line) if row.get("Priority") else 0
        per_node = gpus // nodes if gpus % nodes == 0 else None
        out.append(
            RawJob(submit, end - start, gpus, nodes if per_node else None, per_node, prio, limit)
        )
    return out


def _json_number(value: Any, what: str) -> float | None:
    """A plain number or Slurm's ``{set, infinite, number}``; None when unset or infinite.

    ValueError for anything else, and for a number that is not finite or not
    from 0 to :data:`MAX_SECONDS` (json reads ``NaN`` and ``Infinity``).
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        return _json_number(value.get("number"), what)
    if not isinstance(value, int | float):
        raise ValueError(f"{what}: expected a number, got {_short(value)}")
    if not 0 <= value <= MAX_SECONDS:  # NaN fails too
        raise ValueError(f"{what}: expected a number from 0 to {MAX_SECONDS:g}, got {value!r}")
    return float(value)


def _json_whole(value: Any, what: str) -> int | None:
    """A whole number (plain or Slurm's ``{set, infinite, number}``) up to :data:`MAX_COUNT`."""
    number = _json_number(value, what)
    if number is None:
        return None
    if not number.is_integer() or number > MAX_COUNT:
        raise ValueError(f"{what}: expected a whole number from 0 to {MAX_COUNT}, got {value!r}")
    return int(number)


def _short(value: Any) -> str:
    """``repr(value)`` cut to fit on one line of an error."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_gpus(job: Mapping[str, Any]) -> int:
    tres = job.get("tres") or {}
    items = tres.get("allocated") if isinstance(tres, dict) else None
    if not isinstance(items, list):
        items = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"tres.allocated: expected objects, got {_short(item)}")
        if item.get("type") == "gres" and str(item.get("name", "")).split(":")[0] == "gpu":
            return _json_whole(item.get("count"), "GPU count") or 0
    for key in ("tres_alloc_str", "tres_req_str"):
        if isinstance(job.get(key), str):
            return _tres_gpus(job[key])
    return 0


def read_sacct_json(text: str, path: str, tally: Tally) -> list[RawJob]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"not JSON: {exc.msg}", path, exc.lineno) from None
    except RecursionError:
        raise TraceError("not a sacct --json document: nested too deeply", path) from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise TraceError("expected an object with a 'jobs' list (sacct --json)", path)
    out = []
    for i, job in enumerate(jobs):
        where = f"jobs[{i}]"
        try:
            if not isinstance(job, dict):
                raise ValueError("expected an object")
            times = job.get("time") or {}
            if not isinstance(times, dict):
                raise ValueError(f"time: expected an object, got {_short(times)}")
            submit = _json_number(times.get("submission"), "time.submission")
            start = _json_number(times.get("start"), "time.start")
            end = _json_number(times.get("end"), "time.end")
            limit_min = _json_whole(times.get("limit"), "time.limit")
            nodes = _json_whole(job.get("allocation_nodes", job.get("node_count")), "nodes")
            prio = _json_whole(job.get("priority"), "priority") or 0
            gpus = _json_gpus(job)
        except ValueError as exc:
            raise TraceError(str(exc), path, where) from None
        if not submit or not start or not end or end < start:
            tally.skip("never ran or still running")
            continue
        if gpus == 0:
            tally.skip("no GPUs")
            continue
        k = int(nodes or 1)
        per_node = gpus // k if gpus % k == 0 else None
        limit = None if limit_min is None else limit_min * 60
        out.append(
            RawJob(submit, end - start, gpus, k if per_node else None, per_node, int(prio), limit)
        )
    return out


_CSV_REQUIRED = ("submit_s", "duration_s", "gpus")


def read_plain_csv(text: str, path: str, tally: Tally) -> list[RawJob]:
    out = []
    for line, row in csv_rows(text, path, _CSV_REQUIRED):
        raw = RawJob(
            csv_number(row, "submit_s", path, line),
            csv_number(row, "duration_s", path, line),
            csv_whole(row, "gpus", path, line),
        )
        if row.get("nodes"):
            raw.nodes = csv_whole(row, "nodes", path, line)
        if row.get("gpus_per_node"):
            raw.gpus_per_node = csv_whole(row, "gpus_per_node", path, line)
        if raw.nodes is not None and raw.gpus_per_node is None:
            if raw.nodes == 0 or raw.gpus % raw.nodes:
                raise TraceError(f"gpus {raw.gpus} do not split over {raw.nodes} nodes", path, line)
            raw.gpus_per_node = raw.gpus // raw.nodes
        if raw.gpus_per_node is not None:
            raw.nodes = raw.nodes or max(1, raw.gpus // max(raw.gpus_per_node, 1))
            if raw.nodes * raw.gpus_per_node != raw.gpus:
                raise TraceError(
                    f"gpus {raw.gpus} != nodes {raw.nodes} x gpus_per_node {raw.gpus_per_node}",
                    path,
                    line,
                )
        if row.get("priority"):
            raw.priority = csv_whole(row, "priority", path, line)
        if row.get("time_limit_s"):
            raw.time_limit_s = csv_whole(row, "time_limit_s", path, line)
        if row.get("min_nodes"):
            raw.min_nodes = csv_whole(row, "min_nodes", path, line)
            if not 1 <= raw.min_nodes <= (raw.nodes or raw.min_nodes):
                raise TraceError(
                    f"min_nodes {raw.min_nodes} must be between 1 and nodes {raw.nodes}", path, line
                )
        flag = row.get("preemptible", "")
        try:
            raw.preemptible = parse_bool(
                flag, what="preemptible", also_true=TRACE_TRUE_WORDS, also_false=TRACE_FALSE_WORDS
            )
        except BoolWordError:
            raise TraceError(
                f"preemptible must be true or false, got {flag.lower()!r}", path, line
            ) from None
        out.append(raw)
    return out


#: ``synthetic``: the generator's defaults (GPUs:weight pairs; a lognormal run time).
SYNTHETIC_DEFAULTS: Mapping[str, str] = {
    "jobs": "1000",
    "mix": "1:0.4/2:0.1/4:0.15/8:0.2/16:0.1/32:0.05",
    "duration_s": "3600",
    "sigma": "1.5",
    "seed": "42",
    "preemptible": "0",
    "elastic": "0",
}


def read_synthetic(text: str, path: str, tally: Tally) -> list[RawJob]:
    """A seeded synthetic workload from ``KEY=VALUE,...`` (``--trace`` is the spec, not a file).

    ``jobs``: how many; ``mix``: ``GPUS:WEIGHT`` pairs joined by ``/``, the
    job-size mix; ``duration_s`` and ``sigma``: a lognormal run time with
    that median and shape (real traces are heavy-tailed: most jobs short, a
    few very long), at least 60 s; ``seed``; ``preemptible``: the share of
    jobs tagged preemptible; ``elastic``: the share of multi-node jobs that
    are elastic, running on half their nodes up to all of them (their time
    limit is then the budget at half).  Arrivals are a Poisson process at one job per
    second: ``--load`` (1.0 when not given) then scales them to the load
    wanted on the fabric.
    """
    values = dict(SYNTHETIC_DEFAULTS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in SYNTHETIC_DEFAULTS:
            known = ", ".join(SYNTHETIC_DEFAULTS)
            raise TraceError(f"synthetic: {part!r} is not KEY=VALUE with KEY one of {known}", path)
        values[key] = value.strip()
    try:
        jobs = int(values["jobs"])
        median = float(values["duration_s"])
        sigma = float(values["sigma"])
        seed = int(values["seed"])
        share = float(values["preemptible"])
        elastic = float(values["elastic"])
        mix = []
        for pair in values["mix"].split("/"):
            gpus, sep, weight = pair.partition(":")
            if not sep:
                raise TraceError(f"synthetic: mix needs GPUS:WEIGHT pairs, got {pair!r}", path)
            mix.append((int(gpus), float(weight)))
    except ValueError as exc:
        raise TraceError(f"synthetic: bad number ({exc})", path) from None
    if (
        not 1 <= jobs <= MAX_SYNTHETIC_JOBS
        or not 0 < median <= MAX_SECONDS
        or not 0 <= sigma <= 10
        or not 0 <= share <= 1
        or not 0 <= elastic <= 1
    ):  # NaN fails every comparison
        raise TraceError(
            f"synthetic: 1 <= jobs <= {MAX_SYNTHETIC_JOBS}, 0 < duration_s <= {MAX_SECONDS:g}, "
            "0 <= sigma <= 10, 0 <= preemptible <= 1 and 0 <= elastic <= 1",
            path,
        )
    if (
        not mix
        or any(not 1 <= g <= MAX_COUNT or not 0 <= w <= MAX_SECONDS for g, w in mix)
        or sum(w for _, w in mix) <= 0
    ):
        raise TraceError(
            "synthetic: mix needs GPUS:WEIGHT pairs, GPUS >= 1, finite weights, some > 0", path
        )
    rng = random.Random(seed)
    sizes, weights = [g for g, _ in mix], [w for _, w in mix]
    out = []
    at = 0.0
    for _ in range(jobs):
        at += rng.expovariate(1.0)
        duration = min(max(60.0, rng.lognormvariate(math.log(median), sigma)), MAX_SECONDS)
        size = rng.choices(sizes, weights)[0]
        preemptible = rng.random() < share
        is_elastic = rng.random() < elastic
        out.append(RawJob(at, round(duration), size, preemptible=preemptible, elastic=is_elastic))
    tally.notes.append(
        f"synthetic workload: {jobs} jobs, seed {seed}, mix {values['mix']}, lognormal run "
        f"time (median {median:g} s, sigma {sigma:g}), {share:.0%} preemptible, "
        f"{elastic:.0%} of multi-node jobs elastic"
    )
    return out


__all__ = [
    "MAX_COUNT",
    "MAX_SECONDS",
    "MAX_SYNTHETIC_JOBS",
    "SYNTHETIC_DEFAULTS",
    "RawJob",
    "Tally",
    "TraceError",
    "csv_number",
    "csv_rows",
    "csv_whole",
    "read_itp",
    "read_openb",
    "read_philly",
    "read_plain_csv",
    "read_sacct",
    "read_sacct_json",
    "read_synthetic",
    "read_text",
    "read_tiresias",
]
