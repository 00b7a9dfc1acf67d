"""The daemon's Prometheus endpoint against the real Slurm sandbox: the figures are Slurm's.

Known GPUs are occupied with plain ``sbatch --nodelist`` jobs, an advisory
daemon runs with ``--metrics-port``, and its scrape must agree with
``slurmopt fragmentation --json`` taken at the same time, count the pending
queue, and observe a job's wait when it starts.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurmopt.daemon.heartbeat import write_heartbeat
from tests.integration.test_daemon import CLI, DaemonRun, _wait
from tests.sandbox import SlurmSandbox, free_port

pytestmark = pytest.mark.slurm

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class MetricsDaemonRun(DaemonRun):
    """An advisory daemon (it never touches a job) serving metrics on ``port``."""

    def __init__(self, slurm: SlurmSandbox, tmp_path: Path) -> None:
        super().__init__(slurm, tmp_path)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def start(self, hook: str | None = None, interval: float = 1.0) -> None:
        assert hook is None, "the metrics daemon takes no fault hook"
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        argv = ["daemon", "--config", str(self.config), "--db", self.db]
        argv += ["--interval", str(interval)]
        self.proc = subprocess.Popen(
            [*CLI, *argv, "--advisory", "--metrics-port", str(self.port)],
            env=self.slurm.env,
            stdout=log,
            stderr=log,
        )
        log.close()

    def scrape(self) -> Samples:
        try:
            body = httpx.get(self.url, timeout=5).text
        except httpx.HTTPError:
            return {}
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body)
            for s in family.samples
        }


def _get(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@pytest.fixture
def daemon(slurm: SlurmSandbox, tmp_path: Path) -> Iterator[MetricsDaemonRun]:
    run = MetricsDaemonRun(slurm, tmp_path)
    try:
        yield run
    finally:
        run.stop()
        write_heartbeat(run.heartbeat, False)
        if run.proc is not None and run.proc.returncode not in (0, None):
            print(run.log())


def _fragmentation(slurm: SlurmSandbox) -> dict[str, object]:
    report = json.loads(slurm.run(*CLI, "fragmentation", "--json"))
    assert isinstance(report, dict)
    return report


def test_scrape_matches_slurm_and_the_fragmentation_report(
    slurm: SlurmSandbox, daemon: MetricsDaemonRun
) -> None:
    # 16 GPUs on gpu[001-002] (whole nodes), 3 of gpu010's 8 (its other 5 are stranded).
    whole = slurm.sbatch("-N", "2", "-w", "gpu[001-002]", "--gres=gpu:8", "-t", "5")
    partly = slurm.sbatch("-w", "gpu010", "--gres=gpu:3", "-t", "5")
    for job in (whole, partly):
        slurm.wait_state(job, "RUNNING")
    # Two pending jobs, held so they stay pending: one plain, one tagged (managed).
    plain = slurm.sbatch("--hold", "--gres=gpu:8", "-t", "2", wrap="sleep 30")
    out = slurm.run(
        *CLI, "submit", "--parsable", "-o", "/dev/null", "-D", str(slurm.workdir),
        "--hold", "--gres=gpu:8", "-t", "2", "--wrap", "sleep 30",
    )  # fmt: skip
    managed = int(out.strip().split(";")[0])
    assert slurm.job_field(managed, "%T") == "PENDING"

    daemon.start()

    def agreeing() -> tuple[Samples, dict[str, object]] | None:
        before = _fragmentation(slurm)
        samples = daemon.scrape()
        after = _fragmentation(slurm)
        if not samples or before["allocated_gpus"] != after["allocated_gpus"]:
            return None
        if _get(samples, "slurmopt_gpus_allocated") != after["allocated_gpus"]:
            return None  # the daemon has not read this state yet
        if not _get(samples, "slurmopt_cycles_total", mode="advisory"):
            return None  # gauges are set mid-cycle; the cycle counter moves at its end
        return samples, after

    found = _wait("a scrape that matches the cluster", agreeing, timeout=90)
    assert isinstance(found, tuple)
    samples, report = found
    assert _get(samples, "slurmopt_gpus_capacity") == 256 == report["total_gpus"]
    assert _get(samples, "slurmopt_gpus_allocated") == 19
    assert _get(samples, "slurmopt_gpus_stranded") == report["stranded_gpus"] == 5
    assert _get(samples, "slurmopt_gpus_free") == report["free_gpus"]
    assert _get(samples, "slurmopt_gpus_unavailable") == report["unavailable_gpus"] == 0
    index = _get(samples, "slurmopt_fragmentation_index")
    assert index == pytest.approx(float(str(report["fragmentation_index"])), abs=1e-6)
    largest = report["largest_job_now"]
    assert isinstance(largest, dict)
    assert _get(samples, "slurmopt_largest_job_now_nodes") == largest["whole_nodes"] == 29
    assert _get(samples, "slurmopt_largest_job_now_leaf_nodes") == 8
    assert _get(samples, "slurmopt_pending_jobs") == 2
    assert _get(samples, "slurmopt_pending_managed_jobs") == 1
    assert _get(samples, "slurmopt_daemon_info", version="0.1.0", mode="advisory") == 1
    last = _get(samples, "slurmopt_last_successful_cycle_timestamp_seconds") or 0
    assert abs(time.time() - last) < 60
    assert (_get(samples, "slurmopt_plan_duration_seconds_count") or 0) >= 1
    assert _get(samples, "slurmopt_actions_total", kind="pin") == 0  # advisory: hands off

    # The plain job starts once released: its wait is observed, and the queue shrinks.
    slurm.run("scontrol", "release", str(plain))
    slurm.wait_state(plain, "RUNNING", timeout=60)
    started = _wait(
        "the start to be observed",
        lambda: (
            (s := daemon.scrape())
            and (_get(s, "slurmopt_job_wait_seconds_count", managed="false") or 0) >= 1
            and s
        ),
        timeout=60,
    )
    assert isinstance(started, dict)
    assert _get(started, "slurmopt_pending_jobs") == 1
    assert (_get(started, "slurmopt_job_wait_seconds_sum", managed="false") or 0) > 0

    assert daemon.stop(signal.SIGTERM) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(daemon.url, timeout=2)
