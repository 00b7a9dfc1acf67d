"""Live A/B on the real Slurm sandbox: plain Slurm against ``slurmopt daemon --enforce``.

A window of a trace is compressed by ``K`` (arrivals, durations and time
limits divided by ``K``) and replayed twice on the sandbox of
``scripts/slurm-sandbox`` (``$SLURM_CONF``): once under plain Slurm (no
daemon; the job-submit plugin fails open on the missing or stale heartbeat)
and once with ``slurmopt daemon --enforce`` running (its configuration
beside ``$SLURM_CONF``, a fresh store per run).  Every job is a ``sleep`` of
its compressed duration, submitted at its compressed arrival with
``-N NODES --gres=gpu:GPUS_PER_NODE`` and a time limit of its compressed
trace limit (whole minutes, at least 1), through ``slurmopt submit``'s own
argument builder (the job carries slurmopt's tag in both runs; only the
daemon's presence differs).  Jobs larger than the sandbox are dropped and
counted.

Per job the results come from Slurm's job-completion records (what
``sacct -c`` reads: submit, start, end, nodes); every few seconds
``squeue`` is sampled for stranded GPUs (free GPUs on partly used nodes)
and GPU allocation while jobs wait.  Each figure is reported as the ratio
slurmopt / plain, beside the simulator's prediction of the same ratio for
the same compressed workload (``slurmopt`` against ``slurm-backfill-tree``
on the sandbox's ``topology.conf`` and backfill settings).  A live ratio more
than 5 points from the simulated one gets a line naming the likely cause.
The daemon's run also reports its pin latency: per job, the seconds from the
cycle that pinned it (the run's store) to slurmctld starting it (its log,
to the millisecond), the delay ``--sim-pin-latency`` stands for.

    python -m benchmarks.live_ab --trace ../shared/traces/philly-sia/philly.csv \\
        --trace-format philly-sia --window 20000:300 --compress 60 [--json]
    python -m benchmarks.live_ab ... --dry-run     # compression and prediction only, no Slurm

The live part needs the sandbox and takes the sandbox's exclusive lock
(``tests.sandbox.exclusive_cluster``) for both runs; it is not a test.  The
pure parts (compression, metrics from completion rows and samples, the ratio
table) are tested in ``tests/unit/test_live_ab.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slurmopt.hostlist import expand
from slurmopt.sim import Trace, TraceJob, read_trace, simulate
from slurmopt.sim.comm import CommModel

#: Points (of the ratio, x100) by which live and simulated ratios may differ unexplained.
GAP_POINTS = 5.0
SAMPLE_EVERY_S = 3.0
JOB_PREFIX = "liveab"
#: Fewer multi-node jobs than this: their mean wait is named as noisy.
FEW_GANGS = 20
#: (key, label, simulator metric) of each figure compared.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("mean_jct_s", "mean JCT (s)", "avg_jct_s"),
    ("p95_queue_delay_s", "p95 queueing delay (s)", "p95_queue_delay_s"),
    ("mean_wait_multinode_s", "mean wait, multi-node jobs (s)", "avg_wait_multinode_s"),
    ("stranded_gpus_when_queued", "stranded GPUs while jobs wait", "avg_stranded_gpus_when_queued"),
    (
        "gpu_allocation_when_queued",
        "GPU allocation while jobs wait",
        "gpu_allocation_ratio_when_queued",
    ),
)


# ----------------------------------------------------------------------------- pure parts


@dataclass(frozen=True)
class LiveJob:
    """One compressed job: what is submitted, and when (seconds after the run's start)."""

    index: int
    submit_s: float
    sleep_s: float
    nodes: int
    gpus_per_node: int
    time_limit_min: int


@dataclass(frozen=True)
class Workload:
    jobs: tuple[LiveJob, ...]
    compress: float
    dropped_too_big: int
    source_jobs: int


def compress(trace: Trace, k: float, cluster_nodes: int, gpus_per_node: int) -> Workload:
    """Divide arrivals, durations and time limits by ``k``; drop jobs the cluster cannot hold.

    Sleeps are at least 1 s (tenths kept), limits whole minutes, at least 1 and never below
    the sleep.  A job asking for more nodes than the cluster has, or more GPUs per node than
    a node has, is dropped and counted.
    """
    if not (k > 0 and math.isfinite(k)):
        raise ValueError(f"compression must be a positive number, got {k}")
    jobs: list[LiveJob] = []
    dropped = 0
    for job in trace.jobs:
        if job.nodes > cluster_nodes or job.gpus_per_node > gpus_per_node:
            dropped += 1
            continue
        sleep = max(1.0, round(job.duration_s / k, 1))
        limit = max(1, math.ceil(job.time_limit_s / k / 60), math.ceil(sleep / 60))
        jobs.append(
            LiveJob(
                index=len(jobs) + 1,
                submit_s=round(job.submit_s / k, 1),
                sleep_s=sleep,
                nodes=job.nodes,
                gpus_per_node=job.gpus_per_node,
                time_limit_min=limit,
            )
        )
    return Workload(tuple(jobs), k, dropped, len(trace.jobs))


def sim_trace(workload: Workload, name: str = "live-ab") -> Trace:
    """The compressed workload as the simulator's trace (earlier submits rank first)."""
    n = len(workload.jobs)
    return Trace(
        name,
        "csv",
        tuple(
            TraceJob(
                job_id=j.index,
                submit_s=j.submit_s,
                duration_s=j.sleep_s,
                nodes=j.nodes,
                gpus_per_node=j.gpus_per_node,
                time_limit_s=j.time_limit_min * 60,
                gpus_asked=j.nodes * j.gpus_per_node,
                priority=n - i,  # priority/basic: earlier submit ranks first
            )
            for i, j in enumerate(workload.jobs)
        ),
    )


def sbatch_args(job: LiveJob, run: str, workdir: str) -> list[str]:
    """``slurmopt submit`` arguments for one job (the same in both runs but for the name)."""
    return [
        "--parsable",
        "-J",
        f"{JOB_PREFIX}-{run}-{job.index}",
        "-o",
        "/dev/null",
        "-D",
        workdir,
        "-p",
        "gpu",
        "-N",
        str(job.nodes),
        f"--gres=gpu:{job.gpus_per_node}",
        "-c",
        "1",
        "--mem=1G",
        f"--time={job.time_limit_min}",
        "--wrap",
        f"sleep {job.sleep_s:g}",
    ]


_JOBCOMP_FIELD = re.compile(r"(\w+)=(\S*)")


def parse_jobcomp(text: str) -> list[dict[str, str]]:
    """Records of Slurm's ``jobcomp/filetxt`` log (``Key=Value`` pairs, one job a line).

    ``sacct -c`` reads the same file but shows ``EligibleTime`` as ``Submit`` (Slurm 22.05),
    which for a job held and released is the release: the raw ``SubmitTime`` is read here.
    """
    return [dict(_JOBCOMP_FIELD.findall(line)) for line in text.splitlines() if "JobId=" in line]


def _stamp(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Row:
    """One finished job: times in seconds (any origin), its node count and end state."""

    job_id: int
    submit: float
    start: float
    end: float
    nodes: int
    state: str


def rows_from_jobcomp(
    records: Sequence[Mapping[str, str]], job_ids: Mapping[int, str]
) -> list[Row]:
    """The rows of the jobs in ``job_ids`` (id -> job name, to reject a reused id)."""
    rows: dict[int, Row] = {}
    for rec in records:
        try:
            job_id = int(rec.get("JobId", ""))
        except ValueError:
            continue
        if job_ids.get(job_id) != rec.get("Name"):
            continue
        submit, start, end = (
            _stamp(rec.get(k, "")) for k in ("SubmitTime", "StartTime", "EndTime")
        )
        if submit is None or start is None or end is None:
            continue
        nodes = int(rec.get("NodeCnt", "0") or 0)
        rows[job_id] = Row(job_id, submit, start, end, nodes, rec.get("JobState", ""))
    return [rows[j] for j in sorted(rows)]


def _percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank, as the simulator's metrics take it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def job_metrics(rows: Sequence[Row]) -> dict[str, Any]:
    """Mean JCT, p95 queueing delay and mean wait of multi-node jobs of the jobs that ran."""
    ran = [r for r in rows if r.start >= r.submit and r.nodes > 0]
    waits = [r.start - r.submit for r in ran]
    multi = [r.start - r.submit for r in ran if r.nodes > 1]
    first = min((r.submit for r in ran), default=0.0)
    last = max((r.end for r in ran), default=first)
    return {
        "jobs": len(ran),
        "not_completed": sum(r.state != "COMPLETED" for r in rows),
        "mean_jct_s": _round(_mean([r.end - r.submit for r in ran])),
        "mean_queue_delay_s": _round(_mean(waits)),
        "p95_queue_delay_s": _round(_percentile(waits, 95)),
        "multinode_jobs": len(multi),
        "mean_wait_multinode_s": _round(_mean(multi)),
        "makespan_s": _round(last - first),
    }


@dataclass(frozen=True)
class Sample:
    """One look at the cluster: GPUs allocated per node, and how many jobs wait."""

    t: float
    pending: int
    allocated: Mapping[str, int]


def parse_squeue(text: str, t: float, prefix: str = "") -> Sample:
    """A sample from ``squeue -h -o '%i|%T|%N|%b|%j'`` (``%b``: ``gres:gpu:N`` per node).

    Only jobs whose name starts with ``prefix`` count as waiting; every running job's GPUs
    count as allocated.
    """
    pending = 0
    allocated: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5:
            continue
        _, state, nodelist, gres, name = parts[:5]
        if state == "PENDING":
            pending += name.startswith(prefix)
            continue
        if state not in ("RUNNING", "COMPLETING"):
            continue
        match = re.search(r"gpu(?::[^:,]+)?:(\d+)", gres)
        per_node = int(match.group(1)) if match else 0
        for node in expand(nodelist):
            allocated[node] = allocated.get(node, 0) + per_node
    return Sample(t, pending, allocated)


def sample_metrics(samples: Sequence[Sample], nodes: int, gpus_per_node: int) -> dict[str, Any]:
    """Time-weighted stranded GPUs and GPU allocation while some job waits.

    Each sample holds until the next one (the last holds for nothing).  Stranded GPUs: free
    GPUs on partly used nodes, as the simulator counts them.
    """
    total = nodes * gpus_per_node
    queued_t = stranded = allocated = 0.0
    for here, after in zip(samples, samples[1:], strict=False):
        dt = after.t - here.t
        if dt <= 0 or here.pending == 0:
            continue
        used = {n: min(g, gpus_per_node) for n, g in here.allocated.items()}
        queued_t += dt
        allocated += dt * sum(used.values())
        stranded += dt * sum(gpus_per_node - g for g in used.values() if 0 < g < gpus_per_node)
    span = samples[-1].t - samples[0].t if len(samples) > 1 else 0.0
    return {
        "samples": len(samples),
        "queued_time_share": _round(queued_t / span if span else None, 4),
        "stranded_gpus_when_queued": _round(stranded / queued_t if queued_t else None),
        "gpu_allocation_when_queued": _round(
            allocated / (total * queued_t) if queued_t else None, 4
        ),
    }


_CTLD_START = re.compile(
    r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?\] "
    r"(?:sched: Allocate|sched/backfill: _start_job: Started) JobId=(\d+)\b",
    re.M,
)


def parse_ctld_starts(text: str) -> dict[int, list[float]]:
    """When slurmctld started each job (epoch seconds, in log order), from its log.

    The job-completion record's ``StartTime`` is whole seconds, too coarse for a latency of
    about one; slurmctld's own ``sched: Allocate`` and backfill ``Started`` lines carry
    milliseconds.  A job id can recur (a requeue, a sandbox restarted), hence a list.
    """
    starts: dict[int, list[float]] = {}
    for stamp, fraction, job_id in _CTLD_START.findall(text):
        second = _stamp(stamp)
        if second is not None:
            starts.setdefault(int(job_id), []).append(second + float(fraction or 0))
    return starts


def pin_latency(
    pinned: Mapping[int, float], starts: Mapping[int, Sequence[float]]
) -> dict[str, Any]:
    """Seconds from the daemon cycle that pinned each job to slurmctld starting it.

    ``pinned``: job id -> the cycle's clock of its last pin (the store's ``pinned``
    transition); the start is slurmctld's first one at or after it.  This is the delay the
    simulator's ``pin_latency_s`` stands for.  Jobs pinned but never started are left out.
    """
    latencies = []
    for job_id, at in pinned.items():
        after = [t for t in starts.get(job_id, ()) if t >= at]
        if after:
            latencies.append(min(after) - at)
    return {
        "jobs": len(latencies),
        "median_s": _round(_percentile(latencies, 50)),
        "p95_s": _round(_percentile(latencies, 95)),
        "mean_s": _round(_mean(latencies)),
        "max_s": _round(max(latencies, default=None)),
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def ratio(ours: float | None, base: float | None) -> float | None:
    """slurmopt / baseline; None when either is missing or the baseline is 0."""
    if ours is None or base is None or base == 0:
        return None
    return ours / base


@dataclass(frozen=True)
class RatioRow:
    key: str
    label: str
    plain: float | None
    slurmopt: float | None
    live: float | None
    sim_plain: float | None
    sim_slurmopt: float | None
    simulated: float | None
    gap_points: float | None
    cause: str | None = None


@dataclass(frozen=True)
class Context:
    """What the cause lines need besides the figures."""

    multinode_jobs: int = 0
    daemon_interval_s: float = 0.0
    mean_sleep_s: float = 0.0
    sched_interval_s: float = 0.0
    unfinished: int = 0
    extra_wait_s: float = 0.0
    causes: Mapping[str, str] = field(default_factory=dict)
    #: The prediction started slurmopt's jobs at the daemon's cycle plus the pin latency.
    cycle_simulated: bool = False


def likely_cause(row: RatioRow, ctx: Context) -> str:
    """A one-line guess at why the live ratio is more than GAP_POINTS from the simulated one."""
    if row.key in ctx.causes:
        return ctx.causes[row.key]
    if ctx.unfinished:
        return f"{ctx.unfinished} jobs did not finish in one of the live runs"
    parts = []
    if row.key == "mean_wait_multinode_s" and ctx.multinode_jobs < FEW_GANGS:
        parts.append(f"only {ctx.multinode_jobs} multi-node jobs: one gang's wait moves the ratio")
    if row.key.endswith("_s") and row.live is not None and row.simulated is not None:
        if row.live > row.simulated:
            extra = (
                f"; slurmopt's jobs waited {ctx.extra_wait_s:.1f} s longer on average"
                if ctx.extra_wait_s > 0
                else ""
            )
            modelled = (
                "as simulated; plain Slurm's own timers are not"
                if ctx.cycle_simulated
                else "which the simulator does not model"
            )
            parts.append(
                f"the daemon starts a job only at its cycle (every {ctx.daemon_interval_s:g} s, "
                f"then pin and release{extra}), {modelled}"
            )
        else:
            parts.append("plain Slurm started jobs later than simulated (its timers, not modelled)")
        small = min((v for v in (row.plain, row.sim_plain) if v is not None), default=None)
        if small is not None and small < 4 * max(ctx.sched_interval_s, 1):
            parts.append(f"the plain figure is only {small:g} s, so seconds swing the ratio")
    elif row.key == "stranded_gpus_when_queued":
        parts.append(
            "stranding is sampled every few seconds and only while jobs wait; the live runs "
            "wait at other moments than the simulation, and plain Slurm's node choice for "
            "one-node jobs is simulated by index"
        )
    else:
        parts.append("the live runs queue at other moments than the simulation")
    return "; ".join(parts)


def ratio_table(
    plain: Mapping[str, Any],
    ours: Mapping[str, Any],
    sim_plain: Mapping[str, Any],
    sim_ours: Mapping[str, Any],
    ctx: Context | None = None,
) -> list[RatioRow]:
    """One row per compared figure: live values and ratio, simulated values and ratio, gap."""
    ctx = ctx or Context()
    rows = []
    for key, label, sim_key in METRICS:
        live = ratio(ours.get(key), plain.get(key))
        simulated = ratio(sim_ours.get(sim_key), sim_plain.get(sim_key))
        gap = None if live is None or simulated is None else round(100 * (live - simulated), 1)
        row = RatioRow(
            key,
            label,
            plain.get(key),
            ours.get(key),
            _round(live, 3),
            sim_plain.get(sim_key),
            sim_ours.get(sim_key),
            _round(simulated, 3),
            gap,
        )
        if gap is not None and abs(gap) > GAP_POINTS:
            row = RatioRow(**{**asdict(row), "cause": likely_cause(row, ctx)})
        rows.append(row)
    return rows


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"


def render_table(rows: Sequence[RatioRow]) -> str:
    """A Markdown table: live plain, live slurmopt, live ratio, simulated ratio, gap."""
    lines = [
        "| figure | plain Slurm | slurmopt | live ratio | simulated ratio | gap (points) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        gap = "-" if r.gap_points is None else f"{r.gap_points:+.1f}"
        lines.append(
            f"| {r.label} | {_fmt(r.plain)} | {_fmt(r.slurmopt)} | {_fmt(r.live)} | "
            f"{_fmt(r.simulated)} | {gap} |"
        )
    causes = [f"- {r.label}: {r.cause}" for r in rows if r.cause]
    if causes:
        lines += ["", f"Gaps over {GAP_POINTS:g} points, likely cause:", *causes]
    return "\n".join(lines)


def scheduler_params(config_text: str) -> dict[str, float]:
    """``bf_interval``, ``bf_window`` (min), ``bf_max_job_test``, ``sched_interval`` from
    ``scontrol show config`` (Slurm's defaults where unset)."""
    line = next(
        (row for row in config_text.splitlines() if row.startswith("SchedulerParameters")), ""
    )
    found = dict(re.findall(r"(\w+)=(\d+)", line.split("=", 1)[1] if "=" in line else ""))
    return {
        "bf_interval": float(found.get("bf_interval", 30)),
        "bf_window_min": float(found.get("bf_window", 1440)),
        "bf_max_job_test": float(found.get("bf_max_job_test", 500)),
        "sched_interval": float(found.get("sched_interval", 60)),
    }


# ----------------------------------------------------------------------------- simulation


def predict(
    workload: Workload,
    topology: str,
    params: Mapping[str, float],
    gpus_per_node: int,
    daemon_interval_s: float = 0.0,
    pin_latency_s: float = 0.0,
) -> dict[str, dict[str, Any]]:
    """The simulator's figures for the compressed workload under both policies.

    ``daemon_interval_s`` and ``pin_latency_s`` (0: off) start slurmopt's jobs as the
    live daemon does: at its next cycle, after the pin and release.
    """
    from slurmopt.fabric.loaders import load_fabric_file

    fabric = load_fabric_file(topology)
    trace = sim_trace(workload)
    out = {}
    for policy in ("slurm-backfill-tree", "slurmopt"):
        result = simulate(
            trace,
            fabric,
            policy,
            CommModel(enabled=False),  # sleep jobs do not communicate
            gpus_per_node=gpus_per_node,
            bf_max_job_test=int(params["bf_max_job_test"]),
            bf_window_s=params["bf_window_min"] * 60,
            bf_interval_s=params["bf_interval"],
            daemon_interval_s=daemon_interval_s,
            pin_latency_s=pin_latency_s,
        )
        out[policy] = result.metrics
    return out


# ----------------------------------------------------------------------------- live part


def _run(*argv: str, timeout: float = 60) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def store_pins(store_dir: str) -> dict[int, float]:
    """Job id -> when the daemon's cycle last pinned it, from a run's store."""
    from sqlalchemy import select

    from slurmopt.store import JobTransition, ManagedJobState, Store

    store = Store(f"sqlite:///{store_dir}/slurmopt.db", create=False)
    with store.begin() as session:
        rows = session.execute(
            select(JobTransition.job_id, JobTransition.at)
            .where(JobTransition.to_state == ManagedJobState.PINNED)
            .order_by(JobTransition.at)
        ).all()
    store.engine.dispose()
    return {job_id: at for job_id, at in rows}  # a later pin replaces an undone one


@contextmanager
def _sandbox_lock() -> Iterator[None]:
    from tests.sandbox import exclusive_cluster

    _log("waiting for the sandbox lock")
    with exclusive_cluster():
        _log("sandbox lock taken")
        yield


class LiveRun:
    """One replay of the workload on the sandbox, with or without the daemon."""

    def __init__(self, workload: Workload, label: str, conf: str, daemon: bool) -> None:
        self.workload = workload
        self.label = label
        self.conf = conf
        self.daemon = daemon
        self.run_tag = f"{label}{int(time.time()) % 100000}"
        self.workdir = str(Path(conf).parent.parent / "jobs")
        self.ids: dict[int, str] = {}
        self.lock = threading.Lock()
        self.samples: list[Sample] = []
        self.submit_errors: list[str] = []
        self.submit_lag_s: list[float] = []
        self._stop = threading.Event()
        self._daemon: subprocess.Popen[bytes] | None = None
        self._store_dir: str | None = None

    # -- daemon
    def _start_daemon(self) -> None:
        from slurmopt.config import load_config
        from slurmopt.daemon.heartbeat import read_heartbeat

        self._store_dir = tempfile.mkdtemp(prefix="liveab-store-")
        env = {
            **os.environ,
            "SLURMOPT_DB": f"sqlite:///{self._store_dir}/slurmopt.db",
            "PYTHONPATH": os.pathsep.join(
                p
                for p in (str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH"))
                if p
            ),
        }
        log = open(Path(self._store_dir) / "daemon.log", "wb")  # noqa: SIM115 - kept for the run
        self._daemon = subprocess.Popen(
            [sys.executable, "-c", "from slurmopt.cli import main; main()", "daemon", "--enforce"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        config = load_config()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = read_heartbeat(config.heartbeat_path, max_age_s=config.heartbeat_max_age_s)
            hb = status.heartbeat
            if status.enforcing and hb is not None and hb.pid == self._daemon.pid:
                _log(f"daemon {self._daemon.pid} enforcing (store {self._store_dir})")
                return
            if self._daemon.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"the daemon did not start enforcing; see {self._store_dir}/daemon.log")

    def _stop_daemon(self) -> None:
        if self._daemon is not None and self._daemon.poll() is None:
            self._daemon.send_signal(signal.SIGTERM)
            try:
                self._daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._daemon.kill()
                self._daemon.wait()
        self._daemon = None

    @staticmethod
    def wait_heartbeat_gone() -> None:
        """Plain Slurm means the plugin fails open: wait until no fresh heartbeat enforces."""
        from slurmopt.config import load_config
        from slurmopt.daemon.heartbeat import read_heartbeat

        config = load_config()
        deadline = time.monotonic() + config.heartbeat_max_age_s + 30
        while time.monotonic() < deadline:
            status = read_heartbeat(config.heartbeat_path, max_age_s=config.heartbeat_max_age_s)
            if not status.enforcing:
                return
            time.sleep(1)
        raise RuntimeError("a slurmopt daemon is enforcing on the sandbox; plain run refused")

    @staticmethod
    def wait_idle(timeout: float = 180) -> None:
        """Wait for an empty queue (other people's jobs are never cancelled here)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _run("squeue", "-h", "-o", "%i").split():
                return
            time.sleep(2)
        raise RuntimeError(f"the sandbox queue did not empty within {timeout:g} s")

    # -- submission and sampling
    def _submit(self, job: LiveJob, origin: float) -> None:
        from slurmopt.submit import build_submission

        submission = build_submission(sbatch_args(job, self.run_tag, self.workdir))
        lag = time.monotonic() - origin - job.submit_s
        try:
            out = _run("sbatch", *submission.args)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            with self.lock:
                self.submit_errors.append(f"job {job.index}: {exc}")
            return
        with self.lock:
            self.ids[int(out.strip().split(";")[0])] = f"{JOB_PREFIX}-{self.run_tag}-{job.index}"
            self.submit_lag_s.append(lag)

    def _sample_loop(self, origin: float) -> None:
        while not self._stop.is_set():
            t = time.monotonic() - origin
            try:
                text = _run("squeue", "-h", "-o", "%i|%T|%N|%b|%j", timeout=20)
                self.samples.append(parse_squeue(text, t, prefix=f"{JOB_PREFIX}-{self.run_tag}-"))
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(SAMPLE_EVERY_S)

    def cancel_own(self) -> None:
        with self.lock:
            ids = [str(i) for i in self.ids]
        live = set(_run("squeue", "-h", "-o", "%i").split()) if ids else set()
        left = [i for i in ids if i in live]
        if left:
            _log(f"cancelling {len(left)} jobs left over")
            subprocess.run(["scancel", *left], check=False, capture_output=True)

    def execute(self, jobcomp: str, deadline_s: float) -> list[Row]:
        self.wait_idle()
        if self.daemon:
            self._start_daemon()
        else:
            self.wait_heartbeat_gone()
        origin = time.monotonic()
        sampler = threading.Thread(target=self._sample_loop, args=(origin,), daemon=True)
        sampler.start()
        try:
            _log(f"{self.label}: submitting {len(self.workload.jobs)} jobs")
            with ThreadPoolExecutor(max_workers=4) as pool:
                for job in self.workload.jobs:
                    delay = origin + job.submit_s - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    pool.submit(self._submit, job, origin)
            _log(f"{self.label}: all submitted; waiting for them to finish")
            end = origin + deadline_s
            rows: list[Row] = []
            while time.monotonic() < end:
                rows = rows_from_jobcomp(parse_jobcomp(Path(jobcomp).read_text()), self.ids)
                if len(rows) >= len(self.ids):
                    break
                time.sleep(3)
            _log(f"{self.label}: {len(rows)} of {len(self.ids)} jobs done")
            return rows
        finally:
            self._stop.set()
            sampler.join(timeout=30)
            self.cancel_own()
            self._stop_daemon()

    def summary(self, rows: Sequence[Row], nodes: int, gpus_per_node: int) -> dict[str, Any]:
        lag = sorted(self.submit_lag_s)
        return {
            **job_metrics(rows),
            **sample_metrics(self.samples, nodes, gpus_per_node),
            "submitted": len(self.ids),
            "unfinished": len(self.ids) - len(rows),
            "submit_errors": self.submit_errors[:5],
            "submit_lag_p95_s": _round(_percentile(lag, 95)),
            "store": self._store_dir,
        }


# ----------------------------------------------------------------------------- command line


def _parse_window(text: str) -> tuple[int, int]:
    try:
        start, count = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:COUNT, got {text!r}") from None
    if start < 0 or count <= 0:
        raise argparse.ArgumentTypeError(f"expected START >= 0 and COUNT > 0, got {text!r}")
    return start, count


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.live_ab", description=__doc__.split("\n")[0]
    )
    p.add_argument("--trace")
    p.add_argument("--trace-format")
    p.add_argument(
        "--window", type=_parse_window,
        help="START:COUNT: skip START jobs by submit time, keep COUNT",
    )  # fmt: skip
    p.add_argument("--compress", type=float, help="K: times divided by K")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--report", metavar="FILE", help="print a saved --json report as text")
    p.add_argument("--dry-run", action="store_true", help="compress and simulate only")
    p.add_argument(
        "--sim-pin-latency", type=float, metavar="S",
        help="simulate slurmopt's starts at the daemon's cycle (interval_s of its config) "
        "plus S seconds to pin and release; without it they start at once",
    )  # fmt: skip
    p.add_argument(
        "--deadline", type=float, default=1800,
        help="seconds after the first submission to wait for the jobs of one run",
    )  # fmt: skip
    return p


def _sandbox_shape(conf_dir: Path) -> tuple[int, int, list[str]]:
    """Nodes, GPUs per node and node names from the sandbox's gres.conf and topology.conf."""
    names: list[str] = []
    for line in (conf_dir / "topology.conf").read_text().splitlines():
        match = re.search(r"\bNodes=(\S+)", line)
        if match:
            names += expand(match.group(1))
    gres = (conf_dir / "slurm.conf").read_text()
    match = re.search(r"Gres=gpu:(\d+)", gres)
    return len(names), int(match.group(1)) if match else 8, names


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    conf = os.environ.get("SLURM_CONF", "/tmp/slurmopt-sandbox/etc/slurm.conf")
    os.environ["SLURM_CONF"] = conf  # slurmopt's config is found beside it
    if args.report:
        return _rerender(args.report)
    if None in (args.trace, args.trace_format, args.window, args.compress):
        parser.error("--trace, --trace-format, --window and --compress are required")
    conf_dir = Path(conf).parent
    nodes, gpn, _ = _sandbox_shape(conf_dir)
    start, count = args.window
    trace = read_trace(
        args.trace, args.trace_format, gpus_per_node=gpn, limit_jobs=count, skip_jobs=start
    )
    workload = compress(trace, args.compress, nodes, gpn)
    if args.dry_run:
        config_text = "SchedulerParameters=" + next(
            (
                line.split("=", 1)[1]
                for line in (conf_dir / "slurm.conf").read_text().splitlines()
                if line.startswith("SchedulerParameters=")
            ),
            "",
        )
    else:
        config_text = _run("scontrol", "show", "config")
    params = scheduler_params(config_text)
    from slurmopt.config import load_config

    interval_s = load_config().interval_s
    cycle = {} if args.sim_pin_latency is None else {
        "daemon_interval_s": interval_s, "pin_latency_s": args.sim_pin_latency,
    }  # fmt: skip
    sim = predict(workload, str(conf_dir / "topology.conf"), params, gpn, **cycle)
    header = {
        "trace": args.trace,
        "trace_format": args.trace_format,
        "window": {"skip": start, "jobs": count},
        "compress": args.compress,
        "jobs": len(workload.jobs),
        "dropped_too_big": workload.dropped_too_big,
        "multinode_jobs": sum(j.nodes > 1 for j in workload.jobs),
        "last_arrival_s": max((j.submit_s for j in workload.jobs), default=0.0),
        "mean_sleep_s": _round(_mean([j.sleep_s for j in workload.jobs])),
        "cluster": {"nodes": nodes, "gpus_per_node": gpn},
        "slurm": params,
        "notes": list(trace.notes),
        "sim_start_delay": cycle,
    }
    sim_plain, sim_ours = sim["slurm-backfill-tree"], sim["slurmopt"]
    if args.dry_run:
        plain: dict[str, Any] = {}
        ours: dict[str, Any] = {}
    else:
        jobcomp = re.search(r"^JobCompLoc\s*=\s*(\S+)", config_text, re.M)
        if jobcomp is None:
            raise SystemExit("live_ab: the sandbox has no JobCompLoc (jobcomp/filetxt) to read")
        results = {}
        with _sandbox_lock():
            for label, daemon in (("plain", False), ("slurmopt", True)):
                run = LiveRun(workload, label, conf, daemon)
                rows = run.execute(jobcomp.group(1), args.deadline)
                results[label] = run.summary(rows, nodes, gpn)
        plain, ours = results["plain"], results["slurmopt"]
        ctld_log = re.search(r"^SlurmctldLogFile\s*=\s*(\S+)", config_text, re.M)
        if ours.get("store") and ctld_log is not None:
            starts = parse_ctld_starts(Path(ctld_log.group(1)).read_text(errors="replace"))
            ours["pin_latency"] = pin_latency(store_pins(ours["store"]), starts)
    header["daemon_interval_s"] = interval_s
    report = {
        **header,
        "live": {"plain": plain, "slurmopt": ours},
        "simulated": {
            "slurm-backfill-tree": _sim_figures(sim_plain),
            "slurmopt": _sim_figures(sim_ours),
        },
    }
    report["ratios"] = [asdict(r) for r in _table(report)]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_report(report))
    return 0


def _table(report: Mapping[str, Any]) -> list[RatioRow]:
    """The ratio table of a report (live and simulated figures, workload and settings)."""
    plain, ours = report["live"]["plain"], report["live"]["slurmopt"]
    ctx = Context(
        multinode_jobs=report["multinode_jobs"],
        daemon_interval_s=report.get("daemon_interval_s", 0.0),
        mean_sleep_s=report["mean_sleep_s"] or 0.0,
        sched_interval_s=report["slurm"]["sched_interval"],
        unfinished=int(plain.get("unfinished", 0)) + int(ours.get("unfinished", 0)),
        extra_wait_s=(ours.get("mean_queue_delay_s") or 0.0)
        - (plain.get("mean_queue_delay_s") or 0.0),
        cycle_simulated=bool(report.get("sim_start_delay")),
    )
    sim = report["simulated"]
    return ratio_table(plain, ours, sim["slurm-backfill-tree"], sim["slurmopt"], ctx)


def render_report(report: Mapping[str, Any]) -> str:
    """The text form of a report: workload, makespans, then the ratio table."""
    window = report["window"]
    sim = report["simulated"]
    lines = [
        f"{report['trace']} ({report['trace_format']}), jobs {window['skip'] + 1}-"
        f"{window['skip'] + window['jobs']} by submit, compressed x{report['compress']:g}: "
        f"{report['jobs']} jobs ({report['multinode_jobs']} multi-node, "
        f"{report['dropped_too_big']} dropped too big), last arrival "
        f"{report['last_arrival_s']:.0f} s, mean sleep {report['mean_sleep_s']} s",
        f"simulated makespan: plain {sim['slurm-backfill-tree']['makespan_s']} s, "
        f"slurmopt {sim['slurmopt']['makespan_s']} s",
    ]
    for label, figures in report["live"].items():
        if figures:
            lines.append(
                f"live {label}: {figures['jobs']} jobs ran, {figures['unfinished']} unfinished, "
                f"makespan {figures['makespan_s']} s, mean queueing delay "
                f"{figures['mean_queue_delay_s']} s, p95 submit lag {figures['submit_lag_p95_s']} s"
            )
    pin = report["live"].get("slurmopt", {}).get("pin_latency")
    if pin and pin["jobs"]:
        lines.append(
            f"pin latency (the daemon's cycle that pinned a job to slurmctld's start, "
            f"{pin['jobs']} jobs): median {pin['median_s']} s, p95 {pin['p95_s']} s, "
            f"mean {pin['mean_s']} s, max {pin['max_s']} s"
        )
    lines.append(render_table(_table(report)))
    return "\n".join(lines)


def _rerender(path: str) -> int:
    """``--report FILE``: a saved ``--json`` report as text, its causes by the current rules."""
    report = json.loads(Path(path).read_text())
    if not report.get("daemon_interval_s"):
        from slurmopt.config import load_config

        report["daemon_interval_s"] = load_config().interval_s
    print(render_report(report))
    return 0


def _sim_figures(metrics: Mapping[str, Any]) -> dict[str, Any]:
    keys = {sim_key for _, _, sim_key in METRICS} | {"makespan_s", "multinode_jobs", "jobs"}
    return {k: metrics.get(k) for k in sorted(keys)}


if __name__ == "__main__":
    sys.exit(main())
