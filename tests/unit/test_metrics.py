"""Prometheus metrics: every value from a hand-built snapshot, report, plan and cycle result."""

from __future__ import annotations

import dataclasses
import logging
import math
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.validation import METRIC_LABEL_NAME_RE, METRIC_NAME_RE

from slurmopt import __version__
from slurmopt.cli import daemon as daemon_cli
from slurmopt.daemon.loop import CycleResult, Daemon, Mode
from slurmopt.errors import SlurmCommandError, SlurmUnavailable
from slurmopt.metrics import (
    DEFAULT_METRICS_ADDRESS,
    MAX_NODE_REASONS,
    DaemonMetrics,
    PreemptionOutcome,
    normalise_reason,
    serve,
    unavailable_nodes_by_reason,
)
from slurmopt.model import ClusterSnapshot, Job, JobState, Node, NodeState, Partition
from slurmopt.policy.fragmentation import fragmentation_report
from slurmopt.policy.plan import Plan, Reason, Reservation, Start, Unplaced
from slurmopt.store import Store
from tests.fakes.slurm import NOW, FakeSlurm
from tests.unit.test_daemon_fakes import TAG, config, held_job, two_leaves

FABRIC = two_leaves()[1]


def _node(name: str, alloc: int = 0, **kw: object) -> Node:
    state = NodeState.IDLE if alloc == 0 else NodeState.MIXED
    values: dict[str, object] = {"state": state, "gpus_total": 8, "gpus_alloc": alloc}
    values.update(kw)
    return Node(name=name, partitions=("gpu",), **values)  # type: ignore[arg-type]


def _running(job_id: int, node: str, gpus: int, waited: float, **kw: object) -> Job:
    return Job(
        job_id=job_id,
        state=JobState.RUNNING,
        partition="gpu",
        nodes=(node,),
        node_count=1,
        gpus_per_node=gpus,
        submit_time=NOW - 1000,
        start_time=NOW - 1000 + waited,
        **kw,  # type: ignore[arg-type]
    )


def _snapshot(*jobs: Job, nodes: list[Node] | None = None) -> ClusterSnapshot:
    """leafA: a0 busy (8 used), a1 partly used (3 used), a2, a3 free; leafB: b0 drained, b1 down."""
    if nodes is None:
        nodes = [
            _node("a0", 8, state=NodeState.ALLOCATED),
            _node("a1", 3),
            _node("a2"),
            _node("a3"),
            _node("b0", flags=frozenset({"DRAIN"}), reason="slurmopt: gpu3:xid79 [root@12:00]"),
            _node("b1", state=NodeState.DOWN, reason="Not responding"),
            _node("b2"),
            _node("b3"),
        ]
    part = Partition("gpu", tuple(n.name for n in nodes), default=True)
    return ClusterSnapshot.build(NOW, nodes, jobs, [part])


BASE_JOBS = (
    _running(1, "a0", 8, 30.0, admin_comment=TAG),
    _running(2, "a1", 3, 5.0),
    held_job(7),
    Job(job_id=8, state=JobState.PENDING, partition="gpu", node_count=1, gpus_per_node=2),
    Job(job_id=9, state=JobState.COMPLETED, partition="gpu"),
)


def _value(metrics: DaemonMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


#: Every metric family the daemon exports (OpenMetrics names: counters without ``_total``).
EXPORTED = {
    "slurmopt_gpus_capacity",
    "slurmopt_gpus_allocated",
    "slurmopt_gpus_free",
    "slurmopt_gpus_stranded",
    "slurmopt_gpus_unavailable",
    "slurmopt_fragmentation_index",
    "slurmopt_fgd_unusable_share",
    "slurmopt_largest_job_now_nodes",
    "slurmopt_largest_job_now_leaf_nodes",
    "slurmopt_largest_job_now_node_gpus",
    "slurmopt_largest_job_now_tier_nodes",
    "slurmopt_switch_free_gpus",
    "slurmopt_switch_free_nodes",
    "slurmopt_pending_jobs",
    "slurmopt_pending_managed_jobs",
    "slurmopt_unavailable_nodes",
    "slurmopt_job_wait_seconds",
    "slurmopt_plan_duration_seconds",
    "slurmopt_plan_jobs",
    "slurmopt_plan_depth",
    "slurmopt_plan_check_mismatches",
    "slurmopt_cycles",
    "slurmopt_slurm_errors",
    "slurmopt_actions",
    "slurmopt_preemptions",
    "slurmopt_checkpoint_ack_seconds",
    "slurmopt_daemon",
    "slurmopt_last_successful_cycle_timestamp_seconds",
    "slurmopt_mode",
    "slurmopt_degraded",
    "slurmopt_lease_acquired",
    "slurmopt_heartbeat_last_write_timestamp_seconds",
    "slurmopt_health_drained_nodes",
    "slurmopt_health_drain_cap_nodes",
}
#: The daemon's process and Python runtime, from prometheus_client's own collectors.
PROCESS = {
    "process_cpu_seconds",
    "process_open_fds",
    "process_max_fds",
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "python_info",
}


@pytest.fixture
def metrics() -> DaemonMetrics:
    return DaemonMetrics()


def test_gpu_and_fragmentation_gauges_are_the_reports_figures(metrics: DaemonMetrics) -> None:
    snapshot = _snapshot(*BASE_JOBS)
    report = fragmentation_report(snapshot, FABRIC)
    metrics.observe_fragmentation(report)
    # 8 nodes x 8 GPUs; 11 allocated; b0 and b1 out of service (16); a1's 5 are stranded.
    expected = {
        "slurmopt_gpus_capacity": 64,
        "slurmopt_gpus_allocated": 11,
        "slurmopt_gpus_unavailable": 16,
        "slurmopt_gpus_free": 37,
        "slurmopt_gpus_stranded": 5,
        "slurmopt_largest_job_now_nodes": 4,  # a2, a3, b2, b3
        "slurmopt_largest_job_now_leaf_nodes": 2,
        "slurmopt_largest_job_now_node_gpus": 8,
    }
    for name, value in expected.items():
        assert _value(metrics, name) == value, name
    assert _value(metrics, "slurmopt_fragmentation_index") == pytest.approx(5 / 37)
    assert report.fgd_unusable_share is not None
    assert _value(metrics, "slurmopt_fgd_unusable_share") == pytest.approx(
        report.fgd_unusable_share
    )


def test_fgd_share_is_nan_without_gpu_jobs(metrics: DaemonMetrics) -> None:
    assert math.isnan(_value(metrics, "slurmopt_fgd_unusable_share") or 0.0)
    metrics.observe_fragmentation(fragmentation_report(_snapshot(*BASE_JOBS), FABRIC))
    assert not math.isnan(_value(metrics, "slurmopt_fgd_unusable_share") or math.nan)
    metrics.observe_fragmentation(fragmentation_report(_snapshot(), FABRIC))
    assert math.isnan(_value(metrics, "slurmopt_fgd_unusable_share") or 0.0)


def test_queue_lengths_count_pending_and_pending_managed_jobs() -> None:
    metrics = DaemonMetrics()
    metrics.observe_snapshot(_snapshot(*BASE_JOBS))
    assert _value(metrics, "slurmopt_pending_jobs") == 2  # 7 and 8
    assert _value(metrics, "slurmopt_pending_managed_jobs") == 1  # 7 carries the tag
    by_partition = DaemonMetrics(managed_partitions=("gpu",))
    by_partition.observe_snapshot(_snapshot(*BASE_JOBS))
    assert _value(by_partition, "slurmopt_pending_managed_jobs") == 2


def test_unavailable_nodes_by_state_and_normalised_reason(metrics: DaemonMetrics) -> None:
    metrics.observe_snapshot(_snapshot(*BASE_JOBS))
    name = "slurmopt_unavailable_nodes"
    assert _value(metrics, name, state="drain", reason="slurmopt:_gpu:xid79") == 1
    assert _value(metrics, name, state="down", reason="not_responding") == 1
    # The next snapshot replaces the set: b0 is back, b1 lost its reason.
    nodes = [_node("a0"), _node("b1", state=NodeState.DOWN)]
    metrics.observe_snapshot(_snapshot(nodes=nodes))
    assert _value(metrics, name, state="drain", reason="slurmopt:_gpu:xid79") is None
    assert _value(metrics, name, state="down", reason="down") == 1


def test_node_reasons_are_folded_and_capped_but_every_node_counts() -> None:
    assert normalise_reason("  Kill task failed [slurm@2024-01-01T00:00:00] ", "x") == (
        "kill_task_failed"
    )
    assert normalise_reason("gpu017 unreachable", "x") == "gpu_unreachable"
    assert normalise_reason("", "drain") == "drain"
    assert len(normalise_reason("y" * 500, "x")) == 48
    nodes = [
        _node(f"n{i}", flags=frozenset({"DRAIN"}), reason=f"ticket {i} {'z' * (i % 7)}")
        for i in range(3 * MAX_NODE_REASONS)
    ]
    nodes += [_node("m0", flags=frozenset({"MAINTENANCE"})), _node("ok")]
    counts = unavailable_nodes_by_reason(nodes)
    assert sum(counts.values()) == len(nodes) - 1
    assert len(counts) <= MAX_NODE_REASONS + 2  # one "other" per state class at most
    assert counts[("drain", "other")] > 0
    assert (
        counts.get(("maintenance", "maintenance"), 0) + counts.get(("maintenance", "other"), 0) == 1
    )


def test_wait_time_is_observed_once_per_start_and_not_for_jobs_running_before(
    metrics: DaemonMetrics,
) -> None:
    hist = "slurmopt_job_wait_seconds"
    metrics.observe_snapshot(_snapshot(*BASE_JOBS))
    assert _value(metrics, f"{hist}_count", managed="true") == 0
    assert _value(metrics, f"{hist}_count", managed="false") == 0
    started = dataclasses.replace(
        BASE_JOBS[2], state=JobState.RUNNING, start_time=NOW, nodes=("a2",), held=False
    )
    assert started.submit_time is not None
    later = _snapshot(BASE_JOBS[0], BASE_JOBS[1], started, BASE_JOBS[3])
    for _ in range(3):
        metrics.observe_snapshot(later)
    waited = NOW - started.submit_time
    assert _value(metrics, f"{hist}_count", managed="true") == 1
    assert _value(metrics, f"{hist}_sum", managed="true") == pytest.approx(waited)
    assert _value(metrics, f"{hist}_bucket", managed="true", le="30.0") == 0
    assert _value(metrics, f"{hist}_bucket", managed="true", le="120.0") == 1
    # Requeued and started again: a new start, observed again.
    again = dataclasses.replace(started, start_time=NOW + 50)
    metrics.observe_snapshot(_snapshot(BASE_JOBS[0], BASE_JOBS[1], again))
    assert _value(metrics, f"{hist}_count", managed="true") == 2


def test_plan_duration_and_decisions(metrics: DaemonMetrics) -> None:
    result = Plan(
        actions=(Start(7, ("a2",), Reason.BEST_FIT_NODE),),
        reservations=(Reservation(8, ("a3",), NOW + 60, Reason.RESERVED),),
        unplaced=(
            Unplaced(8, Reason.RESERVED, expected_start=NOW + 60),
            Unplaced(10, Reason.WAITS_FOR_RESOURCES),
        ),
        now=NOW,
    )
    metrics.observe_plan(result, 0.03)
    metrics.observe_plan(result, 0.002)
    assert _value(metrics, "slurmopt_plan_duration_seconds_count") == 2
    assert _value(metrics, "slurmopt_plan_duration_seconds_sum") == pytest.approx(0.032)
    assert _value(metrics, "slurmopt_plan_duration_seconds_bucket", le="0.0025") == 1
    assert _value(metrics, "slurmopt_plan_jobs", decision="start") == 1
    assert _value(metrics, "slurmopt_plan_jobs", decision="reserve") == 1
    assert _value(metrics, "slurmopt_plan_jobs", decision="not_started") == 2


def test_cycles_by_mode_info_and_last_success(metrics: DaemonMetrics) -> None:
    info = "slurmopt_daemon_info"
    assert _value(metrics, info, version=__version__, mode="starting") == 1
    planned = Plan(actions=(), reservations=(), unplaced=(), now=NOW)
    metrics.observe_cycle(CycleResult(Mode.ENFORCING, plan=planned), NOW)
    metrics.observe_cycle(CycleResult(Mode.ENFORCING, plan=planned), NOW + 5)
    metrics.observe_cycle(CycleResult(Mode.UNAVAILABLE, error="down"), NOW + 10)
    assert _value(metrics, "slurmopt_cycles_total", mode="enforcing") == 2
    assert _value(metrics, "slurmopt_cycles_total", mode="unavailable") == 1
    assert _value(metrics, info, version=__version__, mode="unavailable") == 1
    assert _value(metrics, info, version=__version__, mode="enforcing") is None
    assert _value(metrics, "slurmopt_last_successful_cycle_timestamp_seconds") == NOW + 5


def test_preemptions_and_checkpoint_ack_latency(metrics: DaemonMetrics) -> None:
    name = "slurmopt_preemptions_total"
    assert _value(metrics, name, outcome="acknowledged") == 0  # registered before any preemption
    metrics.record_preemption(PreemptionOutcome.ACKNOWLEDGED, ack_seconds=12.0)
    metrics.record_preemption("not_acknowledged")
    metrics.observe_checkpoint_ack(3.0)
    assert _value(metrics, name, outcome="acknowledged") == 1
    assert _value(metrics, name, outcome="not_acknowledged") == 1
    assert _value(metrics, "slurmopt_checkpoint_ack_seconds_count") == 2
    assert _value(metrics, "slurmopt_checkpoint_ack_seconds_sum") == 15.0
    with pytest.raises(ValueError):
        metrics.record_preemption("exploded")


def test_instrumented_client_counts_writes_and_adapter_errors(metrics: DaemonMetrics) -> None:
    fake = FakeSlurm(two_leaves()[0], [held_job(7)])
    client = metrics.instrument(fake)
    assert metrics.instrument(client) is client
    client.pin(7, ["a0"])
    client.release(7)
    client.hold(7)
    client.set_comment(7, "slurmopt: WAITS_FOR_RESOURCES")
    with pytest.raises(SlurmCommandError):
        client.release(99)
    fake.down = True
    with pytest.raises(SlurmUnavailable):
        client.snapshot()
    for kind in ("pin", "release", "hold", "comment"):
        assert _value(metrics, "slurmopt_actions_total", kind=kind) == 1, kind
    errors = "slurmopt_slurm_errors_total"
    assert _value(metrics, errors, error="SlurmCommandError", operation="release") == 1
    assert _value(metrics, errors, error="SlurmUnavailable", operation="snapshot") == 1
    assert fake.count("pin", 7) == 1  # the real client did the work
    assert client.clock == fake.clock  # type: ignore[attr-defined]  # the wrapper forwards them


def test_a_daemon_cycle_feeds_every_part(tmp_path: Path) -> None:
    nodes, fabric = two_leaves()
    fake = FakeSlurm(nodes, [held_job(7)])
    store = Store.open(f"sqlite:///{tmp_path / 'd.db'}")
    try:
        daemon = Daemon(
            config(tmp_path),
            fake,
            store,
            holder="host:1",
            clock=lambda: fake.clock,
            fabric_loader=lambda _c, _s: fabric,
        )
        daemon.cycle()
        m = daemon.metrics
        assert _value(m, "slurmopt_cycles_total", mode="enforcing") == 1
        assert _value(m, "slurmopt_gpus_capacity") == 64
        assert _value(m, "slurmopt_pending_managed_jobs") == 1
        assert _value(m, "slurmopt_actions_total", kind="pin") == 1
        assert _value(m, "slurmopt_actions_total", kind="release") == 1
        assert _value(m, "slurmopt_plan_duration_seconds_count") == 1
        assert _value(m, "slurmopt_last_successful_cycle_timestamp_seconds") == NOW
        fake.start(7)
        fake.clock += 5
        daemon.cycle()
        assert _value(m, "slurmopt_job_wait_seconds_count", managed="true") == 1
        assert _value(m, "slurmopt_gpus_allocated") == 8
        fake.down = True
        fake.clock += 5
        daemon.cycle()
        assert _value(m, "slurmopt_cycles_total", mode="unavailable") == 1
        errors = "slurmopt_slurm_errors_total"
        assert _value(m, errors, error="SlurmUnavailable", operation="snapshot") == 1
        assert _value(m, "slurmopt_last_successful_cycle_timestamp_seconds") == NOW + 5
    finally:
        store.close()


def test_names_follow_prometheus_rules_and_the_exposition_parses(metrics: DaemonMetrics) -> None:
    metrics.observe_snapshot(_snapshot(*BASE_JOBS))
    metrics.observe_fragmentation(fragmentation_report(_snapshot(*BASE_JOBS), FABRIC))
    text = generate_openmetrics(metrics.registry).decode()
    families = list(text_string_to_metric_families(text))  # strict parser: raises on bad text
    assert {f.name for f in families} - PROCESS == EXPORTED
    assert PROCESS <= {f.name for f in families}
    for family in families:
        if family.name in PROCESS:
            continue
        assert family.name.startswith("slurmopt_"), family.name
        assert METRIC_NAME_RE.match(family.name), family.name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
        for sample in family.samples:
            assert all(METRIC_LABEL_NAME_RE.match(label) for label in sample.labels)
    assert b"slurmopt_gpus_capacity 64.0" in generate_latest(metrics.registry)


@pytest.fixture
def served(metrics: DaemonMetrics) -> Iterator[tuple[DaemonMetrics, int]]:
    server = serve(metrics, 0)
    try:
        yield metrics, server.port
    finally:
        server.close()


def test_served_over_http_on_localhost_then_closed(metrics: DaemonMetrics) -> None:
    metrics.observe_fragmentation(fragmentation_report(_snapshot(*BASE_JOBS), FABRIC))
    server = serve(metrics, 0)
    assert server.address == DEFAULT_METRICS_ADDRESS == "127.0.0.1"
    url = f"http://127.0.0.1:{server.port}/metrics"
    try:
        body = httpx.get(url, timeout=10).text
        assert "slurmopt_gpus_stranded 5.0" in body
    finally:
        server.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


def test_cli_runs_on_without_metrics_when_the_port_is_taken(
    metrics: DaemonMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    assert daemon_cli._METRICS_ADDRESS == DEFAULT_METRICS_ADDRESS
    assert daemon_cli._serve_metrics(metrics, 0, "127.0.0.1") is None
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR):
            assert daemon_cli._serve_metrics(metrics, port, "127.0.0.1") is None
    assert f"cannot serve metrics on 127.0.0.1:{port}" in caplog.text


def test_mode_degraded_lease_and_heartbeat_setters(metrics: DaemonMetrics) -> None:
    assert _value(metrics, "slurmopt_mode", mode="starting") == 1
    metrics.set_mode("enforcing")
    assert _value(metrics, "slurmopt_mode", mode="enforcing") == 1
    assert _value(metrics, "slurmopt_mode", mode="starting") == 0
    metrics.set_degraded(["no job_submit plugin in JobSubmitPlugins", "jobs 12 and 13 unstamped"])
    assert _value(metrics, "slurmopt_degraded", reason="jobs_#_and_#_unstamped") is None
    reasons = {
        s.labels["reason"]
        for f in metrics.registry.collect()
        if f.name == "slurmopt_degraded"
        for s in f.samples
    }
    assert len(reasons) == 2 and "no_job_submit_plugin_in_jobsubmitplugins" in reasons
    metrics.set_degraded([f"reason {chr(97 + i)}" for i in range(20)])
    assert (
        sum(
            1
            for f in metrics.registry.collect()
            if f.name == "slurmopt_degraded"
            for _ in f.samples
        )
        == 8
    )  # bounded: the rest under "other"
    metrics.set_degraded([])
    assert not [
        s for f in metrics.registry.collect() if f.name == "slurmopt_degraded" for s in f.samples
    ]
    metrics.lease_acquired()
    metrics.lease_acquired()
    assert _value(metrics, "slurmopt_lease_acquired_total") == 2
    metrics.heartbeat_written(NOW)
    assert _value(metrics, "slurmopt_heartbeat_last_write_timestamp_seconds") == NOW


def test_drains_and_their_cap_come_from_the_snapshot() -> None:
    from slurmopt.health.agent import DrainCap

    metrics = DaemonMetrics(drain_cap=DrainCap(max_nodes=1, max_share=0.5))
    metrics.observe_snapshot(_snapshot(*BASE_JOBS))
    assert _value(metrics, "slurmopt_health_drain_cap_nodes") == 1
    # b0 is drained with slurmopt's reason; b1 is down for another reason and does not count.
    assert _value(metrics, "slurmopt_health_drained_nodes") == 1
